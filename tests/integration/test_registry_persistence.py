"""Registry state lives on ``_schemas``: schemas, configs, modes and deletions survive
a clean restart and ``kill -9``; ids are never handed out twice. Private brokers, so
global config and mode changes stay here."""

from __future__ import annotations

import socket
from collections.abc import Callable

import pytest

from helpers.broker import Broker
from helpers.registry import avro_record, call

A1 = avro_record("R", {"name": "a", "type": "string"})
A2 = avro_record("R", {"name": "a", "type": "string"}, {"name": "b", "type": "int", "default": 0})
P1 = 'syntax = "proto3";\npackage p;\nmessage M { int32 a = 1; }\n'
J1 = '{"type": "object", "properties": {"a": {"type": "string"}}}'


def snapshot(url: str) -> dict[str, object]:
    subjects = call(url, "GET", "/subjects?deleted=true")[1]
    return {
        "subjects": subjects,
        "versions": {
            s: call(url, "GET", f"/subjects/{s}/versions?deleted=true")[1] for s in subjects
        },
        "schemas": call(url, "GET", "/schemas?deleted=true")[1],
        "config": call(url, "GET", "/config")[1],
        "subject_config": call(url, "GET", "/config/a")[1],
        "mode": call(url, "GET", "/mode/j")[1],
    }


def populate(url: str) -> None:
    for subject, body in [
        ("a", {"schema": A1}),
        ("a", {"schema": A2}),
        ("p", {"schema": P1, "schemaType": "PROTOBUF"}),
        ("j", {"schema": J1, "schemaType": "JSON"}),
        ("gone", {"schema": '"string"'}),
    ]:
        status, got = call(url, "POST", f"/subjects/{subject}/versions", body)
        assert status == 200, got
    assert call(url, "PUT", "/config", {"compatibility": "FULL"})[0] == 200
    assert call(url, "PUT", "/config/a", {"compatibility": "NONE"})[0] == 200
    assert call(url, "PUT", "/mode/j", {"mode": "READONLY"})[0] == 200
    assert call(url, "DELETE", "/subjects/a/versions/1")[0] == 200
    assert call(url, "DELETE", "/subjects/gone")[0] == 200
    assert call(url, "DELETE", "/subjects/gone?permanent=true")[0] == 200


def test_state_survives_restart_and_kill9(broker_factory: Callable[..., Broker]) -> None:
    b = broker_factory()
    populate(b.registry_url)
    before = snapshot(b.registry_url)
    assert before["config"] == {"compatibilityLevel": "FULL"}
    b.restart()
    assert snapshot(b.registry_url) == before
    b.kill()
    b.start()
    assert snapshot(b.registry_url) == before
    # Ids are never reused: "gone" held id 5 (the highest) and was permanently deleted.
    status, body = call(b.registry_url, "POST", "/subjects/new/versions", {"schema": '"long"'})
    assert (status, body) == (200, {"id": 6})


def test_acknowledged_writes_survive_kill9(engine_broker_factory: Callable[..., Broker]) -> None:
    # default flush policy: a write is answered after its fsync (object storage: its
    # upload, and there the disk is lost too)
    b = engine_broker_factory()
    url = b.registry_url
    ids = []
    for i in range(20):
        schema = avro_record(f"R{i}", {"name": "a", "type": "string"})
        status, body = call(url, "POST", f"/subjects/s{i}/versions", {"schema": schema})
        assert status == 200
        ids.append(body["id"])
    b.kill()
    if b.on_object_storage:
        b.lose_disk()
    b.start()
    for i, schema_id in enumerate(ids):
        status, body = call(url, "GET", f"/subjects/s{i}/versions/1")
        assert (status, body["id"]) == (200, schema_id)


def test_import_mode_with_explicit_ids(broker_factory: Callable[..., Broker]) -> None:
    b = broker_factory()
    url = b.registry_url
    assert call(url, "PUT", "/mode", {"mode": "IMPORT"}) == (200, {"mode": "IMPORT"})
    body = {"schema": A1, "id": 100, "version": 7}
    assert call(url, "POST", "/subjects/imp/versions", body) == (200, {"id": 100})
    status, err = call(url, "POST", "/subjects/other/versions", {"schema": A2, "id": 100})
    assert (status, err["error_code"]) == (422, 42207)
    assert call(url, "PUT", "/mode", {"mode": "READWRITE"})[0] == 200
    status, err = call(url, "PUT", "/mode", {"mode": "IMPORT"})
    assert (status, err["error_code"]) == (422, 42205)  # subjects exist: needs force
    assert call(url, "PUT", "/mode?force=true", {"mode": "IMPORT"})[0] == 200
    assert call(url, "PUT", "/mode", {"mode": "READWRITE"})[0] == 200
    b.restart()
    assert call(url, "GET", "/subjects/imp/versions/7")[1]["id"] == 100
    assert call(url, "POST", "/subjects/next/versions", {"schema": A2}) == (200, {"id": 101})


def test_registry_can_be_disabled(broker_factory: Callable[..., Broker]) -> None:
    b = broker_factory({"registry.enable": "false"})
    with pytest.raises(OSError):
        socket.create_connection((b.host, b.registry_port), timeout=1).close()
    assert "Registry:" not in b.stderr_text()
