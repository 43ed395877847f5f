"""GroupShard on a real LocalStore with a manual clock: membership, offsets,
transactions, and "replaying the journal (full or compacted) gives the same state"."""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from floe.config import coordinators
from floe.config.loader import load_config
from floe.coordinator.group.api import JoinRequest, OffsetCommit
from floe.coordinator.group.coordinator import TOPIC
from floe.coordinator.group.offsets import PersistedGroups, apply
from floe.coordinator.group.records import GroupKey, GroupValue, MemberValue, decode, encode
from floe.coordinator.group.shard import GroupShard
from floe.coordinator.group.state import GroupState
from floe.errors import ErrorCode
from floe.storage.interface import StorageError
from floe.storage.journal import Journal
from floe.storage.local import LocalStore
from floe.types import TopicName

R = TypeVar("R")
T = "t"


class Env:
    """A store, a manual clock and a coordinator that can be reopened (a restart)."""

    def __init__(self, data_dir: Path, **settings: object) -> None:
        self.data_dir = data_dir
        toml = data_dir.parent / "floe.toml"
        toml.touch()
        self.config = load_config(
            toml,
            {"log.flush.policy": "interval", "group.initial.rebalance.delay.ms": 0, **settings},
            {},
        )
        self.now = 1_000_000
        self.store = LocalStore(data_dir, self.config)
        if self.store.topic(TopicName(T)) is None:
            self.store.create_topic(TopicName(T), 4, {})
        self.gc = self.open()

    def open(self) -> GroupShard:
        gc = GroupShard(self.store, self.config, Journal(self.store, TOPIC), clock=lambda: self.now)
        gc.load()
        return gc

    def reopen(self) -> None:
        self.store.close()
        self.store = LocalStore(self.data_dir, self.config)
        self.gc = self.open()

    def records(self) -> list[tuple[bytes, bytes | None]]:
        return [(r.key or b"", r.value) for r in self.gc._journal.replay()]


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    e = Env(tmp_path / "data")
    yield e
    e.store.close()


def run(coro: Coroutine[Any, Any, R]) -> R:
    return asyncio.run(coro)


def join_req(member_id: str = "", instance: str | None = None, **kw: Any) -> JoinRequest:
    fields: dict[str, Any] = {
        "group_id": "g",
        "member_id": member_id,
        "instance_id": instance,
        "client_id": "c",
        "client_host": "/127.0.0.1",
        "session_timeout_ms": 6000,
        "rebalance_timeout_ms": 10000,
        "protocol_type": "consumer",
        "protocols": [("range", b"meta")],
        "require_known_member_id": True,
    } | kw
    return JoinRequest(**fields)


async def join_one(gc: GroupShard, instance: str | None = None) -> tuple[str, int]:
    """Join a new member through MEMBER_ID_REQUIRED (or as a static member) and sync
    it as the leader; returns (member id, generation)."""
    first = await gc.join(join_req(instance=instance))
    if first.error is ErrorCode.member_id_required:
        first = await gc.join(join_req(first.member_id, instance))
    assert first.error is ErrorCode.none, first
    sync = await gc.sync(
        "g",
        generation=first.generation,
        member_id=first.member_id,
        instance_id=instance,
        protocol_type="consumer",
        protocol_name="range",
        assignments={first.member_id: b"assigned"},
    )
    assert (sync.error, sync.assignment) == (ErrorCode.none, b"assigned")
    return first.member_id, first.generation


def test_join_sync_heartbeat_and_leave(env: Env) -> None:
    async def go() -> None:
        gc = env.gc
        first = await gc.join(join_req())
        assert first.error is ErrorCode.member_id_required and first.member_id
        mid, gen = await join_one(gc)
        assert gen == 1 and gc.groups["g"].state is GroupState.STABLE
        assert gc.heartbeat("g", gen, mid, None) is ErrorCode.none
        assert gc.heartbeat("g", gen + 1, mid, None) is ErrorCode.illegal_generation
        assert gc.heartbeat("g", gen, "nobody", None) is ErrorCode.unknown_member_id
        d = gc.describe("g")
        assert (d.state, d.protocol_name, d.members[0].assignment) == (
            GroupState.STABLE,
            "range",
            b"assigned",
        )
        assert gc.leave("g", [(mid, None)]) == [(mid, None, ErrorCode.none)]
        await asyncio.sleep(0.05)  # the join phase of the now empty group completes
        assert gc.groups["g"].state is GroupState.EMPTY
        assert gc._data("g").generation == 2

    run(go())


def test_a_second_member_triggers_a_rebalance(env: Env) -> None:
    async def go() -> None:
        gc = env.gc
        a, gen = await join_one(gc)
        second = asyncio.create_task(gc.join(join_req(require_known_member_id=False)))
        await asyncio.sleep(0.01)
        assert gc.heartbeat("g", gen, a, None) is ErrorCode.rebalance_in_progress
        rejoin = await gc.join(join_req(a))
        other = await second
        assert rejoin.generation == other.generation == gen + 1
        assert rejoin.leader == a and {m[0] for m in rejoin.members} == {a, other.member_id}
        assert other.members == []

    run(go())


def test_session_timeout_removes_a_silent_member(env: Env) -> None:
    async def go() -> None:
        gc = env.gc
        mid, _ = await join_one(gc)
        env.now += 5000
        gc.tick()
        assert mid in gc.groups["g"].members
        env.now += 2000
        gc.tick()
        await asyncio.sleep(0.05)
        assert not gc.groups["g"].members
        assert gc.groups["g"].state is GroupState.EMPTY

    run(go())


def test_static_member_replacement_fences_the_old_id(env: Env) -> None:
    async def go() -> None:
        gc = env.gc
        old, _ = await join_one(gc, instance="i1")
        env.now += 1
        again = await gc.join(join_req(instance="i1"))
        assert again.error is ErrorCode.none and again.member_id != old
        assert gc.heartbeat("g", again.generation, old, "i1") is ErrorCode.fenced_instance_id
        assert gc.heartbeat("g", again.generation, again.member_id, "i1") is ErrorCode.none

    run(go())


def test_offset_commit_rules(env: Env) -> None:
    async def go() -> None:
        gc = env.gc
        ok = OffsetCommit(T, 0, 5, -1, "m")
        errors = await gc.commit_offsets(
            "g", generation=-1, member_id="", instance_id=None, offsets=[ok]
        )
        assert errors == {(T, 0): ErrorCode.none}
        mid, gen = await join_one(gc)
        simple = await gc.commit_offsets(
            "g", generation=-1, member_id="", instance_id=None, offsets=[ok]
        )
        assert simple == {(T, 0): ErrorCode.unknown_member_id}
        stale = await gc.commit_offsets(
            "g", generation=gen - 1, member_id=mid, instance_id=None, offsets=[ok]
        )
        assert stale == {(T, 0): ErrorCode.illegal_generation}
        mixed = await gc.commit_offsets(
            "g",
            generation=gen,
            member_id=mid,
            instance_id=None,
            offsets=[
                OffsetCommit(T, 1, 7, -1, None),
                OffsetCommit(T, 9, 1, -1, None),
                OffsetCommit(T, 2, 1, -1, "x" * 5000),
            ],
        )
        assert mixed == {
            (T, 1): ErrorCode.none,
            (T, 9): ErrorCode.unknown_topic_or_partition,
            (T, 2): ErrorCode.offset_metadata_too_large,
        }
        fetched = gc.fetch_offsets("g", None, require_stable=False)
        assert {tp: c.offset for tp, c in fetched.items()} == {(T, 0): 5, (T, 1): 7}
        assert await gc.delete_group("g") is ErrorCode.non_empty_group
        err, per = await gc.delete_offsets("g", [(T, 0)])
        # A member's metadata is not a readable consumer subscription: refuse.
        assert (err, per) == (ErrorCode.non_empty_group, {})

    run(go())


def test_restart_keeps_offsets_generation_and_members(env: Env) -> None:
    async def go() -> str:
        mid, gen = await join_one(env.gc)
        await env.gc.commit_offsets(
            "g",
            generation=gen,
            member_id=mid,
            instance_id=None,
            offsets=[OffsetCommit(T, 3, 42, 0, "meta")],
        )
        return mid

    mid = run(go())
    before = copy.deepcopy(env.gc.persisted)
    env.reopen()
    assert env.gc.persisted == before
    g = env.gc.groups["g"]
    assert (g.state, list(g.members), env.gc._data("g").generation) == (
        GroupState.STABLE,
        [mid],
        1,
    )
    assert env.gc.fetch_offsets("g", [(T, 3)], require_stable=True)[(T, 3)].offset == 42


def test_transactional_offsets_become_visible_on_commit_only(env: Env) -> None:
    async def go() -> None:
        gc = env.gc
        staged = await gc.stage_txn_offsets(
            "g",
            producer_id=7,
            producer_epoch=0,
            generation=-1,
            member_id="",
            instance_id=None,
            offsets=[OffsetCommit(T, 0, 10, -1, None)],
        )
        assert staged == {(T, 0): ErrorCode.none}
        assert gc.pending_transaction("g", 7)
        unstable = gc.fetch_offsets("g", [(T, 0)], require_stable=True)[(T, 0)]
        assert unstable.error is ErrorCode.unstable_offset_commit
        assert gc.fetch_offsets("g", [(T, 0)], require_stable=False)[(T, 0)].offset == -1
        await gc.complete_transaction("g", 7, 0, commit=True)
        await gc.complete_transaction("g", 7, 0, commit=True)  # idempotent
        assert not gc.pending_transaction("g", 7)
        assert gc.fetch_offsets("g", [(T, 0)], require_stable=True)[(T, 0)].offset == 10
        await gc.stage_txn_offsets(
            "g",
            producer_id=7,
            producer_epoch=1,
            generation=-1,
            member_id="",
            instance_id=None,
            offsets=[OffsetCommit(T, 0, 20, -1, None)],
        )
        await gc.complete_transaction("g", 7, 1, commit=False)
        assert gc.fetch_offsets("g", [(T, 0)], require_stable=True)[(T, 0)].offset == 10

    run(go())


def test_a_pending_transaction_survives_a_restart(env: Env) -> None:
    run(
        env.gc.stage_txn_offsets(
            "g",
            producer_id=3,
            producer_epoch=0,
            generation=-1,
            member_id="",
            instance_id=None,
            offsets=[OffsetCommit(T, 1, 4, -1, None)],
        )
    )
    env.reopen()
    assert env.gc.pending_transaction("g", 3)
    run(env.gc.complete_transaction("g", 3, 0, commit=True))
    assert env.gc.fetch_offsets("g", [(T, 1)], require_stable=True)[(T, 1)].offset == 4


def test_retention_expires_offsets_of_empty_groups_and_then_the_group(env: Env) -> None:
    async def go() -> None:
        gc = env.gc
        mid, gen = await join_one(gc)
        await gc.commit_offsets(
            "g",
            generation=gen,
            member_id=mid,
            instance_id=None,
            offsets=[OffsetCommit(T, 0, 1, -1, None)],
        )
        env.now += env.config[coordinators.OFFSETS_RETENTION_MS] + 1
        await gc.expire_offsets()
        assert gc._data("g").offsets  # a group with members keeps its offsets
        gc.leave("g", [(mid, None)])
        await asyncio.sleep(0.05)
        await gc.expire_offsets()
        assert "g" not in gc.persisted.groups and "g" not in gc.groups

    run(go())


def test_deleting_a_topic_removes_its_offsets(env: Env) -> None:
    run(
        env.gc.commit_offsets(
            "g",
            generation=-1,
            member_id="",
            instance_id=None,
            offsets=[OffsetCommit(T, 0, 1, -1, None)],
        )
    )
    env.gc.topic_deleted(T)
    assert "g" not in env.gc.persisted.groups


# ------------------------------------------------------------------ membership across a restart


async def join_two(gc: GroupShard, instance: str | None = None) -> tuple[str, str, int]:
    """A leader (dynamic) and a follower (static when ``instance``), Stable with the
    assignments ``A`` and ``B``; returns (leader, follower, generation)."""
    a, _ = await join_one(gc)
    second = asyncio.create_task(
        gc.join(join_req(instance=instance, require_known_member_id=False, client_id="c2"))
    )
    await asyncio.sleep(0.01)
    rejoin = await gc.join(join_req(a))
    b = (await second).member_id
    gen = rejoin.generation
    follower_sync = gc.sync(
        "g",
        generation=gen,
        member_id=b,
        instance_id=instance,
        protocol_type="consumer",
        protocol_name="range",
        assignments={},
    )
    followed = asyncio.create_task(follower_sync)
    await asyncio.sleep(0.01)
    led = await gc.sync(
        "g",
        generation=gen,
        member_id=a,
        instance_id=None,
        protocol_type="consumer",
        protocol_name="range",
        assignments={a: b"A", b: b"B"},
    )
    assert (led.assignment, (await followed).assignment) == (b"A", b"B")
    return a, b, gen


def test_a_loaded_group_is_stable_with_its_members(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    """Kafka's GroupMetadataValue: the group comes back Stable, with its generation,
    protocol, leader and each member's ids, timeouts, subscription and assignment; the
    members go on heartbeating and committing with that generation, no rebalance."""
    a, b, gen = run(join_two(env.gc, instance="i1"))
    env.reopen()
    gc = env.gc
    g = gc.groups["g"]
    assert (g.state, g.leader, gc._data("g").generation) == (GroupState.STABLE, a, gen)
    assert g.static_members == {"i1": b}
    m = g.members[b]
    assert (m.instance_id, m.client_id, m.client_host) == ("i1", "c2", "/127.0.0.1")
    assert (m.session_timeout_ms, m.rebalance_timeout_ms, m.protocol_type) == (
        6000,
        10000,
        "consumer",
    )
    assert m.deadline_ms == env.now + 6000  # the session restarts at the load
    d = gc.describe("g")
    assert (d.state, d.protocol_type, d.protocol_name) == (GroupState.STABLE, "consumer", "range")
    assert {(x.member_id, x.metadata, x.assignment) for x in d.members} == {
        (a, b"meta", b"A"),
        (b, b"meta", b"B"),
    }

    caplog.set_level(logging.INFO, "floe.coordinator.group")

    async def go() -> None:
        assert gc.heartbeat("g", gen, a, None) is ErrorCode.none
        assert gc.heartbeat("g", gen, b, "i1") is ErrorCode.none
        assert gc.heartbeat("g", gen, "x", "i1") is ErrorCode.fenced_instance_id
        assert f"group.member.fenced group=g instance=i1 member=x current={b}" in caplog.text
        errors = await gc.commit_offsets(
            "g",
            generation=gen,
            member_id=b,
            instance_id="i1",
            offsets=[OffsetCommit(T, 0, 9, -1, None)],
        )
        assert errors == {(T, 0): ErrorCode.none}
        again = await gc.sync(
            "g",
            generation=gen,
            member_id=b,
            instance_id="i1",
            protocol_type="consumer",
            protocol_name="range",
            assignments={},
        )
        assert (again.error, again.assignment) == (ErrorCode.none, b"B")
        assert (gc.groups["g"].state, gc._data("g").generation) == (GroupState.STABLE, gen)

    run(go())


def test_a_loaded_member_that_never_heartbeats_expires(env: Env) -> None:
    """Sessions restart at the load: a member that does not come back is removed after
    its session timeout and the group rebalances without it."""
    a, b, gen = run(join_two(env.gc))
    env.now += 60_000  # the broker was down for a minute
    env.reopen()
    gc = env.gc

    async def go() -> None:
        env.now += 5000
        assert gc.heartbeat("g", gen, a, None) is ErrorCode.none
        gc.tick()
        assert set(gc.groups["g"].members) == {a, b}
        env.now += 1001  # past b's session, counted from the load
        gc.tick()
        g = gc.groups["g"]
        assert set(g.members) == {a} and g.state is GroupState.PREPARING_REBALANCE
        assert gc.heartbeat("g", gen, a, None) is ErrorCode.rebalance_in_progress
        rejoin = await gc.join(join_req(a))
        assert (rejoin.generation, [x[0] for x in rejoin.members]) == (gen + 1, [a])
        synced = await gc.sync(
            "g",
            generation=gen + 1,
            member_id=a,
            instance_id=None,
            protocol_type="consumer",
            protocol_name="range",
            assignments={a: b"all"},
        )
        assert synced.assignment == b"all"

    run(go())
    env.reopen()
    g = env.gc.groups["g"]
    assert (g.state, list(g.members), g.members[a].assignment) == (GroupState.STABLE, [a], b"all")


def test_a_group_caught_before_the_leaders_sync_comes_back_rebalancing(env: Env) -> None:
    """The generation is persisted when its join phase completes, its members and their
    assignments when the leader's SyncGroup completes it. A crash in between brings
    the group back in PreparingRebalance with the members of that join: their SyncGroup
    and heartbeats say REBALANCE_IN_PROGRESS, they rejoin with their member ids, and a
    member that does not is removed when its session lapses."""

    async def joined() -> tuple[str, str, int]:
        a, _ = await join_one(env.gc)
        second = asyncio.create_task(env.gc.join(join_req(require_known_member_id=False)))
        await asyncio.sleep(0.01)
        rejoin = await env.gc.join(join_req(a))
        return a, (await second).member_id, rejoin.generation

    a, b, gen = run(joined())
    env.reopen()
    gc = env.gc
    g = gc.groups["g"]
    assert (g.state, set(g.members), gc._data("g").generation) == (
        GroupState.PREPARING_REBALANCE,
        {a, b},
        gen,
    )

    async def go() -> None:
        sync = await gc.sync(
            "g",
            generation=gen,
            member_id=a,
            instance_id=None,
            protocol_type="consumer",
            protocol_name="range",
            assignments={a: b"A", b: b"B"},
        )
        assert sync.error is ErrorCode.rebalance_in_progress
        assert gc.heartbeat("g", gen, b, None) is ErrorCode.rebalance_in_progress
        rejoined = asyncio.create_task(gc.join(join_req(a)))  # b never comes back
        await asyncio.sleep(0.01)
        assert not rejoined.done()  # the join phase waits for b
        env.now += 6001
        gc.tick()
        result = await rejoined
        assert (result.generation, [x[0] for x in result.members]) == (gen + 1, [a])

    run(go())


def test_a_static_member_replaced_while_stable_is_persisted(env: Env) -> None:
    """Kafka writes the group when a static member rejoins with a new member id and
    nothing else changes: after a restart the instance maps to its new id (the old one
    is fenced), with its assignment."""

    async def replaced() -> tuple[str, str, int]:
        _, old, gen = await join_two(env.gc, instance="i1")
        again = await env.gc.join(join_req(instance="i1"))
        assert (again.error, again.generation) == (ErrorCode.none, gen)
        assert env.gc.groups["g"].state is GroupState.STABLE
        return old, again.member_id, gen

    old, new, gen = run(replaced())
    env.reopen()
    gc = env.gc
    assert gc.groups["g"].static_members == {"i1": new}
    assert gc.groups["g"].members[new].assignment == b"B"
    assert gc.heartbeat("g", gen, new, "i1") is ErrorCode.none
    assert gc.heartbeat("g", gen, old, "i1") is ErrorCode.fenced_instance_id


def test_a_group_that_became_empty_loads_empty(env: Env) -> None:
    async def go() -> None:
        a, b, _ = await join_two(env.gc)
        env.gc.leave("g", [(a, None), (b, None)])
        await asyncio.sleep(0.05)

    run(go())
    env.reopen()
    g = env.gc.groups["g"]
    assert (g.state, g.members, g.leader, env.gc._data("g").generation) == (
        GroupState.EMPTY,
        {},
        None,
        3,
    )


def test_a_failed_assignment_write_fails_the_sync_and_rebalances(env: Env) -> None:
    """As Kafka's storeGroup: when the leader's assignment cannot be written, SyncGroup
    gets NOT_COORDINATOR (the client finds the coordinator again) and the group
    rebalances; nothing is Stable that the journal does not hold."""
    gc = env.gc

    async def go() -> None:
        first = await gc.join(join_req(require_known_member_id=False))

        def broken(_records: object) -> int:
            raise StorageError("disk full")

        gc._journal.append = broken  # type: ignore[method-assign]
        sync = await gc.sync(
            "g",
            generation=first.generation,
            member_id=first.member_id,
            instance_id=None,
            protocol_type="consumer",
            protocol_name="range",
            assignments={first.member_id: b"A"},
        )
        assert sync.error is ErrorCode.not_coordinator
        g = gc.groups["g"]
        assert g.state is GroupState.PREPARING_REBALANCE
        assert g.members[first.member_id].assignment == b""

    run(go())


def test_a_member_list_that_cannot_form_a_group_is_skipped(env: Env) -> None:
    """Validated when applied: a record whose leader is not a member, or with a member id
    twice, is skipped (logged and counted) and the coordinator starts anyway."""
    member = MemberValue("m", None, "c", "/h", 10_000, 6000, b"sub", b"a")
    bad = [
        GroupValue("consumer", 4, "range", "nobody", (member,), True),
        GroupValue("consumer", 4, "range", "m", (member, member), True),
        GroupValue("consumer", 4, None, "m", (member,), True),
    ]
    env.gc._journal.append([encode(GroupKey("g"), v) for v in bad])
    env.reopen()
    assert env.gc.replay_skipped == 3
    assert "g" not in env.gc.groups and "g" not in env.gc.persisted.groups


# ------------------------------------------------------------------ replay property

ops = st.lists(
    st.one_of(
        st.tuples(st.just("commit"), st.sampled_from("gh"), st.integers(0, 3), st.integers(0, 99)),
        st.tuples(st.just("stage"), st.sampled_from("gh"), st.integers(1, 3), st.integers(0, 3)),
        st.tuples(st.just("end"), st.sampled_from("gh"), st.integers(1, 3), st.booleans()),
        st.tuples(st.just("delete_group"), st.sampled_from("gh")),
        st.tuples(st.just("delete_offset"), st.sampled_from("gh"), st.integers(0, 3)),
        st.tuples(st.just("topic_deleted")),
    ),
    max_size=25,
)


async def apply_op(gc: GroupShard, op: tuple[Any, ...]) -> None:
    kind, *args = op
    if kind == "commit":
        g, p, o = args
        c = OffsetCommit(T, p, o, -1, None)
        await gc.commit_offsets(g, generation=-1, member_id="", instance_id=None, offsets=[c])
    elif kind == "stage":
        g, pid, p = args
        c = OffsetCommit(T, p, pid * 100 + p, -1, None)
        await gc.stage_txn_offsets(
            g, producer_id=pid, producer_epoch=0, generation=-1, member_id="", instance_id=None,
            offsets=[c],
        )  # fmt: skip
    elif kind == "end":
        g, pid, commit = args
        await gc.complete_transaction(g, pid, 0, commit)
    elif kind == "delete_group":
        await gc.delete_group(args[0])
    elif kind == "delete_offset":
        await gc.delete_offsets(args[0], [(T, args[1])])
    else:
        gc.topic_deleted(T)


def compacted_replay(records: list[tuple[bytes, bytes | None]]) -> PersistedGroups:
    """What a fully compacted log replays to: the last record of each key, in log order,
    tombstones dropped."""
    last = {key: i for i, (key, _) in enumerate(records)}
    state = PersistedGroups()
    for i, (key, value) in enumerate(records):
        if last[key] == i and value is not None:
            apply(state, *decode(key, value))
    return state


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(ops)
def test_replaying_the_journal_gives_the_same_state(tmp_path: Path, steps: list[Any]) -> None:
    import tempfile

    with tempfile.TemporaryDirectory(dir=tmp_path) as d:
        env = Env(Path(d) / "data")
        try:
            for step in steps:
                run(apply_op(env.gc, step))
            live = copy.deepcopy(env.gc.persisted)
            assert compacted_replay(env.records()) == live
            env.reopen()
            assert env.gc.persisted == live
        finally:
            env.store.close()


def test_newcomers_extend_the_initial_rebalance_delay(tmp_path: Path) -> None:
    env = Env(tmp_path / "data", **{"group.initial.rebalance.delay.ms": 1000})

    async def go() -> None:
        gc = env.gc
        start = env.now
        a = asyncio.create_task(gc.join(join_req(require_known_member_id=False)))
        await asyncio.sleep(0.01)
        env.now = start + 800
        b = asyncio.create_task(gc.join(join_req(require_known_member_id=False)))
        await asyncio.sleep(0.01)
        env.now = start + 1100
        gc.tick()
        await asyncio.sleep(0.01)
        assert not a.done() and not b.done()
        env.now = start + 1900
        gc.tick()
        first, second = await a, await b
        assert first.generation == second.generation == 1
        assert len(first.members) + len(second.members) == 2  # the leader sees both

    try:
        run(go())
    finally:
        env.store.close()


def test_ids_no_client_could_read_back_are_refused(env: Env) -> None:
    """Flexible requests carry strings of any length; legacy ones (int16 length) at most
    32767 bytes. A group whose id, instance id or member id is longer could never be
    listed or described to an older client, so it is never created (Kafka refuses an
    empty group id the same way)."""

    async def go() -> None:
        gc = env.gc
        long_id = "g" * 32768
        for group_id in (long_id, ""):
            join = await gc.join(join_req(group_id=group_id))
            assert join.error is ErrorCode.invalid_group_id
            ok = OffsetCommit(T, 0, 5, -1, None)
            commit = await gc.commit_offsets(
                group_id, generation=-1, member_id="", instance_id=None, offsets=[ok]
            )
            assert commit == {(T, 0): ErrorCode.invalid_group_id}
            staged = await gc.stage_txn_offsets(
                group_id,
                producer_id=1,
                producer_epoch=0,
                generation=-1,
                member_id="",
                instance_id=None,
                offsets=[ok],
            )
            assert staged == {(T, 0): ErrorCode.invalid_group_id}
        join = await gc.join(join_req(instance="i" * 32768))
        assert join.error is ErrorCode.invalid_group_id
        assert set(gc.groups) <= {"g"} and gc.list_groups() == []
        # a client id of the longest legacy length still gives a member id that fits
        first = await gc.join(join_req(client_id="c" * 32767))
        assert first.error is ErrorCode.member_id_required
        assert len(first.member_id.encode()) <= 32767
        static = await gc.join(join_req(instance="s" * 32767))
        assert len(static.member_id.encode()) <= 32767

    run(go())
