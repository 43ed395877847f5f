"""The writer's balancing plan for partitions shared among the live brokers (pure
functions; :class:`~.sharing.PartitionSharing` runs them every pass): by bytes per
second under load, by partition count when idle or for cold partitions, and when moves
by bytes wait (:func:`holds_moves`).
"""

from __future__ import annotations

from collections.abc import Mapping

from floe.types import PartitionId, TopicName

Key = tuple[TopicName, PartitionId]

BALANCE_FLOOR_BYTES_S = 256 * 1024
"""Below this many bytes per second over all shareable partitions the cluster is idle:
the writer balances partition counts, not bytes."""
BALANCE_MARGIN = 0.1
"""A move by bytes must lower the busiest broker's bytes per second by more than this
fraction of them (and a quarter of :data:`BALANCE_FLOOR_BYTES_S`): differences within
the noise of the rates move nothing, so no partition goes back and forth."""
COLD_BYTES_S = BALANCE_FLOOR_BYTES_S / 64
"""Under load, a partition below this many bytes per second is cold: it moves only to
even out partition counts."""


def plan_moves(
    led: Mapping[int, list[Key]],
    load: Mapping[Key, float],
    pinned: frozenset[Key] = frozenset(),
) -> tuple[dict[Key, int], str]:
    """Where to move partitions (``led``: each live broker's shareable partitions;
    ``load``: their bytes per second, a missing one 0) and what was balanced:
    ``"bytes"`` when a busy partition moves, else ``"count"`` (the module docstring of
    :mod:`.sharing`). A ``pinned`` partition (an operator placed it) counts for its
    broker, bytes and all, and never moves: the others even out around it.

    Under load, the busy partitions even out the bytes per second first; then the cold
    ones (below :data:`COLD_BYTES_S`: moving them changes no broker's load) even out
    the partition counts, so that a joining broker leads its share either way."""
    held = {b: list(keys) for b, keys in led.items()}
    busy = sum(load.get(k, 0.0) for keys in held.values() for k in keys) >= BALANCE_FLOOR_BYTES_S
    moves = _even_bytes(held, load, pinned) if busy else {}
    by = "bytes" if moves else "count"
    cold = {  # under load, a partition without a rate yet (absent) may be a hot one
        k
        for keys in held.values()
        for k in keys
        if (not busy or load.get(k, COLD_BYTES_S) < COLD_BYTES_S) and k not in pinned
    }
    moves.update(_even_counts(held, cold))
    return moves, by


def holds_moves(
    led: Mapping[int, list[Key]],
    totals: Mapping[int, float],
    before: Mapping[int, float],
    *,
    measured: bool,
    settling: bool,
) -> str | None:
    """Why moves by bytes wait (None: they go now), given each live broker's partitions
    (``led``) and bytes per second at this pass (``totals``) and the last (``before``):
    :data:`~.sharing.SETTLE_S` after the last move (``settling``), until every partition was
    measured, and while any broker's bytes per second moved by more than the margin
    since the last pass (a load ramping up). A broker leading nothing while another
    leads two or more (one restarted, or joining) is not kept waiting for steady
    loads: any move to it is progress, and it waited about a minute under a load whose
    clients retried the failover's backlog."""
    if settling:
        return "settling after the last move"
    if not measured:
        return "partitions not measured yet"
    steady = all(
        abs(totals.get(b, 0.0) - before.get(b, 0.0))
        <= BALANCE_MARGIN * max(totals.get(b, 0.0), before.get(b, 0.0)) + COLD_BYTES_S
        for b in {*totals, *before}
    )
    starved = any(not keys for keys in led.values()) and any(len(k) > 1 for k in led.values())
    if not steady and not starved:
        return "loads not steady"
    return None


def _even_bytes(
    held: dict[int, list[Key]], load: Mapping[Key, float], pinned: frozenset[Key]
) -> dict[Key, int]:
    """Moves of partitions not ``pinned`` from the busiest broker to the least busy
    while one lowers the busiest one's bytes per second by more than the margin
    (``held`` changed to match)."""
    moves: dict[Key, int] = {}
    totals = {b: sum(load.get(k, 0.0) for k in keys) for b, keys in held.items()}
    for _ in range(sum(len(keys) for keys in held.values())):  # each move lowers the spread
        most = max(totals, key=lambda b: (totals[b], b))
        least = min(totals, key=lambda b: (totals[b], b))
        gap = totals[most] - totals[least]
        movable = [k for k in held[most] if load.get(k, 0.0) > 0 and k not in pinned]
        if not movable:
            break
        # the partition whose move leaves the two closest to even
        best = min(movable, key=lambda k: (abs(gap - 2 * load[k]), k))
        after = max(totals[most] - load[best], totals[least] + load[best])
        if totals[most] - after <= max(BALANCE_MARGIN * totals[most], BALANCE_FLOOR_BYTES_S / 4):
            break
        held[most].remove(best)
        held[least].append(best)
        totals[most] -= load[best]
        totals[least] += load[best]
        moves[best] = least
    return moves


def _most_uneven(source: list[Key], target: list[Key], movable: set[Key]) -> Key:
    """The last movable partition of ``source`` whose topic ``source`` leads the most
    more partitions of than ``target`` does."""
    surplus: dict[TopicName, int] = {}
    for topic, _ in source:
        surplus[topic] = surplus.get(topic, 0) + 1
    for topic, _ in target:
        surplus[topic] = surplus.get(topic, 0) - 1
    candidates = [k for k in source if k in movable]
    return max(reversed(candidates), key=lambda k: surplus[k[0]])


def _even_counts(held: dict[int, list[Key]], movable: set[Key]) -> dict[Key, int]:
    """Moves of ``movable`` partitions from the broker leading the most partitions to
    the one leading the fewest until they differ by one at most (or none can move).
    Each move takes a partition of the topic the two brokers share most unevenly (the
    last such partition), so that every topic stays spread: a topic of 6 partitions led
    3 and 3 stays so while 50 partitions of another even out."""
    moves: dict[Key, int] = {}
    while True:
        fewest = min(held, key=lambda b: (len(held[b]), b))
        over = [
            b
            for b, keys in held.items()
            if len(keys) > len(held[fewest]) + 1 and any(k in movable for k in keys)
        ]
        if not over:
            return moves
        most = max(over, key=lambda b: (len(held[b]), b))
        key = _most_uneven(held[most], held[fewest], movable)
        held[most].remove(key)
        held[fewest].append(key)
        moves[key] = fewest
