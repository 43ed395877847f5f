"""Three brokers sharing partitions, each leading its share of ``__consumer_offsets``
and ``__transaction_state``, and group (transactional) ids chosen for the broker that
coordinates them."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable

import helpers.cluster
from floe.coordinator.group import partition_for
from helpers.broker import Broker
from helpers.cluster import leaders_as_answered_by, wait_for, wait_writer
from helpers.cluster_etcd import EtcdServer
from helpers.seaweed import SeaweedServer

OFFSETS = "__consumer_offsets"
OFFSETS_PARTITIONS = 50
TXN_STATE = "__transaction_state"
TXN_STATE_PARTITIONS = 50


def start_three(
    broker_factory: Callable[..., Broker],
    s3: SeaweedServer,
    bucket: str,
    etcd: EtcdServer,
    **extra: str,
) -> list[Broker]:
    """A writer (node 1) and two members (nodes 2 and 3) on a new prefix of ``bucket``,
    ``extra`` settings added, once each leads its share of ``__consumer_offsets`` and
    of ``__transaction_state`` as every broker says."""
    prefix = f"g-{uuid.uuid4().hex[:8]}"

    def settings(node: int) -> dict[str, str]:
        shared = helpers.cluster.sharing_settings(s3, bucket, prefix, etcd.endpoint, node)
        return {**shared, **extra}

    writer = wait_writer(broker_factory(settings(1)))
    members = [broker_factory(settings(n), wait=False) for n in (2, 3)]
    brokers = [writer, *members]
    for topic in (OFFSETS, TXN_STATE):
        wait_for(
            f"every broker leads its share of {topic}, as each one says",
            spread_over_three(brokers, topic),
            timeout_s=120,
        )
    return brokers


def spread_over_three(brokers: list[Broker], topic: str) -> Callable[[], bool]:
    """Whether the three ``brokers`` lead 16, 17 and 17 of ``topic``'s 50 partitions,
    as each of them says."""

    def check() -> bool:
        named = [leaders_as_answered_by(b.bootstrap, topic) for b in brokers]
        spread = sorted(Counter(named[0].values()).values()) == [16, 17, 17]
        return spread and all(n == named[0] for n in named)

    return check


def offsets_leaders(b: Broker) -> dict[int, int]:
    """Partition -> leader of ``__consumer_offsets``, as ``b`` answers Metadata."""
    return leaders_as_answered_by(b.bootstrap, OFFSETS)


def group_led_by(node: int, leaders: dict[int, int], prefix: str) -> str:
    """A group (or transactional) id whose partition broker ``node`` leads, given the
    leaders of ``__consumer_offsets`` (or ``__transaction_state``): both have 50."""
    return next(
        g
        for i in range(10_000)
        if leaders[partition_for(g := f"{prefix}-{i}", OFFSETS_PARTITIONS)] == node
    )


def txn_leaders(b: Broker) -> dict[int, int]:
    """Partition -> leader of ``__transaction_state``, as ``b`` answers Metadata."""
    return leaders_as_answered_by(b.bootstrap, TXN_STATE)
