"""The fetch-based range reader of table-topic tasks (floe.tabletopic.spark.fetch).

Property: served as a broker answers a read_committed Fetch (whole batches from the one
holding the offset, at most max_bytes but always one, maybe a partial batch at the end,
the aborted transactions overlapping them by their first offset, OFFSET_OUT_OF_RANGE
outside the log), any log's range is accounted for exactly as the segment reader,
given the aborted transactions whole, accounts for it. Then through a real Kafka
listener on a real store, the two readers say the same; and the errors name the broker.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from floe.broker.core import Broker
from floe.config import BrokerConfig, load_config
from floe.config import broker as keys
from floe.errors import ErrorCode
from floe.protocol.batch import read_header, scan
from floe.protocol.client import FetchedPartition
from floe.protocol.ranges import BadBatch, Records
from floe.protocol.records import Record, encode_batch
from floe.server.kafka import KafkaServer
from floe.storage.local import LocalStore
from floe.storage.local.reader import scan_range
from floe.tabletopic.spark.fetch import BrokerConnection, FetchError, fetch_range
from floe.types import Offset, PartitionId, TopicName
from helpers.broker import free_port
from helpers.log_model import Model, batch_spec, build, check_accounted

T = "t"


class ModelBroker:
    """Answers Fetch and ListOffsets over a :class:`Model` as Floe's broker does."""

    address = "model:9092"

    def __init__(self, model: Model, log_start: int, partial: bool) -> None:
        self.batches = [
            bytes(seg.data[p : p + read_header(seg.data, p).size])
            for seg in model.segments
            for _, p in seg.starts
        ]
        self.log_start = log_start
        self.log_end = model.log_end
        self.aborted = model.aborted
        self.partial = partial
        self.ahead: tuple[int, int] | None = None

    def prefetch(self, topic: str, partition: int, offset: int, max_bytes: int) -> None:
        assert self.ahead is None, "one prefetch at a time"
        self.ahead = (offset, max_bytes)

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int) -> FetchedPartition:
        assert (topic, partition) == (T, 0)
        if self.ahead is not None:  # a prefetch is always the next fetch
            assert self.ahead == (offset, max_bytes)
            self.ahead = None
        if not self.log_start <= offset <= self.log_end:
            return FetchedPartition(
                ErrorCode.offset_out_of_range, self.log_end, self.log_start, b""
            )
        out = b""
        for data in self.batches:
            if read_header(data).last_offset < offset:
                continue
            if out and len(out) + len(data) > max_bytes:
                if self.partial:
                    out += data[: max_bytes - len(out)]
                break
            out += data
        # read_committed: the aborted transactions overlapping what is returned, by
        # their first offset only (the reader ends each at its producer's next marker)
        upper = max([offset, *(read_header(d).next_offset for d in self.batches if d in out)])
        aborted = tuple(
            (a.producer_id, a.first) for a in self.aborted if a.first < upper and a.last >= offset
        )
        return FetchedPartition(ErrorCode.none, self.log_end, self.log_start, out, aborted)

    def earliest(self, topic: str, partition: int) -> int:
        return self.log_start


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    specs=st.lists(batch_spec, min_size=1, max_size=30),
    log_start=st.integers(0, 130),
    max_bytes=st.sampled_from([1, 200, 600, 1 << 20]),
    partial=st.booleans(),
    bounds=st.tuples(st.integers(0, 130), st.integers(0, 130)),
)
def test_every_offset_is_accounted_once_in_order(
    specs: list[tuple[int, str, int, bool, int]],
    log_start: int,
    max_bytes: int,
    partial: bool,
    bounds: tuple[int, int],
) -> None:
    start, end = sorted(bounds)
    model = build(specs)
    log_start = min(log_start, model.log_end)
    for o in range(log_start):
        model.expected.pop(o, None)
    broker = ModelBroker(model, log_start, partial)
    chunks = fetch_range(broker, T, 0, start, end, max_bytes=max_bytes)
    check_accounted(chunks, model, start, end)
    assert broker.ahead is None, "no prefetch left unused"


def test_a_header_that_cannot_frame_makes_the_rest_of_the_range_bad() -> None:
    good = encode_batch([Record(0, 1, None, b"a")], base_offset=0)
    damaged = bytearray(encode_batch([Record(1, 1, None, b"b")], base_offset=1))
    damaged[16] = 1  # magic 1
    model = build([(1, "data", 0, False, 0)])
    broker = ModelBroker(model, 0, False)
    broker.batches = [good, bytes(damaged)]
    broker.log_end = 2
    chunks = list(fetch_range(broker, T, 0, 0, 5))
    assert isinstance(chunks[0], Records) and [r.offset for r in chunks[0].records] == [0]
    assert isinstance(chunks[1], BadBatch) and (chunks[1].first, chunks[1].last) == (1, 4)
    assert "magic 1" in chunks[1].reason and len(chunks) == 2


def test_an_error_code_fails_the_read_naming_the_broker() -> None:
    class Gone(ModelBroker):
        def fetch(self, topic: str, partition: int, offset: int, max_bytes: int) -> Any:
            return FetchedPartition(ErrorCode.unknown_topic_or_partition, -1, -1, b"")

    broker = Gone(build([(1, "data", 0, False, 0)]), 0, False)
    with pytest.raises(FetchError, match=r"model:9092: .* unknown_topic_or_partition"):
        list(fetch_range(broker, T, 0, 0, 1))


def test_an_unreachable_broker_fails_with_its_address() -> None:
    address = f"127.0.0.1:{free_port()}"
    with pytest.raises(FetchError, match=f"cannot connect to the broker at {address}"):
        BrokerConnection(address, connect_timeout_s=2)


class Listener:
    """A real Kafka listener on a store, its event loop in a thread (the test's fetches
    block the calling thread, as a Spark task does)."""

    def __init__(self, store: LocalStore, config: BrokerConfig) -> None:
        self.port = free_port()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        broker = Broker(store, config, "cluster", "127.0.0.1", self.port)
        self.server = KafkaServer(
            broker, "127.0.0.1", self.port, config[keys.SOCKET_REQUEST_MAX_BYTES]
        )

    def call(self, work: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(work, self.loop).result(10)

    def __enter__(self) -> str:
        self.thread.start()
        self.call(self.server.start())
        return f"127.0.0.1:{self.port}"

    def __exit__(self, *exc: object) -> None:
        self.call(self.server.stop(grace_s=1))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


@pytest.fixture
def logged(tmp_path: Path) -> Iterator[tuple[LocalStore, BrokerConfig]]:
    """A store whose partition t-0 holds 300 records in 30 batches over many segments,
    the first 40 deleted (log start 40)."""
    config = load_config(None, {"data.dir": str(tmp_path)}, environ={})
    store = LocalStore(tmp_path, config)
    store.create_topic(TopicName(T), 1, {"segment.bytes": "2048"})
    plog = store.partition(TopicName(T), PartitionId(0))
    for _ in range(30):
        base = plog.log_end_offset
        recs = [Record(base + i, 1000, None, b"v%d" % (base + i) * 8) for i in range(10)]
        buf = bytearray(encode_batch(recs, base_offset=base))
        plog.append(buf, scan(buf), 1000)
    plog.delete_records(Offset(40))
    try:
        yield store, config
    finally:
        store.close()


def test_through_a_real_listener_both_readers_say_the_same(
    logged: tuple[LocalStore, BrokerConfig],
) -> None:
    store, config = logged
    logs = Path(store.log_dir())
    with Listener(store, config) as address, BrokerConnection(address) as conn:
        for start, end, max_bytes in ((0, 300, 1 << 20), (35, 310, 700), (120, 121, 1)):
            fetched = list(fetch_range(conn, T, 0, start, end, max_bytes=max_bytes))
            local = list(scan_range(logs, T, 0, start, end))
            assert _plain(fetched) == _plain(local)
        # a read given up midway leaves its prefetch in flight: the next read drops it
        partway = fetch_range(conn, T, 0, 40, 300, max_bytes=700)
        next(partway)
        partway.close()
        assert _plain(list(fetch_range(conn, T, 0, 200, 260))) == _plain(
            list(scan_range(logs, T, 0, 200, 260))
        )


def _plain(chunks: list[Any]) -> list[Any]:
    """Chunks without the batch positions (file or response positions differ)."""
    return [
        ("rec", [(r.offset, r.value) for r in c.records]) if isinstance(c, Records) else c
        for c in chunks
    ]
