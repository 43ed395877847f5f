"""Journal replay never fails on bad data, and journals stay small.

Garbage is written into real segment files (as a disk fault or an older version would
leave it): whole batches that do not decode are logged with their offsets, counted and
skipped, whether they sit in a sealed segment trusted after a clean shutdown or in a
tail kept by crash recovery (a valid CRC). Journal topics get small segments, so
maintenance compacts them to a bounded size.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from pathlib import Path

import crc32c
import pytest
from localstore_helpers import StoreFactory

from floe.protocol.batch import HEADER_SIZE, BatchHeader, scan
from floe.storage.journal import (
    JOURNAL_CONFIGS,
    JOURNAL_SEGMENT_BYTES,
    SKIP_LOG_LIMIT,
    Journal,
)
from floe.storage.local import LocalStore
from floe.types import PartitionId, TopicName

J = TopicName("__state")
SMALL = {"cleanup.policy": "compact", "segment.bytes": "300"}
_HEADER = struct.Struct(">qiiBIhiqqqhii")


def forge(
    base_offset: int, payload: bytes, *, count: int = 1, attributes: int = 0, delta: int = 0
) -> bytes:
    """A v2 batch with a valid CRC around an arbitrary records section."""
    ts = 1_700_000_000_000
    head = _HEADER.pack(
        base_offset, HEADER_SIZE - 12 + len(payload), 0, 2, 0, attributes, delta,
        ts, ts, -1, -1, -1, count,
    )  # fmt: skip
    buf = bytearray(head + payload)
    struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))
    return bytes(buf)


def partition_dir(tmp_path: Path) -> Path:
    return tmp_path / "data" / "logs" / f"{J}-0"


def batches(path: Path) -> list[BatchHeader]:
    return scan(path.read_bytes())


def skipped_lines(caplog: pytest.LogCaptureFixture, event: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith(event)]


def test_bad_batches_in_sealed_segments_are_skipped(
    open_store: StoreFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = open_store()
    journal = Journal(store, J, configs=SMALL)
    for i in range(16):
        journal.append([(b"k%d" % i, b"value-%d" % i)])
    store.close()
    segments = sorted(partition_dir(tmp_path).glob("*.log"))
    sealed = [(p, h) for p in segments[:-1] for h in batches(p)]
    assert len(sealed) >= 4
    damaged: dict[int, str] = {}
    for (path, h), how in zip(sealed, ["crc", "garbage", "codec", "magic"], strict=False):
        data = bytearray(path.read_bytes())
        body = h.size - HEADER_SIZE
        if how == "crc":  # a bit flip inside a record: the CRC no longer matches
            data[h.position + h.size - 2] ^= 0xFF
        elif how == "garbage":  # a valid CRC around records that do not decode
            new = forge(h.base_offset, b"\xff" * body)
            data[h.position : h.position + h.size] = new
        elif how == "codec":  # compression codec 7 does not exist
            new = forge(h.base_offset, bytes(body), attributes=7)
            data[h.position : h.position + h.size] = new
        else:  # a batch format this version does not know
            data[h.position + 16] = 1
        path.write_bytes(bytes(data))
        damaged[h.base_offset] = how

    caplog.set_level(logging.WARNING, "floe.storage.journal")
    again = Journal(open_store(), J, configs=SMALL)
    got = [(r.offset, r.key, r.value) for r in again.replay()]
    expected = [(i, b"k%d" % i, b"value-%d" % i) for i in range(16) if i not in damaged]
    assert got == expected
    assert again.skipped == 4
    lines = skipped_lines(caplog, "journal.batch.skipped")
    assert len(lines) == 4
    for offset, line in zip(sorted(damaged), lines, strict=True):
        assert f"topic={J} partition=0 offset={offset} " in line
    reasons = " | ".join(lines)
    assert "CRC32C mismatch" in reasons
    assert "compression type 7" in reasons
    assert "magic 1" in reasons


def test_garbage_kept_by_crash_recovery_is_skipped(
    open_store: StoreFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    crashed = open_store()
    journal = Journal(crashed, J)
    journal.append([(b"a", b"1"), (b"b", b"2")])
    asyncio.run(journal.durable())
    # kill -9, then a valid-CRC batch of garbage, a batch claiming 2^31-1 records, and
    # a torn tail (recovery cuts the tail and keeps the two whole batches)
    (segment,) = partition_dir(tmp_path).glob("*.log")
    with segment.open("ab") as f:
        f.write(forge(2, b"\x01\x02\x03" * 40, count=3, delta=2))
        f.write(forge(5, b"\x00" * 20, count=2**31 - 1))
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x09\x00\x00\x7f" + b"\xab" * 100)
    caplog.set_level(logging.WARNING, "floe.storage.journal")
    store = open_store()
    journal = Journal(store, J)
    assert journal.log.log_end_offset == 6
    assert [(r.key, r.value) for r in journal.replay()] == [(b"a", b"1"), (b"b", b"2")]
    assert journal.skipped == 2
    assert journal.append([(b"a", b"3")]) == 6
    assert [(r.offset, r.value) for r in journal.replay()] == [(0, b"1"), (1, b"2"), (6, b"3")]
    lines = skipped_lines(caplog, "journal.batch.skipped")
    assert [line.split(" reason=")[0] for line in lines[:2]] == [
        f"journal.batch.skipped topic={J} partition=0 offset=2 last_offset=4",
        f"journal.batch.skipped topic={J} partition=0 offset=5 last_offset=5",
    ]


def test_a_journal_full_of_garbage_logs_a_bounded_number_of_lines(
    open_store: StoreFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    crashed = open_store()
    Journal(crashed, J).append([(b"good", b"1")])
    (segment,) = partition_dir(tmp_path).glob("*.log")
    n = SKIP_LOG_LIMIT * 10 + 5
    with segment.open("ab") as f:
        f.write(b"".join(forge(1 + i, b"\xff" * 8) for i in range(n)))
    caplog.set_level(logging.WARNING, "floe.storage.journal")
    journal = Journal(open_store(), J)
    assert [(r.key, r.value) for r in journal.replay()] == [(b"good", b"1")]
    assert journal.skipped == n
    journal_lines = [r for r in caplog.records if r.name == "floe.storage.journal"]
    assert len(skipped_lines(caplog, "journal.batch.skipped")) == SKIP_LOG_LIMIT
    assert len(skipped_lines(caplog, "journal.skipped.suppressed")) == 1
    assert len(skipped_lines(caplog, "journal.skipped.count")) == 1  # at 10 x the limit
    assert len(journal_lines) == SKIP_LOG_LIMIT + 2


def test_journal_topics_get_small_segments_and_old_ones_are_updated(
    open_store: StoreFactory,
) -> None:
    store = open_store()
    Journal(store, J)
    meta = store.topic(J)
    assert meta is not None and meta.internal
    assert dict(meta.configs) == dict(JOURNAL_CONFIGS)
    assert store.partition(J, PartitionId(0)).config.segment_bytes == JOURNAL_SEGMENT_BYTES
    # a data dir written before journals had small segments
    old = TopicName("__old_state")
    store.create_topic(old, 1, {"cleanup.policy": "compact"}, internal=True)
    Journal(store, old).append([(b"k", b"v")])
    store.close()
    reopened = open_store()
    journal = Journal(reopened, old)
    assert dict(reopened.topic(old).configs) == dict(JOURNAL_CONFIGS)  # type: ignore[union-attr]
    assert journal.log.config.segment_bytes == JOURNAL_SEGMENT_BYTES
    assert [(r.key, r.value) for r in journal.replay()] == [(b"k", b"v")]


def test_many_updates_of_the_same_keys_stay_bounded_after_maintenance(
    open_store: StoreFactory,
) -> None:
    store: LocalStore = open_store()
    journal = Journal(store, J)
    keys = 200
    value = b"x" * 200
    written = 0
    for round_ in range(3):
        while written < (round_ + 1) * 3 * JOURNAL_SEGMENT_BYTES:
            journal.append([(b"key-%d" % k, value) for k in range(keys)])
            written += keys * (len(value) + 20)
        store.run_maintenance(journal.log.max_timestamp()[1] + 1)  # type: ignore[index]
        # what is left: the active segment plus one cleaned record per key
        assert journal.log.size_bytes < JOURNAL_SEGMENT_BYTES + 2 * keys * (len(value) + 40)
    latest = {r.key: r.value for r in journal.replay()}
    assert latest == {b"key-%d" % k: value for k in range(keys)}
