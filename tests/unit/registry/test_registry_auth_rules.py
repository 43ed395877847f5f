"""The registry's authentication and authorization pieces without a server: the route ->
ACL table, the subject -> topic mapping, the Basic header parser, and
``verify_password`` and its cache ``PasswordCheck`` (shared with SASL/PLAIN and the
admin console) on real SCRAM users."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Iterator
from pathlib import Path

import pytest

from floe.config.loader import load_config
from floe.registry.api.authz import (
    AUTHENTICATED,
    RULES,
    Listing,
    On,
    denied_message,
    parse_basic,
    requirement,
    topic_of,
)
from floe.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from floe.security.sasl import PasswordCheck, PlainExchange, verify_password
from floe.security.scram import AuthenticationError, derive
from floe.security.users import Users
from floe.storage.journal import Journal
from floe.storage.local import LocalStore
from floe.types import TopicName

D, W, DEL, AC = (
    AclOperation.DESCRIBE, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER_CONFIGS
)  # fmt: skip
T, C = ResourceType.TOPIC, ResourceType.CLUSTER


@pytest.mark.parametrize(
    ("subject", "topic"),
    [
        ("orders-value", "orders"),
        ("orders-key", "orders"),
        ("orders", "orders"),
        ("com.acme.Order", "com.acme.Order"),
        ("a-b-value", "a-b"),
        ("-value", "-value"),
        ("-key", "-key"),
        ("orders-values", "orders-values"),
        ("common/money.proto", "common/money.proto"),
    ],
)
def test_topic_of_follows_topic_name_strategy(subject: str, topic: str) -> None:
    assert topic_of(subject) == topic


@pytest.mark.parametrize(
    ("method", "path", "operation", "resource", "name"),
    [
        ("GET", "/subjects/orders-value/versions", D, T, "orders"),
        ("POST", "/subjects/orders-value/versions", W, T, "orders"),
        ("POST", "/subjects/orders-value", D, T, "orders"),
        ("DELETE", "/subjects/orders-value", DEL, T, "orders"),
        ("GET", "/subjects/orders-key/versions/latest", D, T, "orders"),
        ("GET", "/subjects/orders-key/versions/3/schema", D, T, "orders"),
        ("GET", "/subjects/orders-key/versions/3/referencedby", D, T, "orders"),
        ("DELETE", "/subjects/orders-key/versions/3", DEL, T, "orders"),
        ("GET", "/config/orders-value", D, T, "orders"),
        ("PUT", "/config/orders-value", AC, T, "orders"),
        ("DELETE", "/config/orders-value", AC, T, "orders"),
        ("GET", "/mode/orders-value", D, T, "orders"),
        ("PUT", "/mode/orders-value", AC, T, "orders"),
        ("DELETE", "/mode/orders-value", AC, T, "orders"),
        ("PUT", "/config", AC, C, CLUSTER_NAME),
        ("DELETE", "/config", AC, C, CLUSTER_NAME),
        ("PUT", "/mode", AC, C, CLUSTER_NAME),
        ("POST", "/compatibility/subjects/orders-value/versions", D, T, "orders"),
        ("POST", "/compatibility/subjects/orders-value/versions/latest", D, T, "orders"),
        # a subject with a slash arrives as one escaped segment (_KeepEncodedSlashes)
        ("GET", "/subjects/common%2Fmoney.proto/versions", D, T, "common/money.proto"),
        ("POST", "/subjects/orders-value/versions/", W, T, "orders"),  # trailing slash
    ],
)
def test_subject_routes_map_to_their_topic_acl(
    method: str, path: str, operation: AclOperation, resource: ResourceType, name: str
) -> None:
    req = requirement(method, path)
    assert (req.rule.operation, req.resource_type, req.name) == (operation, resource, name)
    assert not req.rule.public


@pytest.mark.parametrize(
    ("method", "path", "listing"),
    [
        ("GET", "/subjects", Listing.NAMES),
        ("GET", "/schemas", Listing.OBJECTS),
        ("GET", "/schemas/ids/7/subjects", Listing.NAMES),
        ("GET", "/schemas/ids/7/versions", Listing.OBJECTS),
    ],
)
def test_listings_are_filtered_not_refused(method: str, path: str, listing: Listing) -> None:
    req = requirement(method, path)
    assert req.rule.listing is listing and req.rule.operation is None
    assert req.resource_type is None


@pytest.mark.parametrize(
    "path", ["/health", "/schemas/types", "/schemas/ids/7", "/schemas/ids/7/schema", "/config",
             "/mode", "/no/such/route"],
)  # fmt: skip
def test_the_rest_needs_only_authentication(path: str) -> None:
    req = requirement("GET", path)
    assert req.rule.operation is None and req.rule.listing is None and not req.rule.public
    assert req.resource_type is None


def test_only_get_root_is_public() -> None:
    assert requirement("GET", "/").rule.public
    assert not requirement("POST", "/").rule.public
    assert [r for r in RULES if r.public] == [RULES[0]]
    assert requirement("PATCH", "/subjects/x/versions").rule is AUTHENTICATED


def test_the_table_has_no_duplicate_and_checks_what_it_names() -> None:
    keys = [(r.method, r.template) for r in RULES]
    assert len(keys) == len(set(keys))
    for r in RULES:
        assert (r.operation is None) == (r.on is On.NOTHING), r
        assert r.on is not On.SUBJECT or "{subject}" in r.template, r


def test_denied_messages() -> None:
    assert denied_message(requirement("POST", "/subjects/orders-value/versions")) == (
        "User is denied operation WRITE on subject orders-value"
    )
    assert denied_message(requirement("PUT", "/config")) == (
        "User is denied operation ALTER_CONFIGS on the global configuration"
    )


def _basic(raw: bytes) -> str:
    return "Basic " + base64.b64encode(raw).decode()


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (_basic(b"alice:secret"), ("alice", "secret")),
        (_basic(b"alice:se:cr:et"), ("alice", "se:cr:et")),  # the password may hold ':'
        (_basic(b"alice:"), ("alice", "")),
        ("basic " + base64.b64encode(b"bob:pw").decode(), ("bob", "pw")),
        (_basic("j\u00f6rg:p\u00e4ss".encode()), ("j\u00f6rg", "p\u00e4ss")),
        (None, None),
        ("", None),
        ("Bearer abc", None),
        ("Basic", None),
        ("Basic ", None),
        ("Basic not*base64", None),
        (_basic(b"no-colon"), None),
        (_basic(b":password"), None),
        (_basic(b"\xff\xfe:x"), None),
        ("Basic " + "A" * 5000, None),
    ],
)
def test_parse_basic(header: str | None, expected: tuple[str, str] | None) -> None:
    assert parse_basic(header) == expected


@pytest.fixture
def users(tmp_path: Path) -> Iterator[Users]:
    """Real SCRAM users on a LocalStore: alice with both mechanisms, bob SHA-256 only."""
    config = load_config(None, {"data.dir": str(tmp_path / "data")}, environ={})
    store = LocalStore(tmp_path / "data", config)
    try:
        u = Users(Journal(store, TopicName("__floe_security")))
        u.load()
        asyncio.run(u.ensure("alice", "secret", ["SCRAM-SHA-256", "SCRAM-SHA-512"]))
        asyncio.run(u.ensure("bob", "hunter2", ["SCRAM-SHA-256"]))
        yield u
    finally:
        store.close()


def test_verify_password(users: Users) -> None:
    assert verify_password(users, "alice", "secret")
    assert verify_password(users, "bob", "hunter2")
    assert not verify_password(users, "alice", "wrong")
    assert not verify_password(users, "alice", "")
    assert not verify_password(users, "nobody", "secret")
    assert not verify_password(users, "bob", "secret")


def test_plain_exchange_uses_the_same_check(users: Users) -> None:
    passwords = PasswordCheck(users)
    assert PlainExchange(passwords).step(b"\0alice\0secret") == b""
    for token in (b"\0alice\0wrong", b"\0nobody\0secret"):
        with pytest.raises(AuthenticationError, match="invalid credentials"):
            PlainExchange(passwords).step(token)


def test_a_remembered_password_stops_counting_when_the_credential_changes(
    users: Users, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A success is remembered (no PBKDF2 the second time); a new password or a deleted
    user ends it at once, and failures are never remembered."""
    from floe.security import sasl

    passwords = PasswordCheck(users)
    derivations = 0
    real = sasl.verify_password

    def counting(*args: object) -> bool:
        nonlocal derivations
        derivations += 1
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(sasl, "verify_password", counting)
    assert passwords.check("alice", "secret")
    assert asyncio.run(passwords.check_async("alice", "secret"))
    assert passwords.check("alice", "secret")
    assert derivations == 1
    for _ in range(2):
        assert not passwords.check("alice", "wrong")
        assert not asyncio.run(passwords.check_async("nobody", "secret"))
    assert derivations == 5

    new = derive("SCRAM-SHA-512", "changed")
    asyncio.run(users.alter([("alice", new)], []))
    assert not passwords.check("alice", "secret")  # her SHA-512 key changed
    assert passwords.check("alice", "changed")
    asyncio.run(users.alter([], [("alice", "SCRAM-SHA-512"), ("alice", "SCRAM-SHA-256")]))
    assert not asyncio.run(passwords.check_async("alice", "changed"))
