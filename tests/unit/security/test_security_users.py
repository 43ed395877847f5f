"""The users' SCRAM credentials on a real local store: what ``alter`` writes, a restart
replays to the same state; tombstones delete; other stores' records are passed over;
garbage is skipped and counted, never fatal; ``ensure`` writes the bootstrap user once;
a failed append or fsync applies nothing."""

from __future__ import annotations

import asyncio
import errno
import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest

from floe.config.loader import load_config
from floe.security.scram import MIN_ITERATIONS, ScramCredential, check_password, derive
from floe.security.users import Users, credential_key
from floe.storage.interface import StorageError
from floe.storage.journal import Journal
from floe.storage.local import LocalStore, fileio
from floe.types import TopicName

TOPIC = TopicName("__floe_security")
SHA256, SHA512 = "SCRAM-SHA-256", "SCRAM-SHA-512"

UsersFactory = Callable[[], Users]


@pytest.fixture
def open_users(tmp_path: Path) -> Iterator[UsersFactory]:
    """Open (and reopen) Users on one data dir, as the registry's unit tests open their
    Registry: each call closes the previous store, so a second call is a restart that
    replays the journal."""
    stores: list[LocalStore] = []
    config = load_config(None, {"data.dir": str(tmp_path / "data")}, environ={})

    def make() -> Users:
        if stores:
            stores[-1].close()
        stores.append(LocalStore(tmp_path / "data", config))
        users = Users(Journal(stores[-1], TOPIC))
        users.load()
        return users

    try:
        yield make
    finally:
        if stores:
            stores[-1].close()


def cred(
    mechanism: str, password: str = "secret", iterations: int = MIN_ITERATIONS
) -> ScramCredential:
    return derive(mechanism, password, iterations=iterations)


def state(users: Users) -> dict[tuple[str, str], ScramCredential | None]:
    return {
        (user, mechanism): users.get(user, mechanism)
        for user in ("alice", "bob", "a,b=c")
        for mechanism in (SHA256, SHA512)
    }


def journal_of(users: Users) -> Journal:
    return users._journal  # the journal the fixture built, to write foreign records


def test_alter_then_replay_gives_the_same_state(
    open_users: UsersFactory, caplog: pytest.LogCaptureFixture
) -> None:
    users = open_users()
    assert users.describe() == {} and users.replayed == 0
    alice256, alice512, bob = cred(SHA256), cred(SHA512, iterations=8192), cred(SHA256, "b")
    with caplog.at_level(logging.INFO, logger="floe.security.users"):
        asyncio.run(users.alter([("alice", alice256), ("alice", alice512), ("bob", bob)], []))
    assert users.get("alice", SHA256) == alice256 and users.get("bob", SHA256) == bob
    assert users.get("bob", SHA512) is None and users.get("nobody", SHA256) is None
    assert [r.getMessage() for r in caplog.records] == [
        f"security.user.upserted user=alice mechanism={SHA256} iterations={MIN_ITERATIONS}",
        f"security.user.upserted user=alice mechanism={SHA512} iterations=8192",
        f"security.user.upserted user=bob mechanism={SHA256} iterations={MIN_ITERATIONS}",
    ]
    assert users.describe() == {
        "alice": [(SHA256, MIN_ITERATIONS), (SHA512, 8192)],
        "bob": [(SHA256, MIN_ITERATIONS)],
    }
    assert users.describe(["bob", "nobody"]) == {"bob": [(SHA256, MIN_ITERATIONS)]}
    before = state(users)

    caplog.clear()
    with caplog.at_level(logging.INFO, logger="floe.security.users"):
        again = open_users()
    assert state(again) == before and again.replayed == 3 and again.skipped == 0
    assert not [r for r in caplog.records if "security.user." in r.getMessage()]  # not at replay
    assert check_password(again.get("bob", SHA256), "b")  # type: ignore[arg-type]


def test_upsert_replaces_and_tombstone_deletes(
    open_users: UsersFactory, caplog: pytest.LogCaptureFixture
) -> None:
    users = open_users()
    asyncio.run(users.alter([("alice", cred(SHA256)), ("alice", cred(SHA512))], []))
    new = cred(SHA256, "changed", iterations=MIN_ITERATIONS + 1)
    with caplog.at_level(logging.INFO, logger="floe.security.users"):
        asyncio.run(users.alter([("alice", new)], [("alice", SHA512)]))
    assert caplog.messages == [
        f"security.user.upserted user=alice mechanism={SHA256} iterations={MIN_ITERATIONS + 1}",
        f"security.user.deleted user=alice mechanism={SHA512}",
    ]
    assert users.get("alice", SHA256) == new and users.get("alice", SHA512) is None
    assert users.describe() == {"alice": [(SHA256, MIN_ITERATIONS + 1)]}
    asyncio.run(users.alter([], [("alice", SHA256)]))
    assert users.describe() == {} and users.describe(["alice"]) == {}
    again = open_users()
    assert state(again) == state(users) and again.describe() == {}
    assert again.replayed == 5  # two upserts, one upsert and one tombstone, a tombstone


def test_keys_are_typed_compact_sorted_json() -> None:
    assert credential_key("a,b=c", SHA256) == (
        b'{"mechanism":"SCRAM-SHA-256","type":"scram","user":"a,b=c"}'
    )
    assert credential_key("zoë", SHA512).decode() == (
        '{"mechanism":"SCRAM-SHA-512","type":"scram","user":"zoë"}'
    )


def test_records_as_written_on_the_journal(open_users: UsersFactory) -> None:
    users = open_users()
    c = cred(SHA256)
    asyncio.run(users.alter([("alice", c)], [("bob", SHA512)]))
    (key, value), deletion = [(r.key, r.value) for r in journal_of(users).replay()]
    assert key is not None and value is not None
    assert orjson.loads(key) == {"type": "scram", "user": "alice", "mechanism": SHA256}
    assert ScramCredential.from_json(orjson.loads(value)) == c
    assert deletion == (credential_key("bob", SHA512), None)


def test_foreign_records_are_ignored_and_garbage_is_skipped(open_users: UsersFactory) -> None:
    users = open_users()
    good = cred(SHA256)
    asyncio.run(users.alter([("alice", good)], []))
    journal = journal_of(users)
    good_value = orjson.dumps(good.to_json())
    journal.append(
        [
            # The ACL store's records, now or later: not ours, passed over silently.
            (b'{"type":"acl","principal":"User:alice"}', b'{"operation":"READ"}'),
            (b'{"type":"acl","principal":"User:bob"}', None),
            # Garbage under alice's key never replaces her good credential.
            (credential_key("alice", SHA256), b"not json"),
            (credential_key("alice", SHA256), b'{"mechanism":"SCRAM-SHA-256"}'),
            (credential_key("alice", SHA256), orjson.dumps(cred(SHA512).to_json())),
            (b'{"type":"scram","user":"","mechanism":"SCRAM-SHA-256"}', good_value),
            (b'{"type":"scram","user":"bob","mechanism":"SCRAM-SHA-1"}', good_value),
            (b'{"type":"scram","mechanism":"SCRAM-SHA-256"}', good_value),
            (b'{"user":"bob"}', good_value),
            (b'["scram"]', good_value),
            (b"\xff\xfe", good_value),
            (credential_key("bob", SHA256), good_value),  # and replay goes on after it
        ]
    )
    asyncio.run(journal.durable())
    again = open_users()
    assert again.get("alice", SHA256) == good and again.get("bob", SHA256) == good
    assert again.replayed == 2 and again.skipped == 9
    assert again.describe() == {
        "alice": [(SHA256, MIN_ITERATIONS)],
        "bob": [(SHA256, MIN_ITERATIONS)],
    }


def test_ensure_writes_once_and_never_overwrites(
    open_users: UsersFactory, caplog: pytest.LogCaptureFixture
) -> None:
    users = open_users()
    with caplog.at_level(logging.INFO, logger="floe.security.users"):
        assert asyncio.run(users.ensure("admin", "first", [SHA256, SHA512, SHA256]))
    assert len(caplog.messages) == 2 and "first" not in " ".join(caplog.messages)
    written = state_of(users, "admin")
    assert all(check_password(c, "first") for c in written.values())
    assert not asyncio.run(users.ensure("admin", "second", [SHA256, SHA512]))
    assert state_of(users, "admin") == written

    changed = cred(SHA512, "operator's")  # an operator changed one password since
    asyncio.run(users.alter([("admin", changed)], [("admin", SHA256)]))
    again = open_users()
    assert asyncio.run(again.ensure("admin", "first", [SHA256, SHA512]))  # SHA-256 only
    assert again.get("admin", SHA512) == changed
    assert check_password(again.get("admin", SHA256), "first")  # type: ignore[arg-type]
    assert open_users().describe()["admin"] == [(SHA256, 8192), (SHA512, MIN_ITERATIONS)]


def state_of(users: Users, user: str) -> dict[str, ScramCredential]:
    return {m: c for m in (SHA256, SHA512) if (c := users.get(user, m)) is not None}


def test_ensure_refuses_bad_arguments_before_writing(open_users: UsersFactory) -> None:
    users = open_users()
    for user, password, mechanisms in [
        ("admin", "pw", [SHA256, "SCRAM-SHA-1"]),
        ("", "pw", [SHA256]),
        ("admin", "", [SHA256]),
    ]:
        with pytest.raises(ValueError):
            asyncio.run(users.ensure(user, password, mechanisms))
    assert users.describe() == {} and list(journal_of(users).replay()) == []


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
    open_users: UsersFactory, fail_io: Callable[[str], None], op: str
) -> None:
    users = open_users()
    asyncio.run(users.alter([("alice", cred(SHA256))], []))
    before = state(users)
    fail_io(op)
    with pytest.raises(StorageError):
        asyncio.run(users.alter([("bob", cred(SHA256))], [("alice", SHA256)]))
    assert state(users) == before
