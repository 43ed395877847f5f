"""Coordinators start whatever their journal holds: a record that does not decode (unknown
version or kind, truncated, bad UTF-8, wrong types) or whose replay raises is logged with
its offset, counted in ``replay_skipped`` and skipped, and the good state survives (a
garbage record never replaces the good value of its key). At run time, a record that
fails to apply is skipped the same way and never wedges the coordinator."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import orjson
import pytest

from floe.config.loader import BrokerConfig, load_config
from floe.coordinator.group import shard as group_module
from floe.coordinator.group.api import OffsetCommit
from floe.coordinator.group.coordinator import TOPIC as OFFSETS_TOPIC
from floe.coordinator.group.offsets import apply as apply_group_record
from floe.coordinator.group.records import (
    GroupKey,
    Key,
    OffsetKey,
    TxnOffsetKey,
    Value,
    encode_key,
)
from floe.coordinator.group.shard import GroupShard
from floe.coordinator.txn.shard import TOPIC as TXN_TOPIC
from floe.coordinator.txn.shard import TxnShard
from floe.coordinator.txn.state import BLOCK_KEY, TxnState, txn_key
from floe.errors import ErrorCode
from floe.storage.journal import Journal
from floe.storage.local import LocalStore
from floe.types import TopicName

R = TypeVar("R")
T = TopicName("t")


def run(coro: Coroutine[Any, Any, R]) -> R:
    return asyncio.run(coro)


class Env:
    """A real store on one data dir, reopened to simulate restarts."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        toml = data_dir.parent / "floe.toml"
        toml.touch()
        self.config: BrokerConfig = load_config(toml, {"log.flush.policy": "interval"}, {})
        self.store = LocalStore(data_dir, self.config)
        if self.store.topic(T) is None:
            self.store.create_topic(T, 4, {})

    def reopen(self) -> None:
        self.store.close()
        self.store = LocalStore(self.data_dir, self.config)

    def groups(self) -> GroupShard:
        gc = GroupShard(
            self.store, self.config, Journal(self.store, OFFSETS_TOPIC), lambda: 1_000_000
        )
        self.loaded = gc.load()
        return gc

    def transactions(self, completed: list[str] | None = None) -> TxnShard:
        async def complete(
            group: str, pid: int, epoch: int, commit: bool, _coordinator: int
        ) -> None:
            if completed is None:
                raise RuntimeError("group coordinator unavailable")
            completed.append(group)

        return TxnShard(
            self.store,
            complete_group=complete,
            notify=lambda: None,
            max_timeout_ms=60_000,
            abort_check_interval_ms=3_600_000,
            id_expiration_ms=86_400_000,
        )

    def append_raw(self, topic: TopicName, records: list[tuple[bytes, bytes | None]]) -> None:
        """Records written by something else than the coordinator (an older version, a
        disk fault): straight into the journal's log."""
        Journal(self.store, topic).append(records)


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    e = Env(tmp_path / "data")
    yield e
    e.store.close()


def skipped(caplog: pytest.LogCaptureFixture, topic: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.getMessage().startswith(f"journal.record.skipped topic={topic} ")
    ]


def commit(gc: GroupShard, **offsets: int) -> dict[tuple[str, int], ErrorCode]:
    """A simple (generation -1) commit of ``p<N>=offset`` for topic t."""
    return run(
        gc.commit_offsets(
            "g",
            generation=-1,
            member_id="",
            instance_id=None,
            offsets=[OffsetCommit(T, int(p[1:]), o, -1, None) for p, o in offsets.items()],
        )
    )


def committed(gc: GroupShard) -> dict[int, int]:
    got = gc.fetch_offsets("g", None, require_stable=False)
    return {p: c.offset for (_, p), c in got.items()}


# -- group coordinator -------------------------------------------------------------------


def test_group_replay_skips_undecodable_records(env: Env, caplog: pytest.LogCaptureFixture) -> None:
    gc = env.groups()
    commit(gc, p0=10, p1=11)
    good = encode_key(OffsetKey("g", T, 0))
    garbage: list[tuple[bytes, bytes | None]] = [
        (b"\x09\x01\x00\x01g", b"\x00"),  # unknown key version
        (b"\x00\x07\x00\x01g", b"\x00"),  # unknown record kind
        (b"\x00", None),  # truncated key
        (good, b"\x00\x00\x00"),  # truncated value for a good key
        (encode_key(OffsetKey("g", T, 1)), b"\x05" + bytes(40)),  # unknown value version
        (b"\x00\x01\x00\x02\xff\xfe\x00\x01t\x00\x00\x00\x00", None),  # bad UTF-8 group
        (encode_key(GroupKey("g")), b"\x00\x00\x08consumer"),  # truncated group value
        (encode_key(TxnOffsetKey("g", 7, T, 3)), b"\x00\x00"),  # truncated txn offset
    ]
    env.append_raw(OFFSETS_TOPIC, garbage)
    commit(gc, p2=12)
    env.reopen()
    caplog.set_level(logging.INFO)
    again = env.groups()
    assert committed(again) == {0: 10, 1: 11, 2: 12}
    assert again.replay_skipped == len(garbage)
    lines = skipped(caplog, OFFSETS_TOPIC)
    assert len(lines) == len(garbage)
    assert lines[0].startswith(
        f"journal.record.skipped topic={OFFSETS_TOPIC} partition=0 offset=2 "
    )
    assert "unknown key version 9" in lines[0]
    assert "unknown record kind 7" in lines[1]
    assert "replay_skipped=8" in env.loaded.fields()  # what the coordinator logs
    # and it serves: the next commit is applied and replays
    assert commit(again, p3=13) == {(T, 3): ErrorCode.none}
    env.reopen()
    assert committed(env.groups()) == {0: 10, 1: 11, 2: 12, 3: 13}


def test_a_record_failing_to_apply_at_run_time_does_not_wedge_the_group_coordinator(
    env: Env, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def flaky(state: Any, key: Key, value: Value | None) -> None:  # a bug in apply
        if isinstance(key, OffsetKey) and key.partition == 1:
            raise RuntimeError("apply failed")
        apply_group_record(state, key, value)

    gc = env.groups()
    monkeypatch.setattr(group_module, "apply", flaky)
    assert set(commit(gc, p0=1, p1=2, p2=3).values()) == {ErrorCode.none}
    assert committed(gc) == {0: 1, 2: 3}
    assert gc.replay_skipped == 1
    assert "journal.record.skipped topic=__consumer_offsets partition=0 offset=1 " in caplog.text
    assert commit(gc, p0=5) == {(T, 0): ErrorCode.none}
    assert committed(gc) == {0: 5, 2: 3}


# -- transaction coordinator ---------------------------------------------------------------


def txn_value(**fields: object) -> bytes:
    base: dict[str, object] = {
        "producer_id": 0,
        "producer_epoch": 0,
        "timeout_ms": 60_000,
        "state": "Empty",
        "partitions": [],
        "groups": [],
        "txn_start_ms": -1,
        "last_update_ms": 1,
    }
    return orjson.dumps(base | fields)


def test_txn_replay_skips_undecodable_records(env: Env, caplog: pytest.LogCaptureFixture) -> None:
    tc = env.transactions([])
    run(tc.start())
    pid, epoch = run(tc.init_producer_id("tx", 60_000, -1, -1))
    run(tc.add_partitions("tx", pid, epoch, [(T, 0)]))
    run(tc.end_txn("tx", pid, epoch, commit=True))
    before = tc.state.txns["tx"]
    run(tc.stop())
    garbage: list[tuple[bytes, bytes | None]] = [
        (txn_key("tx"), b"not json"),
        (txn_key("tx"), txn_value(state="Bogus")),
        (txn_key("tx"), txn_value(producer_id="5")),
        (txn_key("tx"), txn_value(partitions=[["t"]])),
        (txn_key("tx"), b"[]"),
        (b"\x01\xff\xfe", txn_value()),
        (BLOCK_KEY, b'{"end": "lots"}'),
        (BLOCK_KEY, b"[]"),
        (b"\x07something newer", b"x"),
    ]
    env.append_raw(TXN_TOPIC, garbage)
    env.reopen()
    caplog.set_level(logging.INFO)
    again = env.transactions([])
    run(again.start())
    try:
        assert again.state.txns == {"tx": before}
        assert again.state.by_producer_id == {pid: "tx"}
        assert again.replay_skipped == len(garbage)
        assert len(skipped(caplog, TXN_TOPIC)) == len(garbage)
        assert "replay_skipped=9" in caplog.text
        assert run(again.init_producer_id("tx", 60_000, -1, -1)) == (pid, epoch + 1)
        assert run(again.init_producer_id(None, 0, -1, -1))[0] > pid
    finally:
        run(again.stop())


def test_producer_ids_are_not_reused_when_the_block_record_is_lost(env: Env) -> None:
    # only a transactional id's record survived: its producer id is taken
    env.append_raw(TXN_TOPIC, [(txn_key("tx"), txn_value(producer_id=4242))])
    tc = env.transactions([])
    run(tc.start())
    try:
        assert run(tc.init_producer_id(None, 0, -1, -1))[0] > 4242
    finally:
        run(tc.stop())


def test_a_prepared_transaction_that_cannot_complete_does_not_stop_start_up(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    prepared = txn_value(producer_id=1, state="PrepareCommit", groups=["g"], txn_start_ms=1)
    later = txn_value(producer_id=2, state="PrepareAbort", partitions=[[T, 0]], txn_start_ms=1)
    env.append_raw(TXN_TOPIC, [(BLOCK_KEY, b'{"end": 1000}')])
    env.append_raw(TXN_TOPIC, [(txn_key("a"), prepared), (txn_key("b"), later)])
    tc = env.transactions(None)  # the group coordinator is failing
    run(tc.start())
    try:
        assert "txn.complete_failed transactional_id=a" in caplog.text
        assert tc.state.txns["a"].state is TxnState.PREPARE_COMMIT  # retried later
        assert tc.state.txns["b"].state is TxnState.COMPLETE_ABORT  # not held up by "a"
        run(tc.expire(2_000_000_000_000))  # still failing: the expiry pass goes on
        assert tc.state.txns["a"].state is TxnState.PREPARE_COMMIT
    finally:
        run(tc.stop())
    completed: list[str] = []
    tc = env.transactions(completed)
    run(tc.start())
    try:
        assert completed == ["g"]
        assert tc.state.txns["a"].state is TxnState.COMPLETE_COMMIT
    finally:
        run(tc.stop())
