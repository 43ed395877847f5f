"""What the controller decides for Kafka's reassignment API on Floe's placement
(:mod:`floe.cluster.reassignment`): Kafka's error for each request it cannot carry
out, a move for one it can, a move in flight listed as Kafka lists one, and how long
the balancing leaves an operator's placement alone."""

from __future__ import annotations

import uuid

from floe.cluster.reassignment import Decision, ManualMoves, Placement, decide, ongoing
from floe.errors import ErrorCode
from floe.storage.interface import TopicMeta
from floe.types import PartitionId, TopicName

T, INTERNAL = TopicName("t"), TopicName("__consumer_offsets")


def k(p: int, topic: TopicName = T) -> tuple[TopicName, PartitionId]:
    return (topic, PartitionId(p))


def placement(**changes: object) -> Placement:
    """Broker 1 the writer, 2 and 3 live, 4 partitions of ``t``: 0 and 1 on broker 1
    (1 never claimed), 2 and 3 on broker 2, and 3 moving to broker 3."""
    base: dict[str, object] = {
        "topics": {
            T: TopicMeta(T, uuid.uuid4(), 4),
            INTERNAL: TopicMeta(INTERNAL, uuid.uuid4(), 1, internal=True),
        },
        "owners": {k(0): 1, k(2): 2, k(3): 2},
        "assignments": {k(3): 3, k(2): 2},
        "live": frozenset({1, 2, 3}),
        "writer": 1,
        "sharing": True,
        "writer_only": lambda topic: topic == INTERNAL,
    }
    return Placement(**{**base, **changes})  # type: ignore[arg-type]


def test_a_move_to_a_live_broker_is_recorded() -> None:
    assert decide(placement(), k(0), [2]) == Decision(move_to=2)
    assert decide(placement(), k(1), [3]) == Decision(move_to=3)  # unclaimed: the writer's


def test_a_partition_already_there_is_done_at_once() -> None:
    assert decide(placement(), k(2), [2]) == Decision()
    assert decide(placement(), k(1), [1]) == Decision()


def test_a_move_in_flight_can_be_redirected_or_cancelled() -> None:
    assert decide(placement(), k(3), [2]) == Decision(move_to=2)  # back to its owner
    assert decide(placement(), k(3), None) == Decision(move_to=2)
    assert decide(placement(), k(3), [1]) == Decision(move_to=1)


def test_kafkas_errors() -> None:
    cases = {
        (k(4), (2,)): ErrorCode.unknown_topic_or_partition,
        (k(0, TopicName("nope")), (2,)): ErrorCode.unknown_topic_or_partition,
        (k(0), None): ErrorCode.no_reassignment_in_progress,
        (k(0), ()): ErrorCode.invalid_replica_assignment,
        (k(0), (2, 2)): ErrorCode.invalid_replica_assignment,
        (k(0), (2, 3)): ErrorCode.invalid_replica_assignment,
        (k(0), (9,)): ErrorCode.invalid_replica_assignment,
        (k(0, INTERNAL), (2,)): ErrorCode.invalid_replica_assignment,
    }
    for (key, replicas), code in cases.items():
        got = decide(placement(), key, None if replicas is None else list(replicas))
        assert (got.error, got.move_to) == (code, None), (key, replicas)
        assert got.message
    fixed = decide(placement(), k(0), [2, 3], allow_replication_factor_change=False)
    assert fixed.error is ErrorCode.invalid_replication_factor
    # the internal topic's partition may be named where it is: the writer
    assert decide(placement(), k(0, INTERNAL), [1]) == Decision()


def test_without_shared_partitions_nothing_moves() -> None:
    alone = placement(sharing=False, assignments={})
    assert decide(alone, k(0), [2]).error is ErrorCode.invalid_replica_assignment
    assert decide(alone, k(0), [1]) == Decision()


def test_ongoing_moves_are_listed_with_target_and_owner() -> None:
    assert ongoing(placement(), None) == [(k(3), 3, 2)]
    assert ongoing(placement(), [k(3), k(0), k(9)]) == [(k(3), 3, 2)]
    assert ongoing(placement(), [k(0)]) == []
    # an assignment to a broker that is not live is not a move in flight
    assert ongoing(placement(live=frozenset({1, 2})), None) == []


def test_a_hold_ends_after_its_time_and_a_cancel_ends_it_at_once() -> None:
    now = [100.0]
    moves = ManualMoves(hold_s=60.0, clock=lambda: now[0])
    moves.hold(k(0))
    moves.hold(k(1))
    now[0] += 30
    moves.hold(k(0))  # placed again: held from now
    moves.release(k(2))  # never held: nothing to do
    assert moves.held() == {k(0), k(1)}
    now[0] += 31
    assert moves.held() == {k(0)}
    moves.release(k(0))
    assert moves.held() == frozenset()
