"""A failed segment write, index write or fsync takes the partition offline for writes
(KAFKA_STORAGE_ERROR, like Kafka's offline log dir) until restart and recovery: nothing
is acknowledged after it, nothing is reordered, and an fsync is never retried after an
error. New partition directories are fsynced before their first acknowledged write.

Failures come from a real failing file (an index symlinked to ``/dev/full``: ENOSPC)
where one exists, else from the fault-injection seam of :mod:`floe.storage.local.fileio`
(fsync EIO cannot be provoked on a healthy disk without root-only device mappers).
"""

from __future__ import annotations

import asyncio
import errno
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from localstore_helpers import StoreFactory, T, append, batch, records

from floe.errors import ErrorCode
from floe.protocol.batch import scan
from floe.protocol.records import decode_batch
from floe.storage.interface import StorageError
from floe.storage.local import LocalPartitionLog, fileio
from floe.storage.local.segment import segment_name
from floe.types import Offset, PartitionId


def fd_path(fd: int) -> str:
    return os.readlink(f"/proc/self/fd/{fd}")


@pytest.fixture
def faults() -> Iterator[Callable[[Callable[[str, int], None] | None], None]]:
    """Install a fault hook (``(operation, fd) -> None``, may raise OSError); always
    removed at the end."""
    yield fileio.set_fault_hook
    fileio.set_fault_hook(None)


def read_values(plog: LocalPartitionLog) -> list[int]:
    out: list[int] = []
    pos = int(plog.log_start_offset)
    while pos < plog.log_end_offset:
        data = plog.read(Offset(pos), 1 << 20)
        for h in scan(data):
            out += [r.offset for r in decode_batch(data, h)]
            pos = h.next_offset
    return out


def test_index_write_failure_keeps_size_and_end_and_goes_offline(
    open_store: StoreFactory, tmp_path: Path
) -> None:
    store = open_store()
    store.create_topic(T, 1, {"segment.bytes": "3000", "index.interval.bytes": "100"})
    plog = store.partition(T, PartitionId(0))
    for _ in range(3):
        append(plog, batch(records(3, size=100)))
    # the next segment's offset index is a real file that cannot grow: ENOSPC
    directory = tmp_path / "data" / "logs" / "t-0"
    next_base = plog.log_end_offset
    (directory / f"{segment_name(next_base)}.index").symlink_to("/dev/full")
    plog.roll()
    append(plog, batch(records(3, size=100)))  # the first batch is never indexed
    with pytest.raises(StorageError) as failed:
        append(plog, batch(records(3, size=100)))
    assert failed.value.code is ErrorCode.kafka_storage_error
    # the batch reached the segment file: the log's size and end say so
    assert plog.log_end_offset == next_base + 6
    assert plog.size_bytes == sum(p.stat().st_size for p in directory.glob("*.log"))
    assert read_values(plog) == list(range(next_base + 6))
    assert plog.offline
    with pytest.raises(StorageError, match="offline"):
        append(plog, batch(records(1)))
    with pytest.raises(StorageError):
        asyncio.run(store.wait_durable([plog]))
    store.close()
    (directory / f"{segment_name(next_base)}.index").unlink()  # the disk is repaired
    plog = open_store().partition(T, PartitionId(0))
    assert not plog.offline
    assert read_values(plog) == list(range(next_base + 6))
    append(plog, batch(records(2)))
    assert read_values(plog) == list(range(next_base + 8))


def test_failed_fsync_is_never_retried_nor_reported_durable(
    open_store: StoreFactory, faults: Callable[..., None]
) -> None:
    store = open_store()
    store.create_topic(T, 2, {})
    bad, good = (store.partition(T, PartitionId(p)) for p in range(2))
    failing = f"/{bad.directory.name}/"

    def eio_on_bad(op: str, fd: int) -> None:
        if op in ("fsync", "fdatasync") and failing in fd_path(fd):
            raise OSError(errno.EIO, "injected EIO")

    async def main() -> None:
        append(bad, batch(records(3)))
        append(good, batch(records(3)))
        faults(eio_on_bad)
        results = await asyncio.gather(
            store.wait_durable([bad]), store.wait_durable([good]), return_exceptions=True
        )
        assert isinstance(results[0], StorageError)
        assert results[1] is None  # another partition in the same round is unharmed
        assert good.durable_offset == 3
        assert bad.durable_offset == 0 and bad.offline
        faults(None)  # the disk "works" again: the page cache state is still unknown
        with pytest.raises(StorageError):
            await store.sync([bad])
        with pytest.raises(StorageError):
            append(bad, batch(records(1)))
        store.start_background_flush()
        await asyncio.sleep(1.2)  # the interval flusher does not retry it either
        assert bad.durable_offset == 0
        append(good, batch(records(1)))
        await store.wait_durable([good])
        assert good.durable_offset == 4

    asyncio.run(main())
    store.close()
    reopened = open_store()  # recovery: the offline partition is re-scanned, not trusted
    plog = reopened.partition(T, PartitionId(0))
    assert not plog.offline
    assert read_values(plog) == [0, 1, 2]
    append(plog, batch(records(1)))
    asyncio.run(reopened.wait_durable([plog]))
    assert plog.durable_offset == 4


def test_segment_write_failure_takes_the_partition_offline(
    open_store: StoreFactory, faults: Callable[..., None]
) -> None:
    store = open_store()
    store.create_topic(T, 1, {})
    plog = store.partition(T, PartitionId(0))
    append(plog, batch(records(2)))
    calls = 0

    def enospc_once(op: str, fd: int) -> None:
        nonlocal calls
        if op == "write" and fd_path(fd).endswith(".log"):
            calls += 1
            if calls == 1:
                raise OSError(errno.ENOSPC, "injected ENOSPC")

    faults(enospc_once)
    with pytest.raises(StorageError):
        append(plog, batch(records(2)))
    with pytest.raises(StorageError, match="offline"):  # no retry after a failed write
        append(plog, batch(records(2)))
    assert plog.log_end_offset == 2
    assert read_values(plog) == [0, 1]


def test_new_partition_directory_is_fsynced_before_the_first_ack(
    open_store: StoreFactory, faults: Callable[..., None]
) -> None:
    synced: list[str] = []

    def record(op: str, fd: int) -> None:
        if op in ("fsync", "fdatasync"):
            synced.append(fd_path(fd))

    store = open_store()
    faults(record)
    store.create_topic(T, 1, {})
    plog = store.partition(T, PartitionId(0))
    append(plog, batch(records(1)))
    asyncio.run(store.wait_durable([plog]))
    assert str(plog.directory) in synced
    assert str(plog.directory.parent) in synced  # the logs dir entry of the new directory
