"""acks=all with a failing fsync: only the partitions whose records are not durable
get KAFKA_STORAGE_ERROR; the others of the same request are acknowledged (Kafka fails
only an offline log dir's partitions). A real LocalStore and the real Produce handler;
the fsync failure comes through the storage engine's fault-injection seam."""

from __future__ import annotations

import asyncio
import errno
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka.protocol.produce import ProduceRequest_v7
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from floe.broker import produce
from floe.broker.core import Broker, RequestContext
from floe.config import load_config
from floe.errors import ErrorCode
from floe.protocol.codec import decode_request, response_class
from floe.storage.local import LocalStore, fileio
from floe.types import PartitionId, TopicName

T = TopicName("t")


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    config = load_config(None, {"data.dir": str(tmp_path)}, {})
    store = LocalStore(tmp_path, config)
    store.create_topic(T, 2, {})
    try:
        yield Broker(
            store=store, config=config, cluster_id="c", advertised_host="h", advertised_port=1
        )
    finally:
        fileio.set_fault_hook(None)
        store.close()


def batch() -> bytes:
    b = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 20)
    b.append(0, int(time.time() * 1000), None, b"v", [])
    return bytes(b.build())


def test_a_failed_fsync_fails_only_the_partitions_it_hit(broker: Broker) -> None:
    def fail_partition_1(op: str, fd: int) -> None:
        if op in ("fsync", "fdatasync") and "/t-1" in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.EIO, "injected EIO")

    fileio.set_fault_hook(fail_partition_1)
    req = ProduceRequest_v7(
        transactional_id=None, required_acks=-1, timeout=5000,
        topics=[("t", [(0, batch()), (1, batch())])],
    )  # fmt: skip
    _, decoded = decode_request(req.build_request_header(1, "c").encode() + req.encode())
    ctx = RequestContext(0, 7, 1, "c", "p", response_class(0, 7))

    async def run() -> object:
        reply = produce.handle(broker, ctx, decoded)
        return await reply if asyncio.iscoroutine(reply) else reply

    response = asyncio.run(run())
    codes = {
        p.index: ErrorCode(p.error_code)
        for t in response.responses  # type: ignore[attr-defined]
        for p in t.partition_responses
    }
    assert codes == {0: ErrorCode.none, 1: ErrorCode.kafka_storage_error}
    assert broker.store.partition(T, PartitionId(0)).durable_offset == 1
