"""The live group state machine: validated transitions, protocol votes, subscriptions."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from floe.coordinator.group.state import (
    VALID_PREVIOUS,
    Group,
    GroupState,
    IllegalTransitionError,
    Member,
    parse_subscription,
)


def member(mid: str, protocols: list[str], ptype: str = "consumer") -> Member:
    return Member(mid, None, "c", "/h", 6000, 6000, ptype, [(p, mid.encode()) for p in protocols])


def test_a_new_group_is_empty_and_follows_the_rebalance_cycle() -> None:
    g = Group("g")
    assert g.state is GroupState.EMPTY
    for to in (
        GroupState.PREPARING_REBALANCE,
        GroupState.COMPLETING_REBALANCE,
        GroupState.STABLE,
        GroupState.PREPARING_REBALANCE,
        GroupState.EMPTY,
        GroupState.DEAD,
    ):
        g.transition(to, 1)
        assert (g.state, g.state_since_ms) == (to, 1)


@given(st.lists(st.sampled_from(list(GroupState)), max_size=30))
def test_only_listed_transitions_are_allowed(path: list[GroupState]) -> None:
    g = Group("g")
    for to in path:
        before = g.state
        if before in VALID_PREVIOUS[to]:
            g.transition(to, 0)
            assert g.state is to
        else:
            with pytest.raises(IllegalTransitionError):
                g.transition(to, 0)
            assert g.state is before


def test_protocol_vote_picks_the_most_preferred_common_protocol() -> None:
    g = Group("g")
    g.members = {
        "a": member("a", ["range", "roundrobin"]),
        "b": member("b", ["roundrobin", "range"]),
        "c": member("c", ["roundrobin", "sticky"]),
    }
    assert g.candidate_protocols() == {"roundrobin"}
    assert g.select_protocol() == "roundrobin"
    g.members.pop("c")
    assert g.select_protocol() == "range"  # a tie goes to the first member's preference


def test_a_joiner_must_share_the_type_and_a_protocol() -> None:
    g = Group("g")
    assert g.accepts("consumer", [("range", b"")])
    assert not g.accepts("", [("range", b"")])
    assert not g.accepts("consumer", [])
    g.members = {"a": member("a", ["range"])}
    assert g.accepts("consumer", [("range", b""), ("x", b"")])
    assert not g.accepts("consumer", [("roundrobin", b"")])
    assert not g.accepts("connect", [("range", b"")])


def subscription(topics: list[str]) -> bytes:
    body = struct.pack(">hi", 1, len(topics))
    for t in topics:
        raw = t.encode()
        body += struct.pack(">h", len(raw)) + raw
    return body + struct.pack(">i", -1)


@given(st.lists(st.text(min_size=1, max_size=20), max_size=5))
def test_subscriptions_are_parsed(topics: list[str]) -> None:
    assert parse_subscription(subscription(topics)) == set(topics)


def test_unreadable_subscription_is_none() -> None:
    assert parse_subscription(b"\x00\x01\x00\x00\x00\x05\x00\x09ab") is None
    g = Group("g")
    g.members = {"a": Member("a", None, "c", "/h", 1, 1, "connect", [("x", b"")])}
    assert g.subscribed_topics() is None
