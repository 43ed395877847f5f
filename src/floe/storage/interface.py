"""The Kafka-level storage interface the broker programs against.

Two backends implement it: local segmented logs (:mod:`floe.storage.local`) and
object storage with a local cache (:mod:`floe.storage.object`). The broker never
touches files: it calls these methods only.

Ownership: a store and its logs are owned by the broker's event loop; methods are not
thread-safe and, except for :meth:`Store.wait_durable` and :meth:`Store.sync`, never
block on fsync.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import uuid
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from floe.config.topic import ResolvedTopicConfig
from floe.errors import ErrorCode, KafkaError
from floe.protocol.batch import BatchHeader
from floe.storage.producer_state import AbortedTxn, ProducerEntry
from floe.types import Offset, PartitionId, TimestampMs, TopicName


class UnknownTopicOrPartitionError(KafkaError):
    code = ErrorCode.unknown_topic_or_partition


class TopicExistsError(KafkaError):
    code = ErrorCode.topic_already_exists


class InvalidTopicError(KafkaError):
    code = ErrorCode.invalid_topic_exception


class InvalidPartitionsError(KafkaError):
    code = ErrorCode.invalid_partitions


class OffsetOutOfRangeError(KafkaError):
    code = ErrorCode.offset_out_of_range


class StorageError(KafkaError):
    """An I/O failure in the log (disk full, permission, unreadable segment)."""

    code = ErrorCode.kafka_storage_error


class NotOwnerError(StorageError):
    """This broker may not write the partition now: in a cluster its lease in the
    metadata store lapsed or another broker owns the partition. Clients refresh their
    metadata and retry (NOT_LEADER_OR_FOLLOWER)."""

    code = ErrorCode.not_leader_or_follower


class NotServedYetError(NotOwnerError):
    """This broker owns the partition and is opening it (restoring it after a takeover
    or a move): ``opened`` is done once it serves it, or once the open failed."""

    def __init__(self, message: str, opened: asyncio.Future[None]) -> None:
        super().__init__(message)
        self.opened = opened


class NotControllerError(KafkaError):
    """This broker may not change topics: in a cluster only the writer does. Admin
    clients refresh their metadata and ask the controller it names (NOT_CONTROLLER)."""

    code = ErrorCode.not_controller


class WriteGuard(Protocol):
    """Who may write to shared storage: implemented by the cluster's membership
    (:mod:`floe.cluster.membership`), absent for a broker without a cluster."""

    share: bool
    """Whether the cluster's brokers share partitions (``cluster.share.partitions``):
    each leads those it owns, not the writer alone."""

    fenced: str | None
    """Why this broker may not write for the cluster any more (None: it may). A fenced
    broker commits nothing; its commits only say what the log holds of its records."""

    def join(self) -> int:
        """Join the cluster as a member that writes its own WAL stream, without the
        writer lease (blocking); returns the epoch it writes into its WAL keys.

        Raises:
            FloeError: the metadata store cannot be reached, or refused this broker.
        """
        ...

    def acquire(self) -> int:
        """Wait until this broker may write the bucket (blocking: the store's start-up,
        before it reads the bucket); returns the epoch it writes into its WAL keys, its
        WAL stream's (grows with every broker that takes the stream over).

        Raises:
            FloeError: the metadata store cannot be reached, or refused this broker.
        """
        ...

    def fence_streams(self, streams: Iterable[str]) -> dict[str, int]:
        """The epoch at which to record the takeover of each WAL stream (a broker id),
        above every epoch it was written at; this broker's own stream at its own epoch
        (a run before a crash may have left a PUT in flight). Blocks while a former
        writer's stream lease lapses (up to one session timeout).

        Raises:
            FloeError: the metadata store cannot be reached, or a stream lease is still
                renewed.
        """
        ...

    def owner(self, topic: TopicName, partition: PartitionId) -> int | None:
        """The broker that owned the partition when this one took over (None: none)."""
        ...

    def ownership(self, topic: TopicName, partition: PartitionId) -> tuple[int, int] | None:
        """The partition's ``(owner, ownership epoch)`` as last seen (None: no owner)."""
        ...

    def epochs(
        self, partitions: Iterable[tuple[TopicName, PartitionId]]
    ) -> concurrent.futures.Future[dict[tuple[TopicName, PartitionId], int]]:
        """The ownership epoch of each of ``partitions`` this broker owns (after every
        claim asked for before)."""
        ...

    def commit(
        self, ends: Mapping[tuple[TopicName, PartitionId], tuple[int | None, int]]
    ) -> concurrent.futures.Future[dict[tuple[TopicName, PartitionId], int | None]]:
        """The commit point: make each partition's records up to its new end part of
        its log, from the committed end this broker last saw (``{partition: (expected,
        end)}``); the result maps each to its new committed end, or, when this broker
        does not own it any more (the commit was refused), to what the log holds of its
        records (where its ownership epoch ended) or None when that is not known. The
        future raises ``FloeError`` when the metadata store did not answer (it may or
        may not have applied the commit: the next one finds out)."""
        ...

    def committed(self) -> dict[tuple[TopicName, PartitionId], int]:
        """Every partition's committed end in the metadata store (blocking).

        Raises:
            FloeError: the metadata store cannot be reached.
        """
        ...

    def epoch_ends(
        self, epochs: Mapping[tuple[TopicName, PartitionId], Collection[int]]
    ) -> dict[tuple[TopicName, PartitionId], dict[int, int]]:
        """Where each of the ownership ``epochs`` of each partition ended (its committed
        end when the next epoch was claimed), for those the metadata store still knows
        (blocking).

        Raises:
            FloeError: the metadata store cannot be reached.
        """
        ...

    def set_manifests(
        self, manifests: Mapping[tuple[TopicName, PartitionId], str]
    ) -> concurrent.futures.Future[dict[tuple[TopicName, PartitionId], bool]]:
        """Point each partition at its manifest (``{partition: bucket key}``) in the
        metadata store, at the ownership epoch this broker owns it at; the result maps
        each to True (recorded) or False (refused: this broker does not own it at that
        epoch any more, or this broker is fenced and nothing was sent). The future
        raises ``FloeError`` when the metadata store did not answer (the pointers may or
        may not have been recorded)."""
        ...

    def manifests(self) -> dict[tuple[TopicName, PartitionId], str]:
        """Every partition's manifest key in the metadata store (blocking).

        Raises:
            FloeError: the metadata store cannot be reached.
        """
        ...

    def adopt(self, partitions: Iterable[tuple[TopicName, PartitionId]]) -> None:
        """Record this broker as the owner of ``partitions`` without waiting."""
        ...

    def claim(
        self, partitions: Iterable[tuple[TopicName, PartitionId]]
    ) -> list[tuple[TopicName, PartitionId]]:
        """Record this broker as the owner of ``partitions`` at a new ownership epoch
        (blocking), except those another live broker owns when brokers share
        partitions; returns those it owns.

        Raises:
            FloeError: the metadata store cannot be reached.
        """
        ...

    def assign(self, owners: Mapping[tuple[TopicName, PartitionId], int]) -> None:
        """Record other brokers as the owners of new partitions, without waiting (they
        claim them again, at a new epoch, when they open them)."""
        ...

    def refresh(self) -> None:
        """Read the live brokers, ownership and assignments now (blocking: call it from a
        worker thread).

        Raises:
            FloeError: the metadata store cannot be reached.
        """
        ...

    def live(self) -> list[int]:
        """The ids of the live brokers (this one too) as last seen, ascending."""
        ...

    def assigned(self, topic: TopicName, partition: PartitionId) -> int | None:
        """The broker the writer wants to lead the partition, as last seen (None: no
        wish)."""
        ...

    def plan(
        self, moves: Mapping[tuple[TopicName, PartitionId], int]
    ) -> concurrent.futures.Future[None]:
        """Record where partitions should be led (the writer's balancing), without
        waiting (the future is done once they are recorded); their owners hand them
        over."""
        ...

    def report_load(self, load: Mapping[tuple[TopicName, PartitionId], float]) -> None:
        """Publish this broker's bytes per second of each partition it leads, without
        waiting."""
        ...

    def loads(self) -> tuple[dict[tuple[TopicName, PartitionId], float], set[int]]:
        """Each partition's bytes per second as its live owner last reported it (a
        partition without a report is absent), and the live brokers that reported
        (those serving: a joining broker reports once its store is open); blocking.

        Raises:
            FloeError: the metadata store cannot be reached.
        """
        ...

    def hand_over(self, key: tuple[TopicName, PartitionId], to: int) -> bool:
        """Make ``to`` the owner of a partition this broker owns and released
        (blocking); False when it did not own it any more.

        Raises:
            FloeError: the metadata store cannot be reached.
        """
        ...

    def forget(self, topic: TopicName) -> None:
        """A deleted topic's partitions are nobody's (without waiting)."""
        ...

    def check(self) -> None:
        """Raises: NotOwnerError: nothing may be written or acknowledged now."""
        ...


class NotCachedError(Exception):
    """The answer needs data that is only in the object store (it left the local
    cache): not an error for the client. The event loop must not wait on the bucket, so
    the caller awaits ``load()``, which returns what the synchronous call would have
    (and raises what it would have)."""

    def __init__(self, what: str, load: Callable[[], Awaitable[Any]]) -> None:
        super().__init__(what)
        self.load = load


@dataclass(frozen=True)
class TopicMeta:
    """Durable description of one topic.

    Attributes:
        configs: only the overrides set on the topic, in Kafka string form.
    """

    name: TopicName
    topic_id: uuid.UUID
    partitions: int
    configs: Mapping[str, str] = field(default_factory=dict)
    internal: bool = False
    created_ms: int = 0


@dataclass(frozen=True)
class AppendResult:
    base_offset: Offset
    last_offset: Offset
    log_append_time: TimestampMs
    """The stamped time when the topic uses LogAppendTime, else -1."""
    log_start_offset: Offset


class PartitionLog(Protocol):
    """One partition's log. Offsets are dense and start at ``log_start_offset``."""

    @property
    def topic(self) -> TopicName: ...
    @property
    def partition(self) -> PartitionId: ...
    @property
    def log_start_offset(self) -> Offset: ...
    @property
    def local_log_start_offset(self) -> Offset:
        """The first offset this broker's disk holds (KIP-405's local log start): the
        log start, or above it when older records are in the object store only."""
        ...

    @property
    def latest_tiered_offset(self) -> Offset:
        """The last offset the object store holds (KIP-1005's LATEST_TIERED); the log
        start minus one when there is no object store or it holds nothing yet."""
        ...

    @property
    def log_end_offset(self) -> Offset:
        """The offset the next appended record gets."""
        ...

    @property
    def high_watermark(self) -> Offset:
        """Offsets below this are readable by consumers (single node: the log end)."""
        ...

    @property
    def last_stable_offset(self) -> Offset:
        """The first offset of the oldest open transaction, else the high watermark:
        read_committed consumers see only offsets below it."""
        ...

    @property
    def durable_offset(self) -> Offset:
        """Every offset below it is fsynced (at most the log end): a power loss
        cannot take it back."""
        ...

    @property
    def durability_failure(self) -> ErrorCode:
        """What acks=all records appended here are answered with when the wait for
        their durability failed: whether they are lost (KAFKA_STORAGE_ERROR: the log
        went offline), not part of the log (NOT_LEADER_OR_FOLLOWER: another broker
        took the partition over), or may still become durable
        (NOT_ENOUGH_REPLICAS_AFTER_APPEND: clients retry them with the same sequence
        numbers, never as new records)."""
        ...

    @property
    def size_bytes(self) -> int: ...
    @property
    def config(self) -> ResolvedTopicConfig: ...

    @property
    def retention_hold(self) -> Offset | None:
        """See :meth:`set_retention_hold`; None when nothing is held."""
        ...

    def set_retention_hold(self, offset: Offset | None) -> None:
        """Keep time/size retention and compaction from deleting or rewriting any
        segment holding an offset >= ``offset`` (a table topic's data not yet in its
        table); None releases the hold. DeleteRecords is not held.

        Raises:
            ValueError: a negative offset.
        """
        ...

    @property
    def held_bytes(self) -> int:
        """Bytes the last retention run would have deleted but kept because of the
        hold (0 when nothing is held back)."""
        ...

    def end_for_bytes(self, start: Offset, end: Offset, max_bytes: int) -> Offset:
        """The largest batch boundary ``e`` in ``(start, end]`` (``end`` counts as one)
        such that the batches from the one holding ``start`` up to ``e`` span at most
        ``max_bytes`` bytes of log, but always at least the batch holding ``start``: how
        far one bounded read of ``[start, end)`` should go. Cheap enough for the event
        loop: no whole segment is read.

        Raises:
            ValueError: an empty range (``start >= end``).
        """
        ...

    def aborted_transactions(self, start: Offset, end: Offset) -> list[AbortedTxn]:
        """Aborted transactions overlapping offsets [start, end) (for read_committed
        fetches)."""
        ...

    def producers(self) -> list[ProducerEntry]:
        """The idempotent and transactional producers this partition remembers."""
        ...

    def append(self, buf: bytearray, headers: list[BatchHeader], now_ms: int) -> AppendResult:
        """Append validated batches (``headers`` from :func:`floe.protocol.batch.scan` of
        ``buf``): assigns offsets by patching each header in ``buf``, stamps
        LogAppendTime when configured, writes the bytes to the OS (no fsync), updates
        indexes, rolls segments.

        A single batch with a producer id is first checked against the partition's
        producer state: a retried duplicate appends nothing and returns the offsets it
        got the first time.

        Raises:
            InvalidRecordError: a null key on a compacted topic.
            OutOfOrderSequenceError: a sequence gap (or a new epoch not starting at 0).
            InvalidProducerEpochError: an epoch older than the producer's.
            StorageError: the write failed; nothing is acknowledged.
        """
        ...

    def read(self, offset: Offset, max_bytes: int, *, min_one: bool = True) -> bytes:
        """Whole batches from the one containing ``offset``, at most ``max_bytes``
        (but at least one batch when ``min_one``); ``b""`` at the log end.

        Raises:
            OffsetOutOfRangeError: ``offset`` < log start or > log end.
            NotCachedError: the batches are in the object store only.
        """
        ...

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[Offset, TimestampMs] | None:
        """The first record with timestamp >= ``timestamp_ms``, with its timestamp;
        ``None`` when there is none.

        Raises:
            NotCachedError: the answer is in the object store only.
        """
        ...

    def max_timestamp(self) -> tuple[Offset, TimestampMs] | None:
        """The record with the largest timestamp (first such), ``None`` when empty.

        Raises:
            NotCachedError: the answer is in the object store only.
        """
        ...

    def delete_records(self, before: Offset) -> Offset:
        """Advance the log start offset to ``before`` (-1: the high watermark); returns
        the new log start offset.

        Raises:
            OffsetOutOfRangeError: ``before`` beyond the high watermark.
        """
        ...


class Store(Protocol):
    """All topics and partitions of a broker."""

    def topics(self) -> Mapping[TopicName, TopicMeta]: ...
    def topic(self, name: TopicName) -> TopicMeta | None: ...
    def topic_by_id(self, topic_id: uuid.UUID) -> TopicMeta | None: ...

    def create_topic(
        self,
        name: TopicName,
        partitions: int,
        configs: Mapping[str, str],
        *,
        internal: bool = False,
    ) -> TopicMeta:
        """Create and durably record a topic (configs already validated).

        Raises:
            TopicExistsError, InvalidTopicError, InvalidPartitionsError.
        """
        ...

    def delete_topic(self, name: TopicName) -> None:
        """Remove a topic and its data. Raises UnknownTopicOrPartitionError."""
        ...

    def create_partitions(self, name: TopicName, total: int) -> TopicMeta:
        """Grow a topic to ``total`` partitions. Raises InvalidPartitionsError when
        ``total`` is not larger than the current count."""
        ...

    def set_topic_configs(self, name: TopicName, configs: Mapping[str, str]) -> TopicMeta:
        """Replace a topic's overrides (validated) and apply them to its open logs."""
        ...

    def partition(self, name: TopicName, partition: PartitionId) -> PartitionLog:
        """Raises UnknownTopicOrPartitionError."""
        ...

    def topic_config(self, name: TopicName) -> ResolvedTopicConfig: ...

    async def wait_durable(self, logs: Iterable[PartitionLog]) -> None:
        """Return once everything appended to ``logs`` so far is fsynced, as the flush
        policy requires it (under ``log.flush.policy=interval``: at once; see
        :meth:`sync`). Concurrent callers share fsyncs (group commit).

        Raises:
            StorageError: the fsync failed.
        """
        ...

    async def sync(self, logs: Iterable[PartitionLog]) -> None:
        """Fsync everything appended to ``logs`` so far now, whatever the flush policy
        (sharing rounds with :meth:`wait_durable`), so ``durable_offset`` reaches the
        log end.

        Raises:
            StorageError: the fsync failed.
        """
        ...

    def run_maintenance(self, now_ms: int) -> None:
        """Retention, segment rolling by age, and compaction, all on the calling thread
        (tests and tools)."""
        ...

    async def maintain(self, now_ms: int) -> None:
        """The same as :meth:`run_maintenance`, with the blocking work (compaction, file
        deletion, checkpoints) off the event loop while appends and reads go on; called
        periodically by the broker."""
        ...

    def log_dir(self) -> str: ...

    def close(self) -> None:
        """Flush and close every file; the next open is a clean start."""
        ...
