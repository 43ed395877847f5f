"""The pure parts of metrics: counters, histograms, error walking and metric families."""

from __future__ import annotations

import json
import logging
import sys
from datetime import timedelta

from kio.schema.create_topics.v7.response import CreateTopicsResponse
from prometheus_client import generate_latest
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families

from floe.admin import PartitionStatus, TableSettings, TableStatus
from floe.admin.tables import MaintenanceStatus
from floe.broker.build import build
from floe.broker.stats import BrokerStats, Histogram, error_codes
from floe.errors import ErrorCode
from floe.observability.collectors import (
    GroupOffset,
    broker_families,
    group_families,
    table_families,
)
from floe.observability.logs import JsonFormatter, parse_message
from floe.protocol.batch import COUNT_EXACT_BATCHES, count_records
from floe.tabletopic.model import TableState
from floe.types import TopicName


class _Collected:
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> list[Metric]:
        return self.families


def samples(families: list[Metric]) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Through the real exposition and parser, as a scraper sees them."""
    text = generate_latest(_Collected(families)).decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


def test_histogram_buckets_are_le_and_cumulative() -> None:
    h = Histogram((0.1, 1.0))
    for v in (0.05, 0.1, 0.5, 3.0):
        h.observe(v)
    assert h.cumulative() == [(0.1, 2), (1.0, 3), (float("inf"), 4)]
    assert h.count == 4
    assert h.sum == 3.65


def test_error_codes_walks_nested_entities() -> None:
    response = build(
        CreateTopicsResponse,
        {
            "throttle_time": timedelta(0),
            "topics": [
                {
                    "name": "a",
                    "topic_id": None,
                    "error_code": ErrorCode.none,
                    "error_message": None,
                    "configs": None,
                },
                {
                    "name": "b",
                    "topic_id": None,
                    "error_code": ErrorCode.topic_already_exists,
                    "error_message": "exists",
                    "configs": None,
                },
            ],
        },
    )
    assert list(error_codes(response)) == [0, int(ErrorCode.topic_already_exists)]
    stats = BrokerStats()
    stats.request(19, 0.002, response)
    stats.request(19, 0.004, None)
    assert stats.errors == {(19, int(ErrorCode.topic_already_exists)): 1}
    assert stats.latency[19].count == 2


def test_broker_families() -> None:
    stats = BrokerStats()
    t = stats.traffic(TopicName("t"))
    t.bytes_in, t.messages_in, t.bytes_out, t.messages_out = 100, 3, 50, 2
    stats.request(0, 0.003, None)
    stats.error(0, int(ErrorCode.not_leader_or_follower))
    stats.connections = 2
    s = samples(broker_families(stats, {0: "Produce"}))
    topic = frozenset({("topic", "t")})
    assert s[("kafka_server_brokertopicmetrics_bytesin_total", topic)] == 100
    assert s[("kafka_server_brokertopicmetrics_messagesout_total", topic)] == 2
    produce = frozenset({("request", "Produce")})
    assert s[("kafka_network_requestmetrics_requests_total", produce)] == 1
    le = frozenset({("request", "Produce"), ("le", "0.0025")})
    assert s[("kafka_network_requestmetrics_totaltime_seconds_bucket", le)] == 0
    le = frozenset({("request", "Produce"), ("le", "0.005")})
    assert s[("kafka_network_requestmetrics_totaltime_seconds_bucket", le)] == 1
    error = frozenset({("request", "Produce"), ("error", "NOT_LEADER_OR_FOLLOWER")})
    assert s[("kafka_network_requestmetrics_errors_total", error)] == 1
    assert s[("kafka_server_socketservermetrics_connection_count", frozenset())] == 2


def test_group_lag_is_never_negative_and_skips_gone_partitions() -> None:
    ends = {("t", 0): 10, ("t", 1): 5}
    offsets = [
        GroupOffset("g", "t", 0, 4),
        GroupOffset("g", "t", 1, 7),
        GroupOffset("g", "x", 0, 1),
    ]
    s = samples(group_families(offsets, lambda topic, p: ends.get((topic, p))))
    lag = {dict(k[1])["partition"]: v for k, v in s.items() if k[0] == "kafka_consumergroup_lag"}
    assert lag == {"0": 6, "1": 0}


def _status(
    topic: str, lag: int | None, status: str = "ok", committed: int = 5, held: int = 0
) -> TableStatus:
    return TableStatus(
        topic=topic,
        table=f"default.{topic}",
        catalog_table=f"floe.default.{topic}",
        enabled=True,
        status=status,
        settings=TableSettings(
            1000, "default", "string", "none", "none", "none", "", (), False, ""
        ),
        partitions=(
            PartitionStatus(
                0, committed, 0, 9, 9, lag, None if lag is None else 1.5, retention_held_bytes=held
            ),
        ),
        last_commit_id="c1",
        last_commit_ms=1_000_000,
        last_commit_time=None,
        last_commit_duration_s=2.5,
        last_commit_rows=5,
        last_commit_files=1,
        rounds=3,
        snapshots=3,
        partition_spec="[]",
        maintenance=MaintenanceStatus(3_600_000, False, None, None, None, None, None, None),
        skipped_records=1,
        dead_letter_topic=None,
        dead_lettered_records=0,
        lost_records=7,
        last_error=None,
        note=None,
        warning=None,
        table_error=None,
    )


def test_table_families() -> None:
    state = TableState(
        TopicName("a"), ("default", "a"), rounds=3, rows_total=12, files_total=4, failed_rounds=2
    )
    statuses = [
        _status("a", 4, held=2048),
        _status("b", None, status="stopped"),
        _status("c", 0, status="failing", committed=12),
    ]
    s = samples(table_families(statuses, {TopicName("a"): state, TopicName("b"): None}))
    a, b = frozenset({("topic", "a")}), frozenset({("topic", "b")})
    assert s[("floe_tabletopic_lag_records", a | {("partition", "0")})] == 4
    assert s[("floe_tabletopic_lag_seconds", a | {("partition", "0")})] == 1.5
    assert ("floe_tabletopic_lag_records", b | {("partition", "0")}) not in s  # unknown
    assert s[("floe_tabletopic_rows_committed_total", a)] == 12
    assert s[("floe_tabletopic_files_committed_total", a)] == 4
    assert s[("floe_tabletopic_failed_rounds_total", a)] == 2
    assert s[("floe_tabletopic_commit_duration_seconds", a)] == 2.5
    assert s[("floe_tabletopic_last_commit_timestamp_seconds", a)] == 1000
    assert s[("floe_tabletopic_stopped", a)] == 0
    assert s[("floe_tabletopic_stopped", b)] == 1
    assert ("floe_tabletopic_rows_committed_total", b) not in s  # no coordinator state
    # the table's own counts come from the status, with or without a coordinator
    assert s[("floe_tabletopic_records_lost_total", b)] == 7
    assert s[("floe_tabletopic_records_skipped_total", a)] == 1
    c = frozenset({("topic", "c")})
    assert s[("floe_tabletopic_offsets_ahead", c | {("partition", "0")})] == 3  # 12 > 9
    assert s[("floe_tabletopic_offsets_ahead", a | {("partition", "0")})] == 0
    assert s[("floe_tabletopic_failing", c)] == 1 and s[("floe_tabletopic_failing", a)] == 0
    assert s[("floe_tabletopic_retention_held_bytes", a | {("partition", "0")})] == 2048


def _batch(records: int, *, control: bool = False) -> bytes:
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=control,
        producer_id=1 if control else -1,
        producer_epoch=0 if control else -1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for i in range(records):
        builder.append(i, timestamp=1, key=None, value=b"v", headers=[])
    data = bytearray(builder.build())
    if control:  # set the control bit (the CRC is not checked by count_records)
        data[22] |= 0x20
    return bytes(data)


def test_count_records_skips_control_batches_and_a_partial_tail() -> None:
    data = _batch(3) + _batch(1, control=True) + _batch(5)
    assert count_records(data) == 8
    assert count_records(data + _batch(7)[:40]) == 8
    assert count_records(data + _batch(7)[:70]) == 8
    assert count_records(b"") == 0


def test_count_records_is_exact_up_to_the_bound_then_extrapolates() -> None:
    exact = b"".join(_batch(3) for _ in range(COUNT_EXACT_BATCHES))
    assert count_records(exact) == 3 * COUNT_EXACT_BATCHES
    many = exact * 4  # 4x the bytes of batches alike: the estimate is exact here
    assert count_records(many) == 12 * COUNT_EXACT_BATCHES


def test_parse_message() -> None:
    event, fields = parse_message(
        "tabletopic.committed topic=t.x commit_id=ab rows=10 seconds=1.25 offsets={0:1}"
    )
    assert event == "tabletopic.committed"
    assert fields == {
        "topic": "t.x",
        "commit_id": "ab",
        "rows": 10,
        "seconds": 1.25,
        "offsets": "{0:1}",
    }
    assert parse_message("Started server process [12]") == (None, {})
    assert parse_message("floe.stopping") == ("floe.stopping", {})
    # a field never replaces one of the fixed keys
    assert parse_message("x.y level=9 message=m n=1") == ("x.y", {"n": 1})


def test_json_formatter_one_line_with_exception() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord(
            "floe.t", logging.ERROR, __file__, 1, "a.failed id=%d", (7,), exc_info=True
        )
        record.exc_info = sys.exc_info()
    line = JsonFormatter().format(record)
    assert "\n" not in line
    entry = json.loads(line)
    assert entry["event"] == "a.failed"
    assert entry["id"] == 7
    assert entry["level"] == "ERROR"
    assert entry["logger"] == "floe.t"
    assert entry["message"] == "a.failed id=7"
    assert "ValueError: boom" in entry["exc"]
    assert entry["timestamp"].endswith("+00:00")
