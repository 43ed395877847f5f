"""The ACL store on a real local store: what ``create`` and ``delete`` write, a restart
replays to the same bindings; creating a binding twice is idempotent; the SCRAM users
sharing ``__floe_security`` and the ACLs pass over each other's records; garbage is
skipped and counted, never fatal; a failed append or fsync applies nothing."""

from __future__ import annotations

import asyncio
import errno
import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest

from floe.config.loader import load_config
from floe.security.acl import (
    AclBinding,
    AclFilter,
    AclOperation,
    AclPermission,
    Authorizer,
    PatternType,
    ResourceType,
)
from floe.security.acls import AclStore, acl_key
from floe.security.scram import MIN_ITERATIONS, derive
from floe.security.users import Users, credential_key
from floe.storage.interface import StorageError
from floe.storage.journal import Journal
from floe.storage.local import LocalStore, fileio
from floe.types import TopicName

TOPIC = TopicName("__floe_security")
Op, Perm, RT, PT = AclOperation, AclPermission, ResourceType, PatternType


def acl(
    name: str,
    operation: AclOperation = Op.READ,
    permission: AclPermission = Perm.ALLOW,
    *,
    principal: str = "User:alice",
    pattern: PatternType = PT.LITERAL,
    resource_type: ResourceType = RT.TOPIC,
) -> AclBinding:
    return AclBinding(resource_type, name, pattern, principal, "*", operation, permission)


READ_T = acl("t")
WRITE_T = acl("t", Op.WRITE)
DENY_BOB = acl("t", Op.ALL, Perm.DENY, principal="User:bob")
PREFIX = acl("pay.", pattern=PT.PREFIXED)
GROUP = acl("app", resource_type=RT.GROUP)
CLUSTER = acl("kafka-cluster", Op.ALTER, resource_type=RT.CLUSTER)


class Opened:
    """One open of the data dir: the store and a journal of our own on it."""

    def __init__(self, store: LocalStore) -> None:
        self.store = store
        self.journal = Journal(store, TOPIC)
        self.acls = AclStore(self.journal)
        self.acls.load()

    def records(self) -> list[tuple[bytes | None, bytes | None]]:
        return [(r.key, r.value) for r in Journal(self.store, TOPIC).replay()]


OpenFactory = Callable[[], Opened]


@pytest.fixture
def reopen(tmp_path: Path) -> Iterator[OpenFactory]:
    """Open (and reopen) the data dir: each call closes the previous store, so a second
    call is a restart that replays the journal."""
    stores: list[LocalStore] = []
    config = load_config(None, {"data.dir": str(tmp_path / "data")}, environ={})

    def make() -> Opened:
        if stores:
            stores[-1].close()
        stores.append(LocalStore(tmp_path / "data", config))
        return Opened(stores[-1])

    try:
        yield make
    finally:
        if stores:
            stores[-1].close()


def test_create_then_replay_gives_the_same_bindings(
    reopen: OpenFactory, caplog: pytest.LogCaptureFixture
) -> None:
    acls = reopen().acls
    assert acls.bindings() == [] and acls.replayed == 0
    with caplog.at_level(logging.INFO, logger="floe.security.acls"):
        asyncio.run(acls.create([READ_T, DENY_BOB, PREFIX, GROUP, CLUSTER]))
    assert acls.bindings() == [READ_T, DENY_BOB, PREFIX, GROUP, CLUSTER]
    assert caplog.messages == [
        "security.acl.created principal=User:alice host=* operation=READ permission=ALLOW "
        "resource=TOPIC:LITERAL:t",
        "security.acl.created principal=User:bob host=* operation=ALL permission=DENY "
        "resource=TOPIC:LITERAL:t",
        "security.acl.created principal=User:alice host=* operation=READ permission=ALLOW "
        "resource=TOPIC:PREFIXED:pay.",
        "security.acl.created principal=User:alice host=* operation=READ permission=ALLOW "
        "resource=GROUP:LITERAL:app",
        "security.acl.created principal=User:alice host=* operation=ALTER permission=ALLOW "
        "resource=CLUSTER:LITERAL:kafka-cluster",
    ]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="floe.security.acls"):
        again = reopen().acls
    assert again.bindings() == acls.bindings() and again.replayed == 5 and again.skipped == 0
    assert caplog.messages == ["security.acls.replayed records=5 acls=5 skipped=0"]
    assert again.matching(AclFilter(RT.TOPIC, "pay.in", PT.MATCH)) == [PREFIX]
    assert again.matching(AclFilter(principal="User:bob")) == [DENY_BOB]


def test_create_is_idempotent(reopen: OpenFactory, caplog: pytest.LogCaptureFixture) -> None:
    opened = reopen()
    acls = opened.acls
    asyncio.run(acls.create([READ_T, READ_T]))  # twice in one request: one record
    version = acls.version
    with caplog.at_level(logging.INFO, logger="floe.security.acls"):
        asyncio.run(acls.create([READ_T]))  # and again: nothing written, nothing logged
        asyncio.run(acls.create([]))
    assert caplog.messages == [] and acls.version == version
    assert opened.records() == [(acl_key(READ_T), orjson.dumps(READ_T.to_json()))]
    asyncio.run(acls.create([READ_T, WRITE_T]))  # only the new one is written
    assert len(opened.records()) == 2 and acls.version > version
    assert reopen().acls.bindings() == [READ_T, WRITE_T]


def test_delete_by_filters(reopen: OpenFactory, caplog: pytest.LogCaptureFixture) -> None:
    acls = reopen().acls
    asyncio.run(acls.create([READ_T, WRITE_T, DENY_BOB, PREFIX, GROUP]))
    version = acls.version
    filters = [
        AclFilter(RT.TOPIC, "t", PT.LITERAL, operation=Op.WRITE),
        AclFilter(RT.TOPIC, "pay.x", PT.MATCH),
        AclFilter(RT.ANY, "t", principal="User:bob"),
        AclFilter(RT.TOPIC, "t", PT.LITERAL, permission=Perm.DENY),  # DENY_BOB again
        AclFilter(RT.USER),  # nothing
    ]
    with caplog.at_level(logging.INFO, logger="floe.security.acls"):
        deleted = asyncio.run(acls.delete(filters))
    assert deleted == [[WRITE_T], [PREFIX], [DENY_BOB], [DENY_BOB], []]
    assert caplog.messages == [
        "security.acl.deleted principal=User:alice host=* operation=WRITE permission=ALLOW "
        "resource=TOPIC:LITERAL:t",
        "security.acl.deleted principal=User:alice host=* operation=READ permission=ALLOW "
        "resource=TOPIC:PREFIXED:pay.",
        "security.acl.deleted principal=User:bob host=* operation=ALL permission=DENY "
        "resource=TOPIC:LITERAL:t",
    ]
    assert acls.bindings() == [READ_T, GROUP] and acls.version > version
    again = reopen()
    assert again.acls.bindings() == [READ_T, GROUP]
    assert again.acls.replayed == 8  # five creations, three tombstones
    assert again.records()[-3:] == [(acl_key(b), None) for b in (WRITE_T, PREFIX, DENY_BOB)]
    version = again.acls.version
    assert asyncio.run(again.acls.delete([AclFilter(RT.TOPIC, "nothing")])) == [[]]
    assert len(again.records()) == 8 and again.acls.version == version  # nothing written


def test_keys_are_the_typed_binding_as_compact_sorted_json() -> None:
    assert acl_key(PREFIX) == (
        b'{"host":"*","operation":"READ","pattern_type":"PREFIXED","permission":"ALLOW",'
        b'"principal":"User:alice","resource_name":"pay.","resource_type":"TOPIC","type":"acl"}'
    )
    assert orjson.loads(acl_key(GROUP)) == {"type": "acl", **GROUP.to_json()}


def test_create_refuses_invalid_bindings_before_writing(reopen: OpenFactory) -> None:
    opened = reopen()
    for bad in (acl("t", Op.ANY), acl(""), acl("t", principal="alice"), acl("x", pattern=PT.MATCH)):
        with pytest.raises(ValueError, match="invalid ACL binding"):
            asyncio.run(opened.acls.create([READ_T, bad]))
    assert opened.acls.bindings() == [] and opened.records() == []


def test_the_authorizer_follows_the_store(reopen: OpenFactory) -> None:
    acls = reopen().acls
    authorizer = Authorizer(acls, super_users=(), allow_if_no_acl=False)
    assert not authorizer.authorize("User:alice", "10.0.0.1", Op.READ, RT.TOPIC, "t")
    asyncio.run(acls.create([READ_T]))
    assert authorizer.authorize("User:alice", "10.0.0.1", Op.READ, RT.TOPIC, "t")
    asyncio.run(acls.create([acl("t", Op.READ, Perm.DENY)]))
    assert not authorizer.authorize("User:alice", "10.0.0.1", Op.READ, RT.TOPIC, "t")
    asyncio.run(acls.delete([AclFilter(permission=Perm.DENY)]))
    assert authorizer.authorize("User:alice", "10.0.0.1", Op.READ, RT.TOPIC, "t")


def test_users_and_acls_pass_over_each_others_records(reopen: OpenFactory) -> None:
    opened = reopen()
    cred = derive("SCRAM-SHA-256", "secret", iterations=MIN_ITERATIONS)
    users = Users(Journal(opened.store, TOPIC))
    users.load()
    asyncio.run(users.alter([("alice", cred)], []))
    asyncio.run(opened.acls.create([READ_T, GROUP]))
    asyncio.run(users.alter([], [("alice", "SCRAM-SHA-256")]))
    asyncio.run(users.alter([("bob", cred)], []))
    asyncio.run(opened.acls.delete([AclFilter(RT.GROUP)]))

    again = reopen()
    assert again.acls.bindings() == [READ_T]
    assert again.acls.replayed == 3 and again.acls.skipped == 0  # three acl records
    users = Users(Journal(again.store, TOPIC))
    users.load()
    assert users.get("bob", "SCRAM-SHA-256") == cred and users.get("alice", "SCRAM-SHA-256") is None
    assert users.replayed == 3 and users.skipped == 0  # acl records are not counted


def test_garbage_is_skipped_and_replay_goes_on(reopen: OpenFactory) -> None:
    opened = reopen()
    asyncio.run(opened.acls.create([READ_T]))
    good = READ_T.to_json()
    opened.journal.append(
        [
            # Another store's records: passed over silently.
            (credential_key("alice", "SCRAM-SHA-256"), b'{"not": "ours"}'),
            (b'{"type":"quota","user":"alice"}', None),
            # Undecodable acl records, and ones Kafka would refuse.
            (acl_key(WRITE_T), b"not json"),
            (acl_key(WRITE_T), orjson.dumps(READ_T.to_json())),  # value is another binding
            (b'{"type":"acl"}', orjson.dumps(good)),
            (orjson.dumps({"type": "acl", **good, "operation": "ANY"}), None),
            (orjson.dumps({"type": "acl", **good, "pattern_type": "MATCH"}), orjson.dumps(good)),
            (orjson.dumps({"type": "acl", **good, "extra": 1}), orjson.dumps(good)),
            # Keys that are nobody's.
            (b'["acl"]', orjson.dumps(good)),
            (b'{"principal":"User:alice"}', orjson.dumps(good)),
            (b"\xff\xfe", orjson.dumps(good)),
            # And replay goes on after them.
            (acl_key(GROUP), orjson.dumps(GROUP.to_json())),
        ]
    )
    asyncio.run(opened.journal.durable())
    again = reopen().acls
    assert again.bindings() == [READ_T, GROUP]
    assert again.replayed == 2 and again.skipped == 9


@pytest.fixture
def fail_io() -> Iterator[Callable[[str], None]]:
    """Make the store's next ``op`` calls fail with ENOSPC through its fault-injection
    seam (``floe.storage.local.fileio``); always removed at the end."""

    def install(op: str) -> None:
        def hook(operation: str, fd: int) -> None:
            if operation == op:
                raise OSError(errno.ENOSPC, "No space left on device")

        fileio.set_fault_hook(hook)

    yield install
    fileio.set_fault_hook(None)


@pytest.mark.parametrize("op", ["write", "fdatasync"])
def test_a_failed_write_applies_nothing(
    reopen: OpenFactory, fail_io: Callable[[str], None], op: str
) -> None:
    acls = reopen().acls
    asyncio.run(acls.create([READ_T]))
    version = acls.version
    fail_io(op)
    with pytest.raises(StorageError):
        asyncio.run(acls.create([WRITE_T]))
    with pytest.raises(StorageError):
        asyncio.run(acls.delete([AclFilter()]))
    assert acls.bindings() == [READ_T] and acls.version == version
