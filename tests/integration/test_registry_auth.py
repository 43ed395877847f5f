"""The Schema Registry behind HTTP Basic and the broker's ACLs, on a real ``floe up``.

One broker with ``registry.authentication = basic``, ``authorizer.enable``, the
bootstrap admin (a super user) and ``alice``, created over a SASL_PLAINTEXT listener as
Kafka clients do; her TOPIC ACLs on ``orders`` are added step by step, and the registry
must follow them for the subject ``orders-value``.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import (
    AclOperation,
    AdminClient,
)
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from helpers.broker import Broker
from helpers.registry import avro_record
from helpers.security import (
    ADMIN,
    ADMIN_PASSWORD,
    allow_topic,
    sasl_client,
    secured_broker,
    set_password,
)

ALICE, ALICE_PASSWORD = "alice", "alice-secret"
SUBJECT = "orders-value"
TIMEOUT = 15
V1 = avro_record("Order", {"name": "id", "type": "long"})
V2 = avro_record(
    "Order", {"name": "id", "type": "long"}, {"name": "note", "type": "string", "default": ""}
)


@dataclass
class Secured:
    broker: Broker
    admin: AdminClient

    @property
    def url(self) -> str:
        return self.broker.registry_url

    def allow(self, operation: AclOperation) -> None:
        allow_topic(self.admin, f"User:{ALICE}", operation, "orders")


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    root: Path = tmp_path_factory.mktemp("registry-auth")
    b, sasl = secured_broker(root / "data", **{"registry.authentication": "basic"})
    try:
        b.start()
        admin = AdminClient(sasl_client(sasl, ADMIN, ADMIN_PASSWORD))
        set_password(admin, ALICE, ALICE_PASSWORD)
        yield Secured(b, admin)
        b.stop()
    finally:
        b.close()


def call(
    base: str,
    method: str,
    path: str,
    body: object = None,
    auth: tuple[str, str] | None = None,
) -> tuple[int, Any, dict[str, str]]:
    """One request with HTTP Basic ``auth``; (status, decoded JSON body, headers)."""
    headers = {"Content-Type": "application/vnd.schemaregistry.v1+json"}
    if auth is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(":".join(auth).encode()).decode()
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            status, payload, got = resp.status, resp.read(), dict(resp.headers)
    except urllib.error.HTTPError as exc:
        status, payload, got = exc.code, exc.read(), dict(exc.headers)
    return status, json.loads(payload), got


ADMIN_AUTH, ALICE_AUTH = (ADMIN, ADMIN_PASSWORD), (ALICE, ALICE_PASSWORD)
UNAUTHORIZED = {"error_code": 401, "message": "Unauthorized"}


def test_without_or_with_a_wrong_credential_the_registry_answers_401(secured: Secured) -> None:
    assert call(secured.url, "GET", "/")[:2] == (200, {})  # the one open route
    for auth in (None, (ALICE, "wrong"), ("nobody", ALICE_PASSWORD)):
        status, body, headers = call(secured.url, "GET", "/subjects", auth=auth)
        assert (status, body) == (401, UNAUTHORIZED), auth
        assert headers["www-authenticate"] == 'Basic realm="floe-registry"'
    status, body, _ = call(secured.url, "POST", f"/subjects/{SUBJECT}/versions", {"schema": V1})
    assert (status, body) == (401, UNAUTHORIZED)
    log = secured.broker.stderr_text()
    assert ALICE_PASSWORD not in log and "wrong" not in log


def test_subjects_follow_the_topic_acls(secured: Secured) -> None:
    url, path = secured.url, f"/subjects/{SUBJECT}/versions"
    assert call(url, "POST", path, {"schema": V1}, ADMIN_AUTH)[:2] == (200, {"id": 1})
    assert call(url, "GET", "/subjects", auth=ADMIN_AUTH)[:2] == (200, [SUBJECT])

    # no ACL: nothing visible, nothing allowed
    status, body, _ = call(url, "POST", path, {"schema": V2}, ALICE_AUTH)
    assert status == 403
    assert body == {
        "error_code": 40301,
        "message": f"User is denied operation WRITE on subject {SUBJECT}",
    }
    assert call(url, "GET", "/subjects", auth=ALICE_AUTH)[:2] == (200, [])
    assert call(url, "GET", "/schemas", auth=ALICE_AUTH)[:2] == (200, [])
    assert call(url, "GET", path, auth=ALICE_AUTH)[0] == 403
    assert call(url, "PUT", "/config", {"compatibility": "NONE"}, ALICE_AUTH)[0] == 403
    assert call(url, "GET", "/schemas/ids/1", auth=ALICE_AUTH)[0] == 200  # by id: anyone

    secured.allow(AclOperation.READ)
    assert call(url, "GET", "/subjects", auth=ALICE_AUTH)[:2] == (200, [SUBJECT])
    assert call(url, "GET", path, auth=ALICE_AUTH)[:2] == (200, [1])
    assert call(url, "GET", path + "/latest", auth=ALICE_AUTH)[1]["id"] == 1
    assert call(url, "POST", path, {"schema": V2}, ALICE_AUTH)[0] == 403
    assert call(url, "PUT", f"/config/{SUBJECT}", {"compatibility": "NONE"}, ALICE_AUTH)[0] == 403
    assert call(url, "DELETE", f"/subjects/{SUBJECT}", auth=ALICE_AUTH)[0] == 403

    secured.allow(AclOperation.WRITE)
    assert call(url, "POST", path, {"schema": V2}, ALICE_AUTH)[:2] == (200, {"id": 2})
    assert call(url, "GET", path, auth=ADMIN_AUTH)[:2] == (200, [1, 2])


def test_confluent_client_with_basic_auth_user_info(secured: Secured) -> None:
    secured.allow(AclOperation.WRITE)  # idempotent: the previous test may not have run
    client = SchemaRegistryClient(
        {"url": secured.url, "basic.auth.user.info": f"{ALICE}:{ALICE_PASSWORD}"}
    )
    schema_id = client.register_schema(SUBJECT, Schema(V2, "AVRO"))
    assert client.get_latest_version(SUBJECT).schema_id == schema_id
    assert json.loads(client.get_schema(schema_id).schema_str) == json.loads(V2)
    assert SUBJECT in client.get_subjects()

    wrong = SchemaRegistryClient({"url": secured.url, "basic.auth.user.info": f"{ALICE}:nope"})
    with pytest.raises(SchemaRegistryError) as info:
        wrong.get_subjects()
    assert info.value.http_status_code == 401
    assert info.value.error_code == 401
