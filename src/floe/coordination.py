"""The broker's coordinators, wired to the rest of the broker: the transaction
coordinator's markers to partitions other brokers lead, its groups completed where they
are coordinated, and its coordinator epochs (see :mod:`floe.coordinator.txn.coordinator`);
which table topics a broker coordinates and where it reads their partitions
(:mod:`floe.tabletopic.placement`). Used by the writer (:mod:`floe.serving`) and by a
member that shares partitions (:mod:`floe.waiting`) alike."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from floe.broker.core import Broker
from floe.config import broker as keys
from floe.coordinator.group.coordinator import TOPIC as OFFSETS_TOPIC
from floe.coordinator.shards import Leads
from floe.coordinator.txn.coordinator import (
    SHARED_EPOCH_BASE,
    TOPIC,
    TransactionCoordinator,
)
from floe.errors import ErrorCode, KafkaError
from floe.storage.interface import Store, TopicMeta
from floe.types import PartitionId, TopicName

if TYPE_CHECKING:
    from floe.tabletopic.placement import Locate


def transaction_coordinator(
    broker: Broker, store: Store, *, controller: bool, leads: Leads | None
) -> TransactionCoordinator:
    """The transaction coordinator of ``broker`` (``controller``: it creates
    ``__transaction_state``). In a cluster that shares partitions (``leads``: whether
    this broker leads a partition) it holds the shards of the partitions this broker
    leads, writes markers to the partitions other brokers
    lead with WriteTxnMarkers, and completes a group another broker coordinates by a
    marker for the group's ``__consumer_offsets`` partition (as Kafka's coordinators
    do); elsewhere every shard is here."""
    membership = broker.membership
    remote = None
    if membership is not None and leads is not None:
        from floe.cluster.peers import marker_writer

        remote = marker_writer(membership, broker.config[keys.CLUSTER_SESSION_TIMEOUT_MS] / 1000)

    async def complete_group(
        group: str, producer_id: int, epoch: int, commit: bool, coordinator: int
    ) -> None:
        groups = broker.groups
        if groups is None:
            raise RuntimeError("no group coordinator to complete a transaction's offsets")
        partition = groups.partition_of(group)
        if remote is None or partition is None or groups.coordinates(group):
            await groups.complete_transaction(group, producer_id, epoch, commit)
            return
        pending = await remote(
            [(OFFSETS_TOPIC, partition)], producer_id, epoch, commit, coordinator
        )
        if pending:  # the transaction coordinator tries again (its completion is deferred)
            raise KafkaError(
                f"group {group}: {OFFSETS_TOPIC}-{partition}'s leader did not take the marker",
                ErrorCode.coordinator_load_in_progress,
            )

    def epoch_of(partition: int) -> int:
        """The coordinator epoch of a shard loaded now."""
        if leads is not None:  # grows with every move of the partition
            return SHARED_EPOCH_BASE + broker.leader_epoch(TOPIC, PartitionId(partition))
        if membership is not None:  # the writer coordinates every transaction
            return membership.writer_epoch()
        return 0  # one node: nothing to fence

    return TransactionCoordinator(
        store,
        broker.config,
        complete_group=complete_group,
        notify=broker.watch.notify,
        leads=leads,
        controller=controller,
        epoch_of=epoch_of,
        remote_markers=remote,
        check=membership.check if membership is not None else lambda: None,
    )


def table_placement(
    broker: Broker, leads: Callable[[TopicName, PartitionId], bool], *, writer: bool
) -> tuple[Callable[[TopicMeta], bool], Locate]:
    """In a cluster whose brokers share partitions (this broker leading those ``leads``
    says; ``writer``: it is the writer): which table topics it coordinates
    (:func:`~floe.tabletopic.placement.coordinates_here`) and where their coordinators
    read the partitions other brokers lead."""
    from floe.tabletopic.placement import cluster_leaders, coordinates_here

    assert broker.membership is not None

    def here(meta: TopicMeta) -> bool:
        return coordinates_here(meta, leads, writer)

    return here, cluster_leaders(broker.membership, leads)
