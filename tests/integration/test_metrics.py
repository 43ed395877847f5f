"""``GET /metrics`` and ``--log-format json`` against a real ``floe up``.

One broker for the module (Spark starts once, for one ``string``-mode table topic with
a 1 s commit interval): confluent-kafka produces to a plain topic and to the table
topic, consumes the plain topic and commits group offsets; the scrape is parsed with
prometheus_client's own text parser. The JSON-log test runs a second, short broker
without table topics.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import confluent_kafka as ck
import confluent_kafka.admin
import pytest
from prometheus_client.parser import text_string_to_metric_families

from helpers.admin import admin, create_topic
from helpers.broker import Broker, floe_bin, free_port
from helpers.clients import confluent_config, confluent_produce
from helpers.records import Record, recent_ts

pytestmark = pytest.mark.timeout(300)

PLAIN = "metrics-plain"
TABLE = "metrics-table"
COUNTS = {0: 40, 1: 25}
COMMITTED = {0: 40, 1: 10}  # the group's committed offsets: lag 0 and 15
TABLE_RECORDS = 30
GROUP = "metrics-group"
DEADLINE_S = 150.0

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    b = Broker(
        tmp_path_factory.mktemp("metrics") / "data",
        {"auto.create.topics.enable": "false", "spark.sql.shuffle.partitions": "1"},
    )
    try:
        b.start()
        create_topic(b.bootstrap, PLAIN, 2)
        create_topic(
            b.bootstrap,
            TABLE,
            1,
            {
                "table.topic.enable": "true",
                "table.topic.commit.interval.ms": "1000",
                "table.topic.convert.value.type": "string",
            },
        )
        base = recent_ts()
        confluent_produce(
            b.bootstrap,
            PLAIN,
            [
                Record(f"k{i}".encode(), f"value-{p}-{i}".encode(), (), base + i, p)
                for p, n in COUNTS.items()
                for i in range(n)
            ],
        )
        confluent_produce(
            b.bootstrap,
            TABLE,
            [Record(None, f"row {i}".encode(), (), base + i, 0) for i in range(TABLE_RECORDS)],
        )
        yield b
        admin.cache_clear()
        b.stop()
    finally:
        b.close()


def scrape(b: Broker) -> Samples:
    with urllib.request.urlopen(f"{b.admin_url}/metrics", timeout=30) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain")
        text = resp.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    key = (name, frozenset(labels.items()))
    assert key in samples, f"no sample {name}{labels}"
    return samples[key]


@pytest.fixture(scope="module")
def consumed(broker: Broker) -> Iterator[ck.Consumer]:
    """A group consumer that read all of PLAIN and committed COMMITTED; kept open (and
    connected) for the module."""
    consumer = ck.Consumer(
        confluent_config(
            broker.bootstrap,
            **{"group.id": GROUP, "enable.auto.commit": False, "auto.offset.reset": "earliest"},
        )
    )
    try:
        consumer.assign([ck.TopicPartition(PLAIN, p, 0) for p in COUNTS])
        got = 0
        deadline = time.monotonic() + 60
        while got < sum(COUNTS.values()):
            assert time.monotonic() < deadline, f"consumed {got} records"
            for msg in consumer.consume(100, 0.5):
                assert msg.error() is None, msg.error()
                got += 1
        consumer.commit(
            offsets=[ck.TopicPartition(PLAIN, p, o) for p, o in COMMITTED.items()],
            asynchronous=False,
        )
        yield consumer
    finally:
        consumer.close()


def test_topic_traffic_offsets_and_group_lag(broker: Broker, consumed: ck.Consumer) -> None:
    s = scrape(broker)
    produced = sum(COUNTS.values())
    assert value(s, "kafka_server_brokertopicmetrics_messagesin_total", topic=PLAIN) == produced
    assert value(s, "kafka_server_brokertopicmetrics_messagesout_total", topic=PLAIN) == produced
    size = sum(value(s, "kafka_log_log_size", topic=PLAIN, partition=str(p)) for p in COUNTS)
    # every appended byte is in the log, and the consumer fetched each batch once
    assert value(s, "kafka_server_brokertopicmetrics_bytesin_total", topic=PLAIN) == size > 0
    assert value(s, "kafka_server_brokertopicmetrics_bytesout_total", topic=PLAIN) == size
    for p, n in COUNTS.items():
        labels = {"topic": PLAIN, "partition": str(p)}
        assert value(s, "kafka_log_log_logendoffset", **labels) == n
        assert value(s, "kafka_log_log_logstartoffset", **labels) == 0
        group = {"consumergroup": GROUP, **labels}
        assert value(s, "kafka_consumergroup_current_offset", **group) == COMMITTED[p]
        assert value(s, "kafka_consumergroup_lag", **group) == n - COMMITTED[p]
    for api in ("Produce", "Fetch", "OffsetCommit", "Metadata", "ApiVersions"):
        assert value(s, "kafka_network_requestmetrics_requests_total", request=api) >= 1
        count = value(s, "kafka_network_requestmetrics_totaltime_seconds_count", request=api)
        inf = value(
            s, "kafka_network_requestmetrics_totaltime_seconds_bucket", request=api, le="+Inf"
        )
        assert count == inf == value(s, "kafka_network_requestmetrics_requests_total", request=api)
    assert value(s, "kafka_server_socketservermetrics_connection_count") > 0


def test_errors_are_counted_per_api_and_code(broker: Broker) -> None:
    futures = admin(broker.bootstrap).create_topics([ck.admin.NewTopic(PLAIN, 1)])
    with pytest.raises(ck.KafkaException, match="TOPIC_ALREADY_EXISTS"):
        futures[PLAIN].result(30)
    s = scrape(broker)
    labels = {"request": "CreateTopics", "error": "TOPIC_ALREADY_EXISTS"}
    assert value(s, "kafka_network_requestmetrics_errors_total", **labels) == 1


def test_registry_requests_by_route_template(broker: Broker) -> None:
    body = json.dumps({"schema": '{"type": "string"}'}).encode()
    request = urllib.request.Request(
        f"{broker.registry_url}/subjects/metrics-value/versions",
        body,
        {"Content-Type": "application/vnd.schemaregistry.v1+json"},
    )
    with urllib.request.urlopen(request, timeout=30) as resp:
        assert resp.status == 200
    with urllib.request.urlopen(f"{broker.registry_url}/subjects", timeout=30) as resp:
        assert resp.status == 200
    s = scrape(broker)
    route = "/subjects/{subject}/versions"
    assert (
        value(s, "floe_registry_http_requests_total", method="POST", route=route, status="200") == 1
    )
    assert (
        value(s, "floe_registry_http_requests_total", method="GET", route="/subjects", status="200")
        >= 1
    )
    assert (
        value(s, "floe_registry_http_request_duration_seconds_count", method="POST", route=route)
        == 1
    )


_LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d [\d:,]+ (DEBUG|INFO) (\S+) ", re.M)


def test_table_topic_metrics(broker: Broker) -> None:
    deadline = time.monotonic() + DEADLINE_S
    labels = {"topic": TABLE}
    while True:
        s = scrape(broker)
        rows = s.get(("floe_tabletopic_rows_committed_total", frozenset(labels.items())), 0)
        lag = s.get(
            ("floe_tabletopic_lag_records", frozenset({**labels, "partition": "0"}.items()))
        )
        if rows == TABLE_RECORDS and lag == 0:
            break
        assert time.monotonic() < deadline, f"rows {rows}, lag {lag}:\n{broker.stderr_tail()}"
        time.sleep(1)
    assert value(s, "floe_tabletopic_lag_seconds", topic=TABLE, partition="0") == 0
    assert value(s, "floe_tabletopic_files_committed_total", **labels) >= 1
    assert value(s, "floe_tabletopic_rounds_total", **labels) >= 1
    assert value(s, "floe_tabletopic_failed_rounds_total", **labels) == 0
    assert value(s, "floe_tabletopic_records_skipped_total", **labels) == 0
    assert value(s, "floe_tabletopic_stopped", **labels) == 0
    assert value(s, "floe_tabletopic_commit_duration_seconds", **labels) > 0
    assert value(s, "floe_tabletopic_last_commit_timestamp_seconds", **labels) > time.time() - 600
    # a round and scrapes later, the log at INFO holds Floe's lines only: the libraries
    # (pyiceberg, py4j, uvicorn, botocore) log at WARNING unless log.level names them
    lines = [m.groups() for m in _LOG_LINE.finditer(broker.stderr_text())]
    assert ("INFO", "floe.tabletopic.coordinator") in lines
    assert [line for line in lines if not line[1].startswith("floe.")] == []


def test_json_logs(tmp_path: Path) -> None:
    port, admin_port = free_port(), free_port()
    stderr = tmp_path / "stderr.log"
    with stderr.open("wb") as err:
        proc = subprocess.Popen(
            [
                floe_bin(),
                "up",
                "--data-dir",
                str(tmp_path / "data"),
                "--host",
                "127.0.0.1",
                "--kafka-port",
                str(port),
                "--set",
                f"registry.port={free_port()}",
                "--set",
                f"admin.port={admin_port}",
                "--log-format",
                "json",
                "--log-level",
                "INFO,uvicorn.error=INFO",  # a library's family named: its lines show
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            cwd=tmp_path,
            env={**os.environ},
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                url = f"http://127.0.0.1:{admin_port}/metrics"
                with urllib.request.urlopen(url, timeout=5) as resp:
                    assert resp.status == 200
                break
            except OSError:
                assert proc.poll() is None, stderr.read_text()
                assert time.monotonic() < deadline, stderr.read_text()
                time.sleep(0.1)
        producer = ck.Producer(confluent_config(f"127.0.0.1:{port}"))
        producer.produce("json-logs", b"x")  # auto-created: a topic.auto_created line
        assert producer.flush(30) == 0
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    lines = stderr.read_text().splitlines()
    assert lines
    events = []
    for line in lines:
        entry = json.loads(line)
        assert {"timestamp", "level", "logger", "event", "message"} <= entry.keys(), line
        events.append(entry["event"])
        if entry["event"] == "topic.auto_created":
            assert entry["topic"] == "json-logs"
            assert entry["partitions"] == 1
    assert {"floe.started", "topic.auto_created", "floe.stopped"} <= set(events)
    loggers = {json.loads(line)["logger"] for line in lines}
    assert "uvicorn.error" in loggers
