"""Floe's Schema Registry REST API over HTTP: every endpoint, Confluent error bodies on
every 4xx path, bad input (malformed JSON, huge bodies, invalid schemas) and parallel
registrations. Runs on the shared broker: each test uses its own subjects."""

from __future__ import annotations

import json
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from helpers.broker import Broker
from helpers.registry import avro_record, call

A1 = avro_record("R", {"name": "a", "type": "string"})
A2 = avro_record("R", {"name": "a", "type": "string"}, {"name": "b", "type": "int", "default": 0})
BREAKING = avro_record("R", {"name": "a", "type": "int"})


def subject(prefix: str = "api") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def register(url: str, subj: str, schema: str, **extra: object) -> int:
    status, body = call(url, "POST", f"/subjects/{subj}/versions", {"schema": schema, **extra})
    assert status == 200, body
    return int(body["id"])


def assert_error(got: tuple[int, object], status: int, code: int) -> None:
    actual_status, body = got
    assert isinstance(body, dict), body
    assert (actual_status, body.get("error_code")) == (status, code), body
    assert isinstance(body.get("message"), str) and body["message"]


def test_subject_version_and_id_endpoints(broker: Broker) -> None:
    url, s, other = broker.registry_url, subject(), subject()
    assert call(url, "GET", "/") == (200, {})
    assert call(url, "GET", "/health")[0] == 200
    assert call(url, "GET", "/schemas/types") == (200, ["AVRO", "JSON", "PROTOBUF"])
    id1 = register(url, s, A1)
    assert register(url, s, A1) == id1  # identical: same id, no new version
    id2 = register(url, s, A2)
    assert register(url, other, A1) == id1  # ids are global across subjects
    assert id2 > id1
    status, subjects = call(url, "GET", f"/subjects?subjectPrefix={s[:-8]}")
    assert status == 200 and s in subjects and other in subjects
    assert call(url, "GET", f"/subjects/{s}/versions") == (200, [1, 2])
    status, latest = call(url, "GET", f"/subjects/{s}/versions/latest")
    assert (latest["subject"], latest["version"], latest["id"]) == (s, 2, id2)
    assert json.loads(latest["schema"]) == json.loads(A2)
    assert call(url, "GET", f"/subjects/{s}/versions/-1")[1]["version"] == 2
    status, raw = call(url, "GET", f"/subjects/{s}/versions/1/schema")
    assert status == 200 and raw == json.loads(A1)
    status, found = call(url, "POST", f"/subjects/{s}", {"schema": A1})
    assert (status, found["version"], found["id"]) == (200, 1, id1)
    assert call(url, "GET", f"/schemas/ids/{id1}")[1] == {"schema": A1}
    assert call(url, "GET", f"/schemas/ids/{id1}/schema")[1] == json.loads(A1)
    assert call(url, "GET", f"/schemas/ids/{id1}/subjects")[1] == sorted([s, other])
    assert call(url, "GET", f"/schemas/ids/{id1}/versions")[1] == sorted(
        [{"subject": s, "version": 1}, {"subject": other, "version": 1}],
        key=lambda v: v["subject"],
    )
    status, listed = call(url, "GET", f"/schemas?subjectPrefix={s}&latestOnly=true")
    assert status == 200 and [(v["subject"], v["version"]) for v in listed] == [(s, 2)]


def test_compatibility_config_and_mode_per_subject(broker: Broker) -> None:
    url, s = broker.registry_url, subject()
    register(url, s, A1)
    check = f"/compatibility/subjects/{s}/versions/latest"
    assert call(url, "POST", check, {"schema": A2}) == (200, {"is_compatible": True})
    status, body = call(url, "POST", check + "?verbose=true", {"schema": BREAKING})
    assert status == 200 and body["is_compatible"] is False and body["messages"]
    assert call(url, "POST", f"/compatibility/subjects/{s}/versions", {"schema": A2})[1] == {
        "is_compatible": True
    }
    assert_error(call(url, "POST", f"/subjects/{s}/versions", {"schema": BREAKING}), 409, 409)
    assert_error(call(url, "GET", f"/config/{s}"), 404, 40408)
    assert call(url, "GET", f"/config/{s}?defaultToGlobal=true")[1] == {
        "compatibilityLevel": "BACKWARD"
    }
    assert call(url, "PUT", f"/config/{s}", {"compatibility": "NONE"}) == (
        200,
        {"compatibility": "NONE"},
    )
    assert call(url, "GET", f"/config/{s}")[1] == {"compatibilityLevel": "NONE"}
    register(url, s, BREAKING)
    assert call(url, "DELETE", f"/config/{s}")[1] == {"compatibilityLevel": "NONE"}
    assert_error(call(url, "GET", f"/mode/{s}"), 404, 40409)
    assert call(url, "GET", f"/mode/{s}?defaultToGlobal=true")[1] == {"mode": "READWRITE"}
    assert call(url, "PUT", f"/mode/{s}", {"mode": "READONLY"})[1] == {"mode": "READONLY"}
    assert_error(call(url, "POST", f"/subjects/{s}/versions", {"schema": A2}), 422, 42205)
    assert call(url, "DELETE", f"/mode/{s}")[1] == {"mode": "READONLY"}
    assert call(url, "GET", "/mode")[1] == {"mode": "READWRITE"}
    assert call(url, "GET", "/config")[1] == {"compatibilityLevel": "BACKWARD"}


def test_deletes_and_references(broker: Broker) -> None:
    url, s, dep = broker.registry_url, subject(), subject("dep")
    addr = json.dumps(
        {
            "type": "record",
            "name": "Addr",
            "namespace": "x",
            "fields": [{"name": "s", "type": "string"}],
        }
    )
    register(url, dep, addr)
    user = avro_record("User", {"name": "a", "type": "x.Addr"})
    refs = [{"name": "x.Addr", "subject": dep, "version": 1}]
    uid = register(url, s, user, references=refs)
    assert call(url, "GET", f"/subjects/{dep}/versions/1/referencedby") == (200, [uid])
    assert call(url, "GET", f"/schemas/ids/{uid}")[1]["references"] == refs
    assert_error(call(url, "DELETE", f"/subjects/{dep}"), 422, 42206)
    assert_error(call(url, "DELETE", f"/subjects/{s}?permanent=true"), 404, 40405)
    assert_error(call(url, "DELETE", f"/subjects/{s}/versions/1?permanent=true"), 404, 40407)
    assert call(url, "DELETE", f"/subjects/{s}/versions/1") == (200, 1)
    assert_error(call(url, "DELETE", f"/subjects/{s}/versions/1"), 404, 40406)
    assert_error(call(url, "GET", f"/subjects/{s}/versions"), 404, 40401)
    assert call(url, "GET", f"/subjects/{s}/versions?deleted=true") == (200, [1])
    assert call(url, "GET", f"/subjects/{s}/versions/1?deleted=true")[1]["id"] == uid
    assert s in call(url, "GET", "/subjects?deleted=true")[1]
    assert s not in call(url, "GET", "/subjects")[1]
    assert_error(call(url, "DELETE", f"/subjects/{s}"), 404, 40404)
    assert call(url, "DELETE", f"/subjects/{s}?permanent=true") == (200, [1])
    assert_error(call(url, "GET", f"/schemas/ids/{uid}"), 404, 40403)
    assert call(url, "DELETE", f"/subjects/{dep}") == (200, [1])  # no longer referenced


@pytest.mark.parametrize(
    ("method", "path", "body", "expected"),
    [
        ("GET", "/subjects/nope-{u}/versions", None, (404, 40401)),
        ("GET", "/subjects/{s}/versions/9", None, (404, 40402)),
        ("GET", "/subjects/{s}/versions/0", None, (422, 42202)),
        ("GET", "/subjects/{s}/versions/abc", None, (422, 42202)),
        ("GET", "/schemas/ids/999999", None, (404, 40403)),
        ("GET", "/schemas/ids/999999/subjects", None, (404, 40403)),
        ("POST", "/subjects/{s}", {"schema": '"int"'}, (404, 40403)),
        ("POST", "/subjects/nope-{u}", {"schema": '"int"'}, (404, 40401)),
        ("POST", "/subjects/{s}/versions", {"schema": "{broken"}, (422, 42201)),
        ("POST", "/subjects/{s}/versions", {"schema": ""}, (422, 42201)),
        ("POST", "/subjects/{s}/versions", {"schema": '"int"', "schemaType": "XML"}, (422, 42201)),
        (
            "POST",
            "/subjects/{s}/versions",
            {"schema": "{}", "schemaType": "JSON", "references": [{"name": "x"}]},
            (422, 422),
        ),
        ("POST", "/subjects/{s}/versions", {"schema": '"int"', "id": 5}, (422, 42205)),
        (
            "POST",
            "/subjects/{s}/versions",
            {"schema": "message {", "schemaType": "PROTOBUF"},
            (422, 42201),
        ),
        (
            "POST",
            "/subjects/{s}/versions",
            {"schema": '{"type": 5}', "schemaType": "JSON"},
            (422, 42201),
        ),
        ("POST", "/compatibility/subjects/{s}/versions/7", {"schema": '"int"'}, (404, 40402)),
        ("PUT", "/config/{s}", {"compatibility": "SIDEWAYS"}, (422, 42203)),
        ("PUT", "/mode/{s}", {"mode": "SLEEPY"}, (422, 42204)),
        ("PUT", "/config/{s}", {}, (422, 42203)),
        ("PUT", "/mode/{s}", {"mode": None}, (422, 42204)),
        ("DELETE", "/config/nope-{u}", None, (404, 40401)),
        ("DELETE", "/subjects/nope-{u}", None, (404, 40401)),
        ("DELETE", "/subjects/{s}/versions/4", None, (404, 40402)),
        ("GET", "/no/such/route", None, (404, 404)),
        ("PATCH", "/subjects", None, (405, 405)),
    ],
)
def test_error_bodies(
    broker: Broker, method: str, path: str, body: object, expected: tuple[int, int]
) -> None:
    s = subject("err")
    register(broker.registry_url, s, A1)
    path = path.format(s=s, u=uuid.uuid4().hex[:6])
    assert_error(call(broker.registry_url, method, path, body), *expected)


def test_malformed_huge_and_odd_bodies(broker: Broker) -> None:
    url, s = broker.registry_url, subject("bad")
    assert_error(call(url, "POST", f"/subjects/{s}/versions", raw=b"{not json"), 400, 400)
    assert_error(call(url, "POST", f"/subjects/{s}/versions", raw=b"[1, 2]"), 422, 422)
    assert_error(call(url, "POST", f"/subjects/{s}/versions", raw=b"\xff\xfe"), 400, 400)
    huge = b'{"schema": "' + b"x" * (17 * 1024 * 1024) + b'"}'
    assert_error(call(url, "POST", f"/subjects/{s}/versions", raw=huge), 413, 413)
    assert_error(
        call(url, "POST", f"/subjects/{s}/versions", {"schema": A1}, content_type="text/xml"),
        415,
        415,
    )
    for content_type in ("application/vnd.schemaregistry+json", "application/json"):
        status, _ = call(
            url, "POST", f"/subjects/{s}/versions", {"schema": A1}, content_type=content_type
        )
        assert status == 200
    deep = '{"type": "array", "items": ' * 2000 + '"int"' + "}" * 2000
    status, body = call(url, "POST", f"/subjects/{s}/versions", {"schema": deep})
    assert 400 <= status < 500, body
    broker.assert_alive()


def test_parallel_registrations_give_consistent_ids(broker: Broker) -> None:
    url, base = broker.registry_url, subject("par")
    schemas = [avro_record(f"R{i}", {"name": "a", "type": "string"}) for i in range(8)]

    def same(i: int) -> int:
        return register(url, f"{base}-same-{i % 4}", A2)

    def different(i: int) -> int:
        return (
            register(url, f"{base}-diff", schemas[i])
            if i == 0
            else register(url, f"{base}-d{i}", schemas[i])
        )

    with ThreadPoolExecutor(16) as pool:
        same_ids = list(pool.map(same, range(16)))
        different_ids = list(pool.map(different, range(8)))
    assert len(set(same_ids)) == 1
    assert len(set(different_ids)) == 8
    for i in range(4):
        assert call(url, "GET", f"/subjects/{base}-same-{i}/versions")[1] == [1]


def test_protobuf_references_and_compatibility(broker: Broker) -> None:
    url, s = broker.registry_url, subject("proto")
    dep = f"{s}%2Fmoney.proto"  # a subject with a slash, as Confluent's serializer names them
    money = 'syntax = "proto3";\npackage common;\nmessage Money { int64 units = 1; }\n'
    register(url, dep, money, schemaType="PROTOBUF")
    order = (
        'syntax = "proto3";\npackage shop;\nimport "money.proto";\n'
        'import "google/protobuf/timestamp.proto";\n'
        "message Order { common.Money total = 1; google.protobuf.Timestamp at = 2; }\n"
    )
    refs = [{"name": "money.proto", "subject": f"{s}/money.proto", "version": 1}]
    oid = register(url, s, order, schemaType="PROTOBUF", references=refs)
    status, body = call(url, "GET", f"/subjects/{s}/versions/1?format=serialized")
    assert status == 200 and body["schemaType"] == "PROTOBUF" and "message" not in body["schema"]
    # The base64 form is the same schema: same id, no new version.
    assert register(url, s, body["schema"], schemaType="PROTOBUF", references=refs) == oid
    assert call(url, "GET", f"/subjects/{dep}/versions/1/referencedby") == (200, [oid])
    breaking = order.replace("common.Money total = 1", "string total = 1")
    assert_error(
        call(
            url,
            "POST",
            f"/subjects/{s}/versions",
            {"schema": breaking, "schemaType": "PROTOBUF", "references": refs},
        ),
        409,
        409,
    )
    unknown_import = order.replace('"money.proto"', '"nope.proto"')
    assert_error(
        call(
            url,
            "POST",
            f"/subjects/{s}/versions",
            {"schema": unknown_import, "schemaType": "PROTOBUF", "references": refs},
        ),
        422,
        42201,
    )
