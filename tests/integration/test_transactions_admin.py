"""DescribeProducers, DescribeTransactions and ListTransactions over the wire (no
Python client has them): requests written and responses read with kio."""

from __future__ import annotations

import io
import socket
import struct
from typing import Any

from kio.schema.describe_producers.v0.request import DescribeProducersRequest, TopicRequest
from kio.schema.describe_producers.v0.response import DescribeProducersResponse
from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
from kio.schema.describe_transactions.v0.response import DescribeTransactionsResponse
from kio.schema.errors import ErrorCode
from kio.schema.list_transactions.v1.request import ListTransactionsRequest
from kio.schema.list_transactions.v1.response import ListTransactionsResponse
from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.response_header.v1.header import ResponseHeader
from kio.schema.write_txn_markers.v1.request import (
    WritableTxnMarker,
    WritableTxnMarkerTopic,
    WriteTxnMarkersRequest,
)
from kio.schema.write_txn_markers.v1.response import WriteTxnMarkersResponse
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32, i64

from helpers.admin import create_topic, unique_topic
from helpers.broker import Broker
from helpers.txn import txn_producer


def call(b: Broker, request: Any, response_type: type[Any]) -> Any:
    """One flexible request/response round trip on a fresh connection."""
    buf = io.BytesIO()
    header = RequestHeader(
        request_api_key=request.__api_key__,
        request_api_version=request.__version__,
        correlation_id=i32(7),
        client_id="floe-tests",
    )
    entity_writer(RequestHeader)(buf, header)
    entity_writer(type(request))(buf, request)
    payload = buf.getvalue()
    with socket.create_connection((b.host, b.port), timeout=10) as s:
        s.sendall(struct.pack(">i", len(payload)) + payload)
        size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
        data = memoryview(s.recv(size, socket.MSG_WAITALL)).toreadonly()
    _, pos = entity_reader(ResponseHeader)(data, 0)
    body, _ = entity_reader(response_type)(data, pos)
    return body


def test_operators_see_producers_and_transactions(broker: Broker) -> None:
    topic = create_topic(broker.bootstrap, partitions=2)
    tid = unique_topic("ops")
    producer = txn_producer(broker.bootstrap, tid)
    producer.begin_transaction()
    producer.produce(topic, value=b"open", partition=1)
    producer.flush(30)

    listed = call(broker, ListTransactionsRequest(state_filters=("Ongoing",)),
                  ListTransactionsResponse)  # fmt: skip
    mine = [t for t in listed.transaction_states if t.transactional_id == tid]
    assert len(mine) == 1 and mine[0].transaction_state == "Ongoing"
    pid = mine[0].producer_id
    assert call(broker, ListTransactionsRequest(state_filters=("Ongoing",), producer_id_filters=(
        pid + 10_000,)), ListTransactionsResponse).transaction_states == ()  # fmt: skip

    described = call(broker, DescribeTransactionsRequest(transactional_ids=(tid, "nope")),
                     DescribeTransactionsResponse).transaction_states  # fmt: skip
    assert described[0].error_code == ErrorCode.none
    assert described[0].transaction_state == "Ongoing" and described[0].producer_id == pid
    assert [(t.topic, t.partitions) for t in described[0].topics] == [(topic, (1,))]
    assert described[1].error_code == ErrorCode.transactional_id_not_found

    producers = (
        call(
            broker,
            DescribeProducersRequest(topics=(TopicRequest(name=topic, partition_indexes=(0, 1)),)),
            DescribeProducersResponse,
        )
        .topics[0]
        .partitions
    )
    assert producers[0].active_producers == ()
    active = producers[1].active_producers
    assert len(active) == 1 and active[0].producer_id == pid
    assert active[0].current_txn_start_offset == 0 and active[0].last_sequence == 0

    producer.commit_transaction(30)
    after = call(broker, DescribeTransactionsRequest(transactional_ids=(tid,)),
                 DescribeTransactionsResponse).transaction_states[0]  # fmt: skip
    assert after.transaction_state == "CompleteCommit" and after.producer_epoch == i16(0)


def marker(pid: int, epoch: int, topic: str, *partitions: int) -> WritableTxnMarker:
    """An abort marker for ``pid`` at ``epoch`` on ``partitions`` of ``topic``."""
    return WritableTxnMarker(
        producer_id=i64(pid),
        producer_epoch=i16(epoch),
        transaction_result=False,
        topics=(WritableTxnMarkerTopic(name=topic, partition_indexes=tuple(map(i32, partitions))),),
        coordinator_epoch=i32(0),
    )


def test_write_txn_markers_refuses_what_a_leader_refuses(broker: Broker) -> None:
    """The partition-leader side of WriteTxnMarkers, per partition: a marker ends the
    producer's open transaction there; an epoch older than the producer's is
    INVALID_PRODUCER_EPOCH, a partition that does not exist UNKNOWN_TOPIC_OR_PARTITION,
    the transaction coordinator's topic's markers are its own (INVALID_TOPIC_EXCEPTION),
    and a ``__consumer_offsets`` partition's complete the producer's offsets in its groups
    (none here)."""
    topic = create_topic(broker.bootstrap, partitions=2)
    tid = unique_topic("markers")
    txn_producer(broker.bootstrap, tid)  # epoch 0, then fenced by the next: epoch 1
    producer = txn_producer(broker.bootstrap, tid)
    producer.begin_transaction()
    producer.produce(topic, value=b"open", partition=0)
    producer.flush(30)
    describe = DescribeProducersRequest(topics=(TopicRequest(name=topic, partition_indexes=(0,)),))
    (active,) = (
        call(broker, describe, DescribeProducersResponse).topics[0].partitions[0].active_producers
    )
    pid, epoch = int(active.producer_id), int(active.producer_epoch)
    assert epoch == 1 and active.current_txn_start_offset == 0

    request = WriteTxnMarkersRequest(
        markers=(
            marker(pid, epoch - 1, topic, 0),
            marker(pid, epoch, topic, 0, 7),
            marker(pid, epoch, "__transaction_state", 0),
            marker(pid, epoch, "__consumer_offsets", 0),
        )
    )
    results = call(broker, request, WriteTxnMarkersResponse).markers
    codes = [
        [(p.partition_index, p.error_code) for t in r.topics for p in t.partitions] for r in results
    ]
    assert codes == [
        [(0, ErrorCode.invalid_producer_epoch)],
        [(0, ErrorCode.none), (7, ErrorCode.unknown_topic_or_partition)],
        [(0, ErrorCode.invalid_topic_exception)],
        [(0, ErrorCode.none)],
    ]
    (after,) = (
        call(broker, describe, DescribeProducersResponse).topics[0].partitions[0].active_producers
    )
    assert after.current_txn_start_offset == -1  # ended here by the marker
    producer.abort_transaction(30)
