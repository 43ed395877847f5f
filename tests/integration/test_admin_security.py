"""The admin API and console behind logins, the ACLs and TLS, and the Schema Registry
over TLS, on a real ``floe up``.

One broker with ``admin.authentication = basic``, ``authorizer.enable``, HTTPS on the
admin and registry ports (a test CA made here), the bootstrap admin (a super user),
``alice`` (no ACLs at first) and ``analyst`` (the SQL grant, no ACLs), the users created
over a SASL_PLAINTEXT listener as Kafka clients do. The HTTP client is urllib (what a
script would use) with redirects not followed and the cookie carried by hand, so each
answer is seen as the browser would get it.
"""

from __future__ import annotations

import base64
import json
import re
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from helpers.broker import Broker
from helpers.certs import Pki, make_pki
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
ANALYST, ANALYST_PASSWORD = "analyst", "analyst-secret"
TOPICS = ("orders", "payments")
TIMEOUT = 15


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


@dataclass
class Secured:
    broker: Broker
    kafka: AdminClient
    pki: Pki
    sasl: str

    @property
    def admin_url(self) -> str:
        return f"https://127.0.0.1:{self.broker.admin_port}"

    @property
    def registry_url(self) -> str:
        return f"https://127.0.0.1:{self.broker.registry_port}"

    def call(
        self,
        method: str,
        path: str,
        *,
        auth: tuple[str, str] | None = None,
        cookie: str | None = None,
        headers: dict[str, str] | None = None,
        body: object = None,
        form: dict[str, str] | None = None,
    ) -> Reply:
        """One request to the admin port (HTTPS, trusting the test CA)."""
        sent = dict(headers or {})
        data = None
        if auth is not None:
            sent["Authorization"] = "Basic " + base64.b64encode(":".join(auth).encode()).decode()
        if cookie is not None:
            sent["Cookie"] = cookie
        if body is not None:
            data, sent["Content-Type"] = json.dumps(body).encode(), "application/json"
        if form is not None:
            data = urllib.parse.urlencode(form).encode()
            sent["Content-Type"] = "application/x-www-form-urlencoded"
        req = urllib.request.Request(self.admin_url + path, data, sent, method=method)
        context = ssl.create_default_context(cafile=str(self.pki.ca_cert))
        opener = urllib.request.build_opener(
            _NoRedirect, urllib.request.HTTPSHandler(context=context)
        )
        try:
            with opener.open(req, timeout=30) as resp:
                return Reply(resp.status, dict(resp.headers), resp.read())
        except urllib.error.HTTPError as exc:
            return Reply(exc.code, dict(exc.headers), exc.read())

    def login(self, user: str, password: str) -> tuple[str, str]:
        """Log in through the form; (Cookie header value, the page's CSRF token)."""
        reply = self.call("POST", "/login", form={"user": user, "password": password})
        assert reply.status == 303, reply
        cookie = reply.headers["set-cookie"].split(";", 1)[0]
        page = self.call("GET", "/topics", cookie=cookie)
        assert page.status == 200, page
        found = re.search(r'<meta name="csrf-token" content="([^"]+)">', page.text)
        assert found, page.text[:500]
        return cookie, found[1]

    def allow(self, principal: str, operation: AclOperation, topic: str) -> None:
        allow_topic(self.kafka, principal, operation, topic)

    def set_password(self, user: str, password: str) -> None:
        set_password(self.kafka, user, password)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    root: Path = tmp_path_factory.mktemp("admin-security")
    pki = make_pki(root / "pki")
    b, sasl = secured_broker(
        root / "data",
        **{
            "admin.authentication": "basic",
            "admin.sql.principals": f"User:{ANALYST}",
            "admin.ssl.enable": "true",
            "registry.authentication": "basic",
            "registry.ssl.enable": "true",
            "admin.history.interval.ms": "500",
            "ssl.certificate.location": str(pki.server_cert),
            "ssl.key.location": str(pki.server_key),
        },
    )
    try:
        b.start()
        kafka = AdminClient(sasl_client(sasl, ADMIN, ADMIN_PASSWORD))
        secured = Secured(b, kafka, pki, sasl)
        secured.set_password(ALICE, ALICE_PASSWORD)
        secured.set_password(ANALYST, ANALYST_PASSWORD)
        for f in kafka.create_topics([NewTopic(t, 1) for t in TOPICS]).values():
            f.result(TIMEOUT)
        producer = ck.Producer(sasl_client(sasl, ADMIN, ADMIN_PASSWORD))
        producer.produce("orders", b"an order")  # traffic the charts sample
        assert producer.flush(TIMEOUT) == 0
        yield secured
        b.stop()
    finally:
        b.close()


@pytest.fixture
def no_acls(secured: Secured) -> Iterator[None]:
    """Every ACL the test added is gone after it."""
    yield
    wildcard = AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
        AclOperation.ANY, AclPermissionType.ANY,
    )  # fmt: skip
    for f in secured.kafka.delete_acls([wildcard]).values():
        f.result(TIMEOUT)


def test_plain_http_is_refused_on_the_https_ports(secured: Secured) -> None:
    for port in (secured.broker.admin_port, secured.broker.registry_port):
        with pytest.raises((urllib.error.URLError, ConnectionError)):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/health", timeout=10)


def test_health_is_public_and_everything_else_needs_credentials(secured: Secured) -> None:
    assert secured.call("GET", "/api/v1/health").status == 200
    api = secured.call("GET", "/api/v1/topics")
    assert api.status == 401
    assert api.json() == {"error_code": 401, "message": "authentication required"}
    assert api.headers["www-authenticate"] == 'Basic realm="floe-admin"'
    # the console's script gets no Basic challenge (no browser password dialog)
    quiet = secured.call("GET", "/api/v1/topics", headers={"X-Floe-Console": "1"})
    assert quiet.status == 401 and "www-authenticate" not in {k.lower() for k in quiet.headers}
    assert secured.call("GET", "/metrics").status == 401
    page = secured.call("GET", "/topics?x=1")
    assert page.status == 303
    assert page.headers["location"] == "/login?next=%2Ftopics%3Fx%3D1"
    wrong = secured.call("GET", "/api/v1/topics", auth=(ADMIN, "wrong"))
    assert wrong.status == 401
    nobody = secured.call("GET", "/api/v1/topics", auth=("nobody", ADMIN_PASSWORD))
    assert nobody.status == 401


def test_basic_credentials_serve_the_api(secured: Secured) -> None:
    topics = secured.call("GET", "/api/v1/topics", auth=(ADMIN, ADMIN_PASSWORD))
    assert topics.status == 200
    assert {t["topic"] for t in topics.json()["topics"]} >= set(TOPICS)
    metrics = secured.call("GET", "/metrics", auth=(ADMIN, ADMIN_PASSWORD))
    assert metrics.status == 200 and b"floe_" in metrics.body


def test_hosts_and_origins_that_are_not_this_server_are_refused(secured: Secured) -> None:
    """DNS rebinding: a page on evil.example whose name now points at 127.0.0.1 sends
    Host: evil.example; a cross-site form posts with a foreign Origin."""
    auth = (ADMIN, ADMIN_PASSWORD)
    rebound = secured.call("GET", "/api/v1/topics", auth=auth, headers={"Host": "evil.example"})
    assert rebound.status == 403
    assert "admin.allowed.hosts" in rebound.json()["message"]
    page = secured.call("GET", "/", headers={"Host": "evil.example:8080"})
    assert page.status == 403
    here = f"127.0.0.1:{secured.broker.admin_port}"
    assert secured.call("GET", "/api/v1/topics", auth=auth, headers={"Host": here}).status == 200
    assert (
        secured.call("GET", "/api/v1/health", headers={"Host": "evil.example"}).status == 200
    )  # health is for load balancers, whatever name they use
    body = {"name": "made-cross-site", "partitions": 1}
    for headers in (
        {"Origin": "https://evil.example"},
        {"Origin": f"https://evil.example:{secured.broker.admin_port}"},
        {"Sec-Fetch-Site": "cross-site"},
    ):
        refused = secured.call("POST", "/api/v1/topics", auth=auth, headers=headers, body=body)
        assert refused.status == 403, headers
    login = secured.call(
        "POST",
        "/login",
        form={"user": ADMIN, "password": ADMIN_PASSWORD},
        headers={"Origin": "https://evil.example"},
    )  # no login CSRF either
    assert login.status == 403
    names = {t["topic"] for t in secured.call("GET", "/api/v1/topics", auth=auth).json()["topics"]}
    assert "made-cross-site" not in names


def test_console_login_session_and_csrf(secured: Secured) -> None:
    bad = secured.call("POST", "/login", form={"user": ADMIN, "password": "wrong"})
    assert bad.status == 401 and "wrong user or password" in bad.text
    ok = secured.call(
        "POST", "/login", form={"user": ADMIN, "password": ADMIN_PASSWORD, "next": "/groups"}
    )
    assert ok.status == 303 and ok.headers["location"] == "/groups"
    flags = {f.strip().lower() for f in ok.headers["set-cookie"].split(";")[1:]}
    assert {"httponly", "samesite=strict", "secure", "path=/"} <= flags
    off_site = secured.call(
        "POST", "/login", form={"user": ADMIN, "password": ADMIN_PASSWORD, "next": "//evil.example"}
    )
    assert off_site.headers["location"] == "/"

    cookie, csrf = secured.login(ADMIN, ADMIN_PASSWORD)
    overview = secured.call("GET", "/", cookie=cookie)
    assert overview.status == 200 and 'id="logout"' in overview.text
    body = {"name": "from-console", "partitions": 1}
    forged = secured.call("POST", "/api/v1/topics", cookie=cookie, body=body)
    assert forged.status == 403 and "CSRF" in forged.json()["message"]
    wrong = secured.call(
        "POST", "/api/v1/topics", cookie=cookie, body=body, headers={"X-CSRF-Token": "x" + csrf}
    )
    assert wrong.status == 403
    made = secured.call(
        "POST", "/api/v1/topics", cookie=cookie, body=body, headers={"X-CSRF-Token": csrf}
    )
    assert made.status == 201, made

    assert (
        secured.call("POST", "/logout", cookie=cookie, headers={"X-CSRF-Token": csrf}).status == 303
    )
    assert secured.call("GET", "/", cookie=cookie).status == 303  # the session is gone


def test_a_password_change_ends_the_session(secured: Secured) -> None:
    cookie, _ = secured.login(ALICE, ALICE_PASSWORD)
    assert secured.call("GET", "/groups", cookie=cookie).status == 200
    secured.set_password(ALICE, "alice-new")
    try:
        assert secured.call("GET", "/groups", cookie=cookie).status == 303
        assert secured.call("GET", "/api/v1/groups", auth=(ALICE, ALICE_PASSWORD)).status == 401
        assert secured.call("GET", "/api/v1/groups", auth=(ALICE, "alice-new")).status == 200
    finally:
        secured.set_password(ALICE, ALICE_PASSWORD)


def _routes(secured: Secured) -> list[tuple[str, str]]:
    """Every route of the OpenAPI document but health: (method, path with every
    parameter filled in)."""
    doc = secured.call("GET", "/api/v1/openapi.json", auth=(ADMIN, ADMIN_PASSWORD)).json()
    values = {"topic": "orders", "group": "g1", "subject": "orders-value", "version": "1"}
    out = []
    for path, ops in doc["paths"].items():
        if path.endswith("/health") or path.endswith("/openapi.json"):
            continue
        filled = re.sub(r"\{(\w+)\}", lambda m: values[m[1]], path)
        out += [(method.upper(), filled) for method in ops]
    return sorted(out)


def _history(secured: Secured, auth: tuple[str, str]) -> Any:
    return secured.call("GET", "/api/v1/history", auth=auth).json()


BODIES = {
    "/api/v1/topics": {"name": "orders", "partitions": 1},
    "/api/v1/topics/orders/configs": {"set": {"retention.ms": "1000"}},
    "/api/v1/topics/orders/table": {"enabled": True},
    "/api/v1/schemas/subjects/orders-value/compatibility": {"schema": '"string"'},
    "/api/v1/sql": {"statement": "SELECT 1"},
    "/api/v1/groups/g1/offsets/reset": {"topic": "orders", "to": "earliest"},
}
LISTINGS = {
    "/api/v1/topics": "topics",
    "/api/v1/groups": "groups",
    "/api/v1/tables": "tables",
    "/api/v1/schemas/subjects": "subjects",
}


@pytest.mark.usefixtures("no_acls")
def test_a_user_without_acls_may_do_nothing_through_the_api(secured: Secured) -> None:
    """The admin API's ACL matrix: alice, with no ACL, calls every route; each answers
    403 or an empty listing, and nothing changed."""
    routes = _routes(secured)
    assert len(routes) >= 20, routes
    deadline = time.monotonic() + TIMEOUT  # the charts sampled the admin's traffic
    while "orders" not in _history(secured, (ADMIN, ADMIN_PASSWORD))["topics"]:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    allowed = []
    for method, path in routes:
        query = "?from=1" if path.endswith("/diff") else ""
        reply = secured.call(
            method, path + query, auth=(ALICE, ALICE_PASSWORD), body=BODIES.get(path)
        )
        if path in LISTINGS and method == "GET":
            if reply.status != 200 or reply.json()[LISTINGS[path]]:
                allowed.append((method, path, reply.status))
        elif path == "/api/v1/history":
            h = reply.json()
            if reply.status != 200 or h["topics"] or h["groups"] or h["tables"]:
                allowed.append((method, path, reply.status))
        elif path == "/api/v1/overview":
            o = reply.json()
            if (o["topics"], o["groups"], o["tables"]) != (0, 0, []):
                allowed.append((method, path, reply.status))
        elif reply.status != 403:
            allowed.append((method, path, reply.status, reply.body[:200]))
    print(f"admin API: {len(routes)} routes tried by a user without ACLs, {len(allowed)} allowed")
    assert allowed == []
    detail = secured.call("GET", "/api/v1/topics/orders", auth=(ADMIN, ADMIN_PASSWORD)).json()
    assert "retention.ms" not in detail["overrides"] and not detail["table_topic"]
    # SQL is its own grant: analyst has it, alice not
    assert secured.call("GET", "/sql", auth=(ANALYST, ANALYST_PASSWORD)).status == 200
    assert secured.call("GET", "/sql", auth=(ALICE, ALICE_PASSWORD)).status == 403


@pytest.mark.usefixtures("no_acls")
def test_acls_decide_what_the_console_shows(secured: Secured) -> None:
    alice = (ALICE, ALICE_PASSWORD)
    secured.allow(f"User:{ALICE}", AclOperation.READ, "orders")
    listed = secured.call("GET", "/api/v1/topics", auth=alice).json()["topics"]
    assert [t["topic"] for t in listed] == ["orders"]
    assert secured.call("GET", "/api/v1/topics/orders/messages", auth=alice).status == 200
    assert secured.call("GET", "/api/v1/topics/payments", auth=alice).status == 403
    assert secured.call("DELETE", "/api/v1/topics/orders", auth=alice).status == 403

    topics = secured.call("GET", "/topics", auth=alice).text
    assert 'data-topic="orders"' in topics and 'data-topic="payments"' not in topics
    assert "create-topic" not in topics  # no CREATE
    assert "Delete</button>" not in topics and "Enable table topic" not in topics
    assert 'href="/sql"' not in topics  # no SQL grant: no SQL in the menu
    assert secured.call("GET", "/topics/payments", auth=alice).status == 403

    secured.allow(f"User:{ALICE}", AclOperation.DELETE, "orders")
    secured.allow(f"User:{ALICE}", AclOperation.ALTER_CONFIGS, "orders")
    topics = secured.call("GET", "/topics", auth=alice).text
    assert "Delete</button>" in topics and "Enable table topic" in topics
    admin_page = secured.call("GET", "/topics", auth=(ADMIN, ADMIN_PASSWORD)).text
    assert "create-topic" in admin_page and 'href="/sql"' in admin_page
    analyst = secured.call("GET", "/", auth=(ANALYST, ANALYST_PASSWORD)).text
    assert 'href="/sql"' in analyst
    assert secured.call("GET", "/metrics", auth=alice).status == 403


def test_the_registry_over_https_with_confluents_client(secured: Secured) -> None:
    conf = {
        "url": secured.registry_url,
        "basic.auth.user.info": f"{ADMIN}:{ADMIN_PASSWORD}",
        "ssl.ca.location": str(secured.pki.ca_cert),
    }
    schema = Schema(avro_record("Payment", {"name": "id", "type": "long"}), "AVRO")
    with SchemaRegistryClient(conf) as client:
        schema_id = client.register_schema("payments-value", schema)
        assert client.get_schema(schema_id).schema_str == schema.schema_str


def test_the_cli_reaches_the_secured_admin_api_and_registry(
    secured: Secured, tmp_path: Path
) -> None:
    """The client properties file gives the CLI its credentials and CA everywhere."""
    props = tmp_path / "client.properties"
    props.write_text(
        f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
        f"sasl.username={ADMIN}\nsasl.password={ADMIN_PASSWORD}\n"
        f"ssl.ca.location={secured.pki.ca_cert}\n"
    )

    def floe(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "floe", *args, "--client-config", str(props)],
            check=False, capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    listed = floe("topic", "list", "--admin", secured.admin_url, "--output", "json")
    assert listed.returncode == 0, listed.stderr
    assert {t["topic"] for t in json.loads(listed.stdout)["topics"]} >= set(TOPICS)
    subjects = floe("schema", "list", "--registry", secured.registry_url)
    assert subjects.returncode == 0, subjects.stderr
    # a Kafka command of the CLI: it got in (SASL) and found no dead letters to replay
    replay = floe("dlq", "replay", "orders", "--brokers", secured.sasl, "--timeout", "10")
    assert (replay.returncode, replay.stderr.strip()) == (
        1,
        "floe: error: no dead-letter topic 'orders.dlq'",
    )
    props.write_text(props.read_text().replace(ADMIN_PASSWORD, "wrong"))
    refused = floe("topic", "list", "--admin", secured.admin_url)
    assert refused.returncode == 1
    assert refused.stderr.strip() == "floe: error: authentication required"
