"""acks=all, with a real LocalStore and the real Produce handler:

* with a failing fsync, only the partitions whose records are not durable get
  KAFKA_STORAGE_ERROR; the others of the same request are acknowledged (Kafka fails only
  an offline log dir's partitions). The failure comes through the storage engine's
  fault-injection seam;
* a pipelined request's records are made durable from the moment it is read, not from
  its turn to be answered.
"""

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


def request(partitions: tuple[int, ...], correlation: int = 1) -> tuple[RequestContext, object]:
    """An acks=all Produce v7 of one record to each of ``partitions`` of ``T``, decoded
    as the connection decodes it, with its context."""
    req = ProduceRequest_v7(
        transactional_id=None, required_acks=-1, timeout=5000,
        topics=[("t", [(p, batch()) for p in partitions])],
    )  # fmt: skip
    _, decoded = decode_request(req.build_request_header(correlation, "c").encode() + req.encode())
    return RequestContext(0, 7, correlation, "c", "p", response_class(0, 7)), decoded


def codes_of(response: object) -> dict[int, ErrorCode]:
    return {
        p.index: ErrorCode(p.error_code)
        for t in response.responses  # type: ignore[attr-defined]
        for p in t.partition_responses
    }


def test_a_failed_fsync_fails_only_the_partitions_it_hit(broker: Broker) -> None:
    def fail_partition_1(op: str, fd: int) -> None:
        if op in ("fsync", "fdatasync") and "/t-1" in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.EIO, "injected EIO")

    fileio.set_fault_hook(fail_partition_1)
    ctx, decoded = request((0, 1))

    async def run() -> object:
        reply = produce.handle(broker, ctx, decoded)
        return await reply if asyncio.iscoroutine(reply) else reply

    codes = codes_of(asyncio.run(run()))
    assert codes == {0: ErrorCode.none, 1: ErrorCode.kafka_storage_error}
    assert broker.store.partition(T, PartitionId(0)).durable_offset == 1


def test_a_pipelined_requests_records_are_made_durable_before_its_turn_to_answer(
    broker: Broker,
) -> None:
    """A connection answers its pipelined requests in order, awaiting a request's reply
    only once every request before it is answered. Its records must not wait for that
    turn to start becoming durable: they share the group commit (an fsync, or a WAL
    object and its commit) in progress for the requests before it, or the next one.
    Started at its turn instead, each request of a producer with five in flight waited
    for rounds run one after another, each after the last answer (the latency and
    throughput of every acks=all producer that pipelines)."""
    logs = [broker.store.partition(T, PartitionId(p)) for p in (0, 1)]

    async def run() -> tuple[list[int], list[dict[int, ErrorCode]]]:
        # read and handled as the connection does, their replies not awaited yet (the
        # connection is writing the answers of the requests before them)
        replies = [produce.handle(broker, *request((p,), correlation=p + 1)) for p in (0, 1)]
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(
            lg.durable_offset < lg.log_end_offset for lg in logs
        ):
            await asyncio.sleep(0.01)
        durable = [lg.durable_offset for lg in logs]
        answered = []
        for reply in replies:
            answered.append(codes_of(await reply if asyncio.iscoroutine(reply) else reply))
        return durable, answered

    durable, answered = asyncio.run(run())
    assert durable == [1, 1], "the records waited for their request's turn to be answered"
    assert answered == [{0: ErrorCode.none}, {1: ErrorCode.none}]
