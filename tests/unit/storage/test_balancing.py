"""The writer's balancing plan (:func:`floe.storage.object.balancing.plan_moves`): by
partition count in an idle cluster, by bytes per second under load, and never moving
a partition for a difference within the noise."""

from __future__ import annotations

from floe.storage.object.balancing import BALANCE_FLOOR_BYTES_S, holds_moves, plan_moves
from floe.types import PartitionId, TopicName

MB = 1_000_000.0


def keys(*ps: int) -> list[tuple[TopicName, PartitionId]]:
    return [(TopicName("t"), PartitionId(p)) for p in ps]


def k(p: int) -> tuple[TopicName, PartitionId]:
    return (TopicName("t"), PartitionId(p))


def test_an_idle_cluster_is_balanced_by_count_a_joining_broker_gets_its_share() -> None:
    moves, by = plan_moves({1: keys(0, 1, 2), 2: keys(3, 4, 5), 3: []}, {})
    assert by == "count"
    assert sorted(moves.values()) == [3, 3]
    assert {k for k in moves} <= set(keys(0, 1, 2, 3, 4, 5))
    assert plan_moves({1: keys(0, 1), 2: keys(2)}, {})[0] == {}  # off by one: fine


def test_under_load_a_hot_partition_keeps_its_broker_to_itself() -> None:
    """By count the two brokers are even; by bytes the one with the hot partition is
    three times busier: its other partition moves, and then nothing (moving the hot
    one would only make the other broker the busy one)."""
    load = {k(0): 1 * MB, k(1): 0.3 * MB, k(2): 0.3 * MB, k(3): 0.3 * MB}
    moves, by = plan_moves({1: keys(0, 1), 2: keys(2, 3)}, load)
    assert by == "bytes"
    assert moves == {k(1): 2}


def test_a_joining_broker_takes_the_partitions_that_even_out_the_bytes() -> None:
    load = {k(p): 0.5 * MB for p in range(6)}
    moves, by = plan_moves({1: keys(0, 1, 2), 2: keys(3, 4, 5), 3: []}, load)
    assert by == "bytes"
    assert sorted(moves.values()) == [3, 3]


def test_differences_within_the_margin_move_nothing() -> None:
    """A 5 % difference is noise: no move, so rates that wobble move nothing back and
    forth; partitions without traffic are never moved for bytes."""
    load = {k(0): 1.05 * MB, k(1): 1.0 * MB, k(2): 0.0}
    assert plan_moves({1: keys(0), 2: keys(1, 2)}, load)[0] == {}
    # a busy broker and an idle one, and moving the busy partition helps nobody
    assert plan_moves({1: keys(0), 2: []}, {k(0): 2 * MB})[0] == {}


def test_under_load_cold_partitions_even_out_the_counts() -> None:
    """One hot partition and cold ones: the hot one stays, the cold ones spread so that
    every broker, a joining one too, leads its share."""
    load = {k(0): 2 * MB, k(1): 1000.0, k(2): 0.0, k(3): 0.0, k(4): 0.0}
    moves, by = plan_moves({1: keys(0, 1, 2, 3), 2: keys(4), 3: []}, load)
    assert by == "count"
    assert k(0) not in moves
    assert sorted(moves.values()) in ([3, 3], [2, 3])
    # a partition its owner has not measured yet may be a hot one: it does not move
    del load[k(2)], load[k(3)]
    moves, _ = plan_moves({1: keys(0, 1, 2, 3), 2: keys(4), 3: []}, load)
    assert set(moves) == {k(1)}


def test_the_floor_separates_count_from_bytes() -> None:
    """The same move, of one of two equally busy partitions, is a count move in an idle
    cluster and a bytes move under load."""
    for each, by in [(BALANCE_FLOOR_BYTES_S / 4, "count"), (BALANCE_FLOOR_BYTES_S, "bytes")]:
        moves, planned = plan_moves({1: keys(0, 1), 2: []}, {k(0): each, k(1): each})
        assert (len(moves), planned) == (1, by)


def test_moves_by_bytes_wait_for_steady_loads_unless_a_broker_leads_nothing() -> None:
    """A load ramping up (a broker's bytes per second moved by more than the margin
    since the last pass) holds moves by bytes back, so that nothing moves on a
    transient; but a broker that leads nothing (restarted after a kill, its partitions
    taken over) gets its share without waiting for steady loads: the failover
    benchmark's restarted member waited 31-60 s while the clients' retries made the
    loads swing."""
    ramping, before = {1: 1.2 * MB, 2: 0.6 * MB, 3: 0.0}, {1: 0.9 * MB, 2: 0.6 * MB, 3: 0.0}
    starved = {1: keys(0, 1, 2, 3), 2: keys(4, 5), 3: []}
    fed = {1: keys(0, 1, 2), 2: keys(4, 5), 3: keys(3)}
    assert holds_moves(fed, ramping, before, measured=True, settling=False) == "loads not steady"
    assert holds_moves(starved, ramping, before, measured=True, settling=False) is None
    assert holds_moves(fed, before, before, measured=True, settling=False) is None
    assert holds_moves(starved, ramping, before, measured=False, settling=False) is not None
    assert holds_moves(starved, ramping, before, measured=True, settling=True) is not None


def test_a_pinned_partition_counts_for_its_broker_and_never_moves() -> None:
    """An operator placed 1 and 3 on broker 1 (Kafka's reassignment API): the counts
    even out with the other two, whichever order the plan would have taken them in."""
    moves, by = plan_moves({1: keys(0, 1, 2, 3), 2: []}, {}, frozenset(keys(1, 3)))
    assert by == "count"
    assert moves == {k(0): 2, k(2): 2}
    # nothing else may move: the broker keeps both pinned partitions however uneven
    assert plan_moves({1: keys(1, 3), 2: []}, {}, frozenset(keys(1, 3)))[0] == {}


def test_under_load_a_pinned_hot_partition_stays_and_counts_for_its_broker() -> None:
    load = {k(0): 1 * MB, k(1): 0.3 * MB, k(2): 0.3 * MB, k(3): 0.3 * MB}
    assert plan_moves({1: keys(0, 1), 2: keys(2, 3)}, load, frozenset(keys(1)))[0] == {}


def test_counts_even_out_with_the_partitions_of_the_most_unevenly_spread_topic() -> None:
    """The writer created 12 partitions of ``__consumer_offsets`` alone, then a topic
    of 6 was spread 3 and 3: the offsets' partitions move, the topic stays spread."""
    offsets = [(TopicName("__consumer_offsets"), PartitionId(p)) for p in range(12)]
    topic = [(TopicName("t"), PartitionId(p)) for p in range(6)]
    moves, by = plan_moves({1: [*offsets, *topic[:3]], 2: topic[3:]}, {})
    assert by == "count"
    assert len(moves) == 6 and set(moves.values()) == {2}
    assert {t for t, _ in moves} == {"__consumer_offsets"}
