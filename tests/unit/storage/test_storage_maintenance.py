"""Heavy work off the event loop: compaction runs in the store's worker thread while the
loop keeps appending and reading, each segment is compacted once (a durable "cleaned up
to" checkpoint per partition), a retention hold set meanwhile is respected, and topic
metadata writes grow linearly with the number of topics and survive kill -9."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from localstore_helpers import NOW, StoreFactory, T, append, broker_config, kv

from floe.protocol.batch import scan
from floe.protocol.records import decode_batch
from floe.storage.local import LocalPartitionLog, LocalStore, fileio
from floe.types import Offset, PartitionId, TopicName


def proc_io(field: str) -> int:
    """A counter of /proc/self/io: ``rchar``/``wchar`` are the bytes passed to read and
    write system calls by every thread of this process."""
    for line in Path("/proc/self/io").read_text().splitlines():
        name, _, value = line.partition(":")
        if name == field:
            return int(value)
    raise KeyError(field)


@pytest.fixture
def faults() -> Iterator[Callable[[Callable[[str, int], None] | None], None]]:
    yield fileio.set_fault_hook
    fileio.set_fault_hook(None)


def values(plog: LocalPartitionLog) -> dict[bytes, tuple[int, bytes | None]]:
    """Latest (offset, value) per key, and every offset seen must increase."""
    out: dict[bytes, tuple[int, bytes | None]] = {}
    pos, prev = int(plog.log_start_offset), -1
    while pos < plog.log_end_offset:
        data = plog.read(Offset(pos), 1 << 20)
        for h in scan(data):
            for r in decode_batch(data, h):
                assert r.offset > prev and r.key is not None
                prev = r.offset
                out[r.key] = (r.offset, r.value)
            pos = h.next_offset
    return out


def records_in(plog: LocalPartitionLog) -> int:
    n, pos = 0, int(plog.log_start_offset)
    while pos < plog.log_end_offset:
        data = plog.read(Offset(pos), 1 << 20)
        for h in scan(data):
            n += len(decode_batch(data, h))
            pos = h.next_offset
    return n


def compacted(store: LocalStore, rounds: int = 40, keys: int = 20) -> LocalPartitionLog:
    store.create_topic(T, 1, {"cleanup.policy": "compact", "segment.bytes": "4000"})
    plog = store.partition(T, PartitionId(0))
    for i in range(rounds * keys):
        append(plog, kv(b"k%d" % (i % keys), b"v%d-" % i + b"x" * 100, ts=NOW + i))
    plog.roll()
    return plog


def test_compaction_runs_in_the_worker_thread_while_the_loop_appends(
    open_store: StoreFactory, faults: Callable[..., None]
) -> None:
    store = open_store()
    plog = compacted(store)
    writers: set[str] = set()

    def who_writes(op: str, fd: int) -> None:
        if op == "write" and os.readlink(f"/proc/self/fd/{fd}").endswith(".cleaned"):
            writers.add(threading.current_thread().name)

    faults(who_writes)

    async def main() -> int:
        task = asyncio.create_task(store.maintain(NOW + 10_000))
        live = 0
        while not task.done():
            append(plog, kv(b"live%d" % live, b"v", ts=NOW + 5000))
            assert values(plog)[b"live%d" % live][1] == b"v"
            live += 1
            await asyncio.sleep(0)
        await task
        return live

    live = asyncio.run(main())
    assert writers and threading.current_thread().name not in writers
    got = values(plog)
    assert {k: v for k, (_, v) in got.items() if k.startswith(b"k")} == {
        b"k%d" % k: b"v%d-" % (39 * 20 + k) + b"x" * 100 for k in range(20)
    }
    assert len([k for k in got if k.startswith(b"live")]) == live
    assert records_in(plog) < 20 * 3 + live  # old values are gone


def test_each_segment_is_compacted_once(open_store: StoreFactory) -> None:
    store = open_store()
    plog = compacted(store)
    size = plog.size_bytes
    store.run_maintenance(NOW + 10_000)
    assert plog.size_bytes < size / 5
    before = proc_io("rchar")
    store.run_maintenance(NOW + 20_000)  # nothing new to clean: no segment is read
    assert proc_io("rchar") - before < 2000
    store.close()
    store = open_store()  # the "cleaned up to" checkpoint is durable
    plog = store.partition(T, PartitionId(0))
    before = proc_io("rchar")
    store.run_maintenance(NOW + 20_000)
    assert proc_io("rchar") - before < 2000
    # new dirty segments still supersede keys of the cleaned ones
    append(plog, kv(b"k3", b"new", ts=NOW + 30_000), kv(b"k4", None, ts=NOW + 30_000))
    plog.roll()
    store.run_maintenance(NOW + 40_000)
    got = values(plog)
    assert got[b"k3"][1] == b"new" and got[b"k4"][1] is None
    assert records_in(plog) == 20  # one per key (k4's is now its tombstone)


def test_a_hold_set_while_the_cleaner_works_is_respected(
    open_store: StoreFactory, faults: Callable[..., None]
) -> None:
    store = open_store()
    plog = compacted(store)
    started, gate = threading.Event(), threading.Event()

    def block_cleaner(op: str, fd: int) -> None:
        if op == "write" and os.readlink(f"/proc/self/fd/{fd}").endswith(".cleaned"):
            started.set()
            gate.wait(30)

    faults(block_cleaner)

    async def main() -> None:
        task = asyncio.create_task(store.maintain(NOW + 10_000))
        assert await asyncio.to_thread(started.wait, 30)
        plog.set_retention_hold(Offset(0))  # from now on nothing may be rewritten
        before = records_in(plog)
        gate.set()
        await task
        assert records_in(plog) == before
        plog.set_retention_hold(None)
        await store.maintain(NOW + 20_000)
        assert records_in(plog) == 20

    asyncio.run(main())


def test_topic_metadata_writes_grow_linearly(open_store: StoreFactory) -> None:
    store = open_store()

    def cost(prefix: str, n: int) -> int:
        before = proc_io("wchar")
        for i in range(n):
            store.create_topic(TopicName(f"{prefix}{i}"), 1, {"retention.ms": "1000"})
        return proc_io("wchar") - before

    first = cost("a", 100)
    second = cost("b", 400)  # 4 times as many, on top of the first 100: 24 times the
    assert second < 8 * first, (first, second)  # bytes if each change rewrote them all
    store.close()
    assert len(open_store().topics()) == 500


CREATOR = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from floe.config.loader import load_config
    from floe.storage.local import LocalStore
    from floe.types import TopicName

    tmp = Path(sys.argv[1])
    store = LocalStore(tmp / "data", load_config(tmp / "floe.toml", {}, {}))
    i = 0
    while True:
        store.create_topic(TopicName(f"t{i}"), 2, {"retention.ms": str(i)})
        print(f"+t{i}", flush=True)
        if i % 3 == 2:
            store.delete_topic(TopicName(f"t{i - 1}"))
            print(f"-t{i - 1}", flush=True)
        i += 1
    """
)


def test_topic_metadata_survives_kill_9_mid_write(tmp_path: Path) -> None:
    config = broker_config(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-c", CREATOR, str(tmp_path)],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert proc.stdout is not None
    acked: set[str] = set()

    def note(line: bytes) -> None:
        name = line.decode().strip()
        if name.startswith("+"):
            acked.add(name[1:])
        elif name:
            acked.discard(name[1:])

    for line in proc.stdout:
        note(line)
        if len(acked) >= 120:
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    for line in proc.stdout:  # what it acknowledged before the kill, still in the pipe
        note(line)
    proc.stdout.close()
    store = LocalStore(tmp_path / "data", config)
    try:
        topics = store.topics()
        # every acknowledged creation and deletion holds; only the one in flight may not
        assert len(acked ^ set(topics)) <= 1, acked ^ set(topics)
        for name, meta in topics.items():
            assert meta.configs == {"retention.ms": name[1:]}
            for p in range(2):
                assert store.partition(name, PartitionId(p)).log_end_offset == 0
    finally:
        store.close()


def test_a_batch_whose_records_do_not_decode_never_stops_compaction(
    open_store: StoreFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """A CRC-valid batch with garbage records (a disk fault, an old bug) is kept as it
    is, shadows nothing, and the rest of the partition is compacted, run after run."""
    import crc32c

    store = open_store()
    # appended before the topic is compacted: a compacted topic's append reads keys
    store.create_topic(T, 1, {"cleanup.policy": "delete", "segment.bytes": "4000"})
    plog = store.partition(T, PartitionId(0))
    for i in range(200):
        append(plog, kv(b"k%d" % (i % 5), b"v%d-" % i + b"x" * 100, ts=NOW + i))
        if i == 50:  # one batch whose record framing is garbage, with a valid CRC
            bad = bytearray(kv(b"junk", b"y" * 20, ts=NOW + i))
            bad[61] = 0x7E  # the record length claims far more bytes than there are
            bad[17:21] = crc32c.crc32c(bytes(bad[21:])).to_bytes(4, "big")
            plog.append(bad, scan(bad), NOW + i)
    plog.roll()
    store.set_topic_configs(T, {"cleanup.policy": "compact", "segment.bytes": "4000"})
    with caplog.at_level("WARNING"):
        store.run_maintenance(NOW + 10_000)
        store.run_maintenance(NOW + 20_000)
    assert "log.compaction.failed" not in caplog.text
    assert caplog.text.count("log.compaction.unreadable_batch") == 1
    left = 0
    pos = int(plog.log_start_offset)
    while pos < plog.log_end_offset:
        data = plog.read(Offset(pos), 1 << 20)
        for h in scan(data):
            left += h.record_count
            pos = h.next_offset
    assert left < 200 // 4  # superseded values are gone; the bad batch is still there
