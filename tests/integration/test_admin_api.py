"""The admin HTTP API's resource endpoints against a real ``floe up`` (one broker for the
module; Spark starts once, for the table-topic and SQL tests): topic CRUD, groups with
lag, schemas, table enable/disable/sample/snapshots, SQL, and the 4xx error bodies.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from helpers.broker import Broker
from helpers.clients import confluent_produce
from helpers.module_broker import module_broker
from helpers.records import Record, recent_ts

pytestmark = pytest.mark.timeout(300)

TABLE_DEADLINE_S = 150.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    with module_broker(tmp_path_factory.mktemp("admin-api") / "data") as b:
        yield b


def call(broker: Broker, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"{broker.admin_url}/api/v1{path}",
        data=data,
        method=method,
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=150) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read())


def ok(broker: Broker, method: str, path: str, body: Any = None) -> Any:
    status, answer = call(broker, method, path, body)
    assert status in (200, 201), answer
    return answer


def test_topic_crud(broker: Broker) -> None:
    created = ok(
        broker,
        "POST",
        "/topics",
        {"name": "crud", "partitions": 3, "configs": {"retention.ms": "60000"}},
    )
    assert created["topic"] == "crud" and len(created["partitions"]) == 3
    assert created["overrides"] == {"retention.ms": "60000"}
    confluent_produce(broker.bootstrap, "crud", [Record(b"k", b"hello", (), recent_ts(), 1)])
    listed = {t["topic"]: t for t in ok(broker, "GET", "/topics")["topics"]}
    assert listed["crud"]["partitions"] == 3 and listed["crud"]["messages"] == 1
    detail = ok(broker, "GET", "/topics/crud")
    assert [p["log_end_offset"] for p in detail["partitions"]] == [0, 1, 0]
    assert detail["partitions"][1]["size_bytes"] > 0
    sources = {c["name"]: c["source"] for c in detail["configs"]}
    assert sources["retention.ms"] == "topic" and sources["cleanup.policy"] == "default"
    messages = ok(broker, "GET", "/topics/crud/messages?limit=5")["messages"]
    assert [(m["key"], m["value"], m["value_format"]) for m in messages] == [("k", "hello", "text")]
    altered = ok(
        broker,
        "PATCH",
        "/topics/crud/configs",
        {"set": {"cleanup.policy": "compact"}, "delete": ["retention.ms"]},
    )
    assert altered["overrides"] == {"cleanup.policy": "compact"}
    assert ok(broker, "DELETE", "/topics/crud") == {"deleted": "crud"}
    assert call(broker, "GET", "/topics/crud")[0] == 404


def test_error_bodies(broker: Broker) -> None:
    status, body = call(
        broker, "POST", "/topics", {"name": "bad", "configs": {"retention.ms": "soon"}}
    )
    assert (status, body["error_code"]) == (400, 400)
    assert "retention.ms" in body["message"]
    status, body = call(broker, "POST", "/topics", {"name": "bad", "partitions": 0})
    assert status == 400 and "partitions" in body["message"]
    ok(broker, "POST", "/topics", {"name": "twice"})
    assert call(broker, "POST", "/topics", {"name": "twice"}) == (
        409,
        {"error_code": 409, "message": "topic 'twice' already exists"},
    )
    status, body = call(broker, "PATCH", "/topics/twice/configs", {"set": {"no.such": "1"}})
    assert status == 400 and "no.such" in body["message"]
    assert call(broker, "GET", "/topics/nope")[1] == {
        "error_code": 404,
        "message": "unknown topic 'nope'",
    }
    assert call(broker, "GET", "/groups/nope")[0] == 404
    assert call(broker, "GET", "/schemas/subjects/nope")[0] == 404
    assert call(broker, "GET", "/tables/twice/snapshots")[0] == 404
    status, body = call(broker, "POST", "/topics", {"partitions": 1})
    assert status == 422 and body["error_code"] == 422
    status, body = call(broker, "GET", "/topics/twice/messages?limit=0")
    assert status == 422


def test_groups_with_lag(broker: Broker) -> None:
    from confluent_kafka import Consumer, TopicPartition

    ok(broker, "POST", "/topics", {"name": "grouped", "partitions": 2})
    confluent_produce(
        broker.bootstrap,
        "grouped",
        [Record(None, f"v{i}".encode(), (), recent_ts(), i % 2) for i in range(10)],
    )
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "lagging",
            "broker.address.family": "v4",
        }
    )
    try:
        consumer.commit(
            offsets=[TopicPartition("grouped", 0, 2), TopicPartition("grouped", 1, 5)],
            asynchronous=False,
        )
    finally:
        consumer.close()
    groups = {g["group"]: g for g in ok(broker, "GET", "/groups")["groups"]}
    assert groups["lagging"]["lag"] == 3
    detail = ok(broker, "GET", "/groups/lagging")
    assert [(p["partition"], p["committed_offset"], p["lag"]) for p in detail["partitions"]] == [
        (0, 2, 3),
        (1, 5, 0),
    ]


def test_schemas(broker: Broker) -> None:
    for extra in ([], [{"name": "b", "type": "int", "default": 0}]):
        schema = {
            "type": "record",
            "name": "R",
            "fields": [{"name": "a", "type": "string"}, *extra],
        }
        request = urllib.request.Request(
            f"{broker.registry_url}/subjects/things-value/versions",
            data=json.dumps({"schema": json.dumps(schema)}).encode(),
            headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
        )
        with urllib.request.urlopen(request, timeout=10):
            pass
    subjects = {s["subject"]: s for s in ok(broker, "GET", "/schemas/subjects")["subjects"]}
    assert subjects["things-value"]["versions"] == 2
    assert subjects["things-value"]["compatibility"] == "BACKWARD"
    detail = ok(broker, "GET", "/schemas/subjects/things-value")
    assert [v["version"] for v in detail["versions"]] == [1, 2]
    latest = ok(broker, "GET", "/schemas/subjects/things-value/versions/latest")
    assert latest["version"] == 2 and '"b"' in latest["schema"]
    diff = ok(broker, "GET", "/schemas/subjects/things-value/diff?from=1&to=2")["diff"]
    assert '+      "name": "b",' in diff
    bad = {"type": "record", "name": "R", "fields": [{"name": "c", "type": "int"}]}
    check = ok(
        broker,
        "POST",
        "/schemas/subjects/things-value/compatibility",
        {"schema": json.dumps(bad), "schema_type": "AVRO"},
    )
    assert check["compatible"] is False and check["messages"]
    assert call(broker, "GET", "/schemas/subjects/things-value/versions/9")[0] == 404


def wait_committed(broker: Broker, topic: str, count: int) -> dict[str, Any]:
    deadline = time.monotonic() + TABLE_DEADLINE_S
    while True:
        status = ok(broker, "GET", f"/tables/{topic}")
        done = sum(p["committed_offset"] or 0 for p in status["partitions"])
        if done >= count:
            return status
        assert time.monotonic() < deadline, status
        time.sleep(0.5)


def test_table_topic_and_sql(broker: Broker) -> None:
    ok(broker, "POST", "/topics", {"name": "events", "partitions": 2})
    status, body = call(
        broker,
        "PUT",
        "/topics/events/table",
        {"enabled": True, "settings": {"commit.interval.ms": "10"}},
    )
    assert status == 400 and "commit.interval.ms" in body["message"]
    enabled = ok(
        broker,
        "PUT",
        "/topics/events/table",
        {
            "enabled": True,
            "settings": {"commit.interval.ms": "1000", "convert.value.type": "string"},
        },
    )
    assert enabled["table_topic"] is True
    assert enabled["overrides"]["table.topic.convert.value.type"] == "string"
    confluent_produce(
        broker.bootstrap,
        "events",
        [Record(b"k", f"e{i}".encode(), (), recent_ts(), i % 2) for i in range(30)],
    )
    wait_committed(broker, "events", 30)
    history = ok(broker, "GET", "/tables/events/snapshots")
    assert history["table"].startswith("default.events")
    snaps = history["snapshots"]
    assert snaps and sum(s["added_records"] for s in snaps) == 30
    assert snaps[0]["commit_id"] and snaps[0]["offsets"]
    sample = ok(broker, "GET", "/tables/events/sample?limit=5")
    assert "_kafka_value" in sample["columns"] and len(sample["rows"]) == 5
    assert sample["truncated"] is True

    table = f"floe.{history['table']}"
    result = ok(broker, "POST", "/sql", {"statement": f"SELECT count(*) AS n FROM {table}"})
    assert result["columns"] == ["n"] and result["rows"] == [[30]]
    limited = ok(
        broker,
        "POST",
        "/sql",
        {"statement": f"SELECT _kafka_value FROM {table} ORDER BY _kafka_value", "limit": 3},
    )
    assert limited["rows"] == [["e0"], ["e1"], ["e10"]] and limited["truncated"] is True
    assert ok(broker, "POST", "/sql", {"statement": f"DESCRIBE {table}"})["rows"]
    for refused in (
        f"DROP TABLE {table}",
        f"INSERT INTO {table} SELECT * FROM {table}",
        "SELECT 1; SELECT 2",
    ):
        status, body = call(broker, "POST", "/sql", {"statement": refused})
        assert status == 400, body
        assert body["error_code"] == 400 and body["message"]
    status, body = call(broker, "POST", "/sql", {"statement": "SELECT * FROM floe.default.nope"})
    assert status == 400 and "TABLE_OR_VIEW_NOT_FOUND" in body["message"]
    status, body = call(broker, "POST", "/sql", {"statement": "SELECT 1", "limit": 0})
    assert status == 400 and "limit" in body["message"]

    disabled = ok(broker, "PUT", "/topics/events/table", {"enabled": False})
    assert disabled["table_topic"] is False
    assert ok(broker, "GET", "/tables/events")["status"] == "disabled"
    assert len(ok(broker, "GET", "/tables/events/snapshots")["snapshots"]) == len(snaps)


def test_cluster_overview_and_openapi(broker: Broker) -> None:
    cluster = ok(broker, "GET", "/cluster")
    assert cluster["kafka"] == broker.bootstrap and cluster["node_id"] == 1
    assert cluster["storage"] == f"local {broker.data_dir.resolve() / 'logs'}"
    overview = ok(broker, "GET", "/overview")
    assert overview["topics"] == cluster["topics"] and overview["time_ms"] > 0
    spec = ok(broker, "GET", "/openapi.json")
    paths = spec["paths"]
    for path in (
        "/api/v1/topics",
        "/api/v1/topics/{topic}",
        "/api/v1/topics/{topic}/configs",
        "/api/v1/topics/{topic}/messages",
        "/api/v1/topics/{topic}/table",
        "/api/v1/groups/{group}",
        "/api/v1/schemas/subjects/{subject}/diff",
        "/api/v1/tables/{topic}/snapshots",
        "/api/v1/tables/{topic}/sample",
        "/api/v1/sql",
    ):
        assert path in paths, path
