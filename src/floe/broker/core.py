"""The broker's shared state and the per-request context handlers receive.

Ownership: one :class:`Broker` per process, owned by the event loop that serves the
Kafka listener; created by the composition root (``floe.app``) after the store is
open, and closed with it. Handlers never keep references to it beyond a request.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from floe.broker.stats import BrokerStats
from floe.cluster.interface import BrokerInfo
from floe.cluster.membership import Membership
from floe.cluster.reassignment import ManualMoves
from floe.config import BrokerConfig
from floe.config import broker as keys
from floe.coordinator.group import GroupCoordinator
from floe.coordinator.txn.coordinator import TransactionCoordinator
from floe.errors import ErrorCode, KafkaError
from floe.security.sasl import PasswordCheck
from floe.security.session import Session
from floe.security.users import Users
from floe.storage.interface import (
    InvalidPartitionsError,
    InvalidTopicError,
    PartitionLog,
    Store,
    TopicMeta,
)
from floe.tasks import retrieve
from floe.types import PartitionId, TopicName

if TYPE_CHECKING:
    from floe.security.acl import Authorizer
    from floe.security.acls import AclStore

log = logging.getLogger("floe.broker")

RESERVED_TOPICS = frozenset(
    {
        "__consumer_offsets",  # Kafka's internal topics (Topic.INTERNAL_TOPICS) ...
        "__transaction_state",
        "__share_group_state",
        "__cluster_metadata",  # ... and KRaft's metadata log, which CreateTopics refuses
        "_schemas",  # the schema registry's journal
        "__floe_security",  # the SCRAM users and the ACLs (floe.broker.authz)
    }
)
"""Names no client may create or change, whether or not the topic exists yet (Floe
creates the journals it needs at start; ``_schemas`` only with the registry on)."""
SECURITY_TOPIC = TopicName("__floe_security")
"""The internal topic of the users' SCRAM keys and the ACLs: no client reads or sees it,
whatever the ACLs say and with the authorizer off too (``floe.broker.authz``); it does
not count against ``auto.create.topics.max`` (clients cannot see it either)."""


@dataclass(frozen=True, slots=True)
class CloseConnection:
    """A handler's reply to a request the client expects no answer to, when it must
    still learn of an error (a refused acks=0 Produce), or that it must send to another
    broker: the connection answers the requests before it, counts the errors of
    ``response``, and closes, as Kafka does."""

    reason: str
    response: Any
    """The response the client would have had (never sent; its error codes counted), or
    None."""


Reply = Any | None | CloseConnection | Awaitable[Any | None]
"""What a handler returns: a kio response entity, ``None`` for no response (acks=0),
a ``CloseConnection``, or an awaitable of an entity or None (answered later, in
request order)."""


@dataclass(frozen=True, slots=True)
class RequestContext:
    """What a handler knows about the request beyond its body."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    peer: str
    response_class: type
    session: Session | None = None
    """The connection's principal and SASL state (None: a request built outside a
    connection, as unit tests do)."""

    @property
    def listener(self) -> str | None:
        """The name of the listener the request came in on."""
        return None if self.session is None else self.session.listener.name


class DataWatch:
    """Wakes long-polling fetches when records are appended.

    Ownership: the broker's event loop. Waiters are futures resolved (all at once) by
    :meth:`notify`; a waiter that times out simply stops waiting.
    """

    def __init__(self) -> None:
        self._waiters: list[asyncio.Future[None]] = []

    def notify(self) -> None:
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    async def wait(self, timeout_s: float) -> None:
        """Return on the next append or after ``timeout_s``, whichever is first."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await asyncio.wait_for(fut, timeout=max(timeout_s, 0.0))
        except TimeoutError:
            pass
        finally:
            if fut in self._waiters:
                self._waiters.remove(fut)


@dataclass
class Broker:
    """Broker-wide state the Kafka API handlers share."""

    store: Store
    config: BrokerConfig
    cluster_id: str
    advertised_host: str
    advertised_port: int
    watch: DataWatch = field(default_factory=DataWatch)
    started_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    stats: BrokerStats = field(default_factory=BrokerStats)
    """Traffic and request counters, exported at scrape time by ``floe.observability``."""
    groups: GroupCoordinator | None = None
    """Consumer groups and committed offsets; set and started by the composition root."""
    transactions: TransactionCoordinator | None = None
    """Producer ids and transactions; set and started by the composition root."""
    membership: Membership | None = None
    """This broker's place in the cluster (``cluster.metadata.url``), or None alone."""
    moves: ManualMoves | None = None
    """The partitions an operator placed with Kafka's reassignment API, which the
    balancing leaves alone for a while; set on a writer whose cluster shares partitions."""
    refresh_topics: Callable[[], Awaitable[None]] | None = None
    """On a standby or a member: read the bucket's topics again now (a client named one
    it does not know)."""
    users: Users | None = None
    """The SCRAM users (``__floe_security``); set by the composition root."""
    passwords: PasswordCheck | None = None
    """Checks passwords against :attr:`users` (SASL/PLAIN, HTTP Basic, console logins);
    set with them."""
    acls: AclStore | None = None
    """The ACLs (``__floe_security``); set by the composition root."""
    authorizer: Authorizer | None = None
    """Checks requests against :attr:`acls` (``authorizer.enable``); None: everything is
    allowed (``floe.broker.authz``)."""
    addresses: dict[str, tuple[str, int]] = field(default_factory=dict)
    """Per listener name, the address clients are told (Metadata answers a client with
    its own listener's); the first listener's is ``advertised_host:advertised_port``."""
    check_table_configs: Callable[[str, Mapping[str, str]], None] | None = None
    """Checks a topic's validated config overrides against its table's columns
    (``floe.tabletopic.validate``; set by the composition root). Raises ConfigError."""
    standby: bool = False
    """A cluster member waiting for the writer lease: it serves nothing itself and
    points clients at the writer (Metadata and FindCoordinator name it; partition
    requests get NOT_LEADER_OR_FOLLOWER, group and transaction requests NOT_COORDINATOR,
    topic changes NOT_CONTROLLER)."""

    @property
    def node_id(self) -> int:
        return self.config[keys.NODE_ID]

    def check_table(self, topic: str, configs: Mapping[str, str]) -> None:
        """Run :attr:`check_table_configs` (if set) on a topic's validated overrides.

        Raises:
            ConfigError: a table-topic setting does not fit the table's columns.
        """
        if self.check_table_configs is not None:
            self.check_table_configs(topic, configs)

    @property
    def passive(self) -> bool:
        """Serves nothing itself and points clients at the writer, as a :attr:`standby`
        does: a standby, or a writer fenced out of the cluster (another broker took the
        bucket over while this one was stopped or cut off)."""
        return self.standby or self.fenced

    @property
    def fenced(self) -> bool:
        """In a cluster, fenced out of it: another broker took over what this one wrote
        while it was stopped or cut off (it may not write at all any more)."""
        return self.membership is not None and self.membership.fenced is not None

    @property
    def shares_partitions(self) -> bool:
        """In a cluster whose brokers share partitions (``cluster.share.partitions``):
        partitions may be led by other brokers."""
        return self.membership is not None and self.membership.share

    def check_coordinator(self) -> None:
        """Raises: KafkaError: NOT_COORDINATOR on a :attr:`passive` broker (the writer
        coordinates every group and transactional id)."""
        if self.passive:
            raise KafkaError(
                "this broker coordinates nothing: ask FindCoordinator", ErrorCode.not_coordinator
            )

    def leader_epoch(self, topic: TopicName, partition: PartitionId) -> int:
        """The partition's leader epoch: in a cluster its ownership epoch (1 at the first
        claim, +1 at every change of owner, so a takeover raises it), this broker's own
        claim first (the view lags it by up to one lease renewal); 0 outside a cluster
        and before the first claim."""
        membership = self.membership
        if membership is None:
            return 0
        key = (topic, partition)
        ownership = membership.owned.get(key) or membership.view.owners.get(key)
        return 0 if ownership is None else ownership.epoch

    def check_leader_epoch(self, topic: TopicName, partition: PartitionId, named: int) -> int:
        """Check the current leader epoch a Fetch, ListOffsets or OffsetForLeaderEpoch
        request names (-1: none), as Kafka's leaders do; returns the partition's
        (:meth:`leader_epoch`).

        Raises:
            KafkaError: FENCED_LEADER_EPOCH when it is older than the partition's (the
                client's metadata is stale), UNKNOWN_LEADER_EPOCH when newer (this
                broker's is): either way the client refreshes its metadata and retries.
        """
        epoch = self.leader_epoch(topic, partition)
        if named < 0:
            return epoch
        if named < epoch:
            raise KafkaError(
                f"leader epoch {named} is older than the partition's {epoch}",
                ErrorCode.fenced_leader_epoch,
            )
        if named > epoch:
            raise KafkaError(
                f"leader epoch {named} is newer than the partition's {epoch}",
                ErrorCode.unknown_leader_epoch,
            )
        return epoch

    def me(self, listener: str | None = None) -> BrokerInfo:
        """This broker as clients of ``listener`` reach it (None: the first listener)."""
        host, port = self.addresses.get(
            listener or "", (self.advertised_host, self.advertised_port)
        )
        return BrokerInfo(self.node_id, host, port)

    def live_brokers(self, listener: str | None = None) -> list[BrokerInfo]:
        """This broker and, in a cluster, every other live one as the last lease renewal
        saw them (standbys too: clients that no longer know them could not find the next
        writer when this one dies, as aiokafka and kafka-python refresh metadata only
        from the brokers a Metadata response named), by id."""
        if self.membership is None:
            return [self.me(listener)]
        others = [b for b in self.membership.view.brokers if b.broker_id != self.node_id]
        return sorted([self.me(listener), *others], key=lambda b: b.broker_id)

    def writer(self, listener: str | None = None) -> BrokerInfo | None:
        """The broker serving the coordinators and topic changes: this one, or on a
        standby the holder of the writer lease when the last lease renewal looked, if
        it is live (None while there is none: the writer died and no standby took over
        yet)."""
        if not self.passive or self.membership is None:
            return self.me(listener)
        view = self.membership.view
        live = {b.broker_id: b for b in view.brokers if b.broker_id != self.node_id}
        # a fenced writer is never the writer, whatever a view of before its fence says
        return None if view.controller is None else live.get(view.controller)

    @property
    def flush_on_ack(self) -> bool:
        """acks=all waits until the records are durable: an fsync
        (``log.flush.policy=acks``), or an upload to the bucket (``storage.type=s3``,
        whatever the flush policy)."""
        return (
            self.config[keys.LOG_FLUSH_POLICY] == "acks" or self.config[keys.STORAGE_TYPE] == "s3"
        )

    def is_internal(self, name: str) -> bool:
        """``name`` is one of the broker's own topics (:data:`RESERVED_TOPICS`, or a topic
        the store created as internal): clients may read it, never change it."""
        if name in RESERVED_TOPICS:
            return True
        meta = self.store.topic(TopicName(name))
        return meta is not None and meta.internal

    def check_partitions(self, count: int) -> None:
        """Raises:
        InvalidPartitionsError: ``count`` is outside 1..``create.topic.max.partitions``.
        """
        most = self.config[keys.CREATE_TOPIC_MAX_PARTITIONS]
        if not 1 <= count <= most:
            raise InvalidPartitionsError(
                f"partition count must be 1..{most} (create.topic.max.partitions), got {count}"
            )

    def auto_create_room(self) -> int:
        """How many more topics auto-creation may create now (``auto.create.topics.max``
        minus the topics the broker holds that clients see; never negative)."""
        held = len(self.store.topics()) - (self.store.topic(SECURITY_TOPIC) is not None)
        return max(0, self.config[keys.AUTO_CREATE_TOPICS_MAX] - held)

    def auto_create(self, name: TopicName, *, room: int | None = None) -> TopicMeta:
        """Create ``name`` with the broker defaults (auto.create.topics.enable).

        ``room``: :meth:`auto_create_room` if the caller already knows it (a Metadata
        request naming many topics computes it once, not once per name).

        Raises:
            KafkaError: UNKNOWN_TOPIC_OR_PARTITION when auto-creation is off,
                INVALID_TOPIC_EXCEPTION for an invalid or reserved name, POLICY_VIOLATION
                once the broker holds ``auto.create.topics.max`` topics,
                INVALID_PARTITIONS when ``num.partitions`` is above
                ``create.topic.max.partitions``.
        """
        if not self.config[keys.AUTO_CREATE_TOPICS]:
            raise KafkaError(f"unknown topic {name}", ErrorCode.unknown_topic_or_partition)
        if name.startswith("__") or self.is_internal(name):
            raise InvalidTopicError(f"{name}: the name is reserved for internal topics")
        if (self.auto_create_room() if room is None else room) <= 0:
            raise KafkaError(
                f"{name}: not auto-created, the broker holds "
                f"{self.config[keys.AUTO_CREATE_TOPICS_MAX]} topics (auto.create.topics.max)",
                ErrorCode.policy_violation,
            )
        partitions = self.config[keys.NUM_PARTITIONS]
        self.check_partitions(partitions)
        meta = self.store.create_topic(name, partitions, {})
        log.info("topic.auto_created topic=%s partitions=%d", name, meta.partitions)
        return meta

    def partition_for_write(self, name: TopicName, partition: PartitionId) -> PartitionLog:
        """The log to append to. A Produce never creates a topic, as in Kafka: clients
        ask Metadata first, which auto-creates it (checking CREATE).

        Raises:
            KafkaError: UNKNOWN_TOPIC_OR_PARTITION for a topic this broker does not know
                (on a broker that learns topics from the writer, ``refresh_topics``, a
                refresh starts now: the writer may have created it a moment ago, and
                the client retries); what :meth:`Store.partition` raises.
        """
        if self.store.topic(name) is None:
            if self.refresh_topics is not None:
                refresh = asyncio.ensure_future(self.refresh_topics())
                refresh.add_done_callback(retrieve)
            raise KafkaError(f"unknown topic {name}", ErrorCode.unknown_topic_or_partition)
        return self.store.partition(name, partition)


def now_ms() -> int:
    return int(time.time() * 1000)
