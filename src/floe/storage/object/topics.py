"""The topics and the cluster id in the bucket, and which broker leads which partition.

The bucket holds the topic metadata (one document, :data:`~.layout.TOPICS_KEY`, written
whole by the writer after each change) and the cluster id the log was first written
under (:data:`~.layout.CLUSTER_ID_KEY`, written once). Nothing here is written by a
fenced broker: each write checks the WAL writer's fence first. When the cluster's
brokers share partitions, a new user topic's partitions go round the live brokers; an
internal topic's, a dead-letter topic's and those of a table topic with a dead-letter
topic or routed by record name stay with the writer (:func:`stays_with_writer`).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence

from floe.config.tabletopic import (
    DLQ_SOURCE,
    ERRORS_DLQ_TOPIC,
    ROUTE_BY,
    canonical_name,
    is_table_topic_key,
)
from floe.config.tabletopic import ENABLE as TABLE_TOPIC_ENABLE
from floe.errors import ConfigError
from floe.storage.interface import StorageError, TopicMeta, WriteGuard
from floe.storage.local.meta import topics_doc
from floe.storage.object import layout
from floe.storage.object.bucket import Bucket, describe
from floe.storage.object.state import BucketState
from floe.storage.object.wal import WalWriter
from floe.types import PartitionId, TopicName


def stored_cluster_id(bucket: Bucket) -> str | None:
    """The cluster id recorded in ``bucket``, or None when it has none yet."""
    try:
        return bucket.get(layout.CLUSTER_ID_KEY).decode().strip() or None
    except FileNotFoundError:
        return None


def adopt_cluster_id(bucket: Bucket, wal: WalWriter, local: str, configured: str) -> str:
    """The bucket's cluster id, or ``local`` recorded there when it has none yet (see
    :meth:`~.store.ObjectStore.adopt_cluster_id`).

    Raises:
        ConfigError: ``configured`` is set and differs from the bucket's.
        StorageError: the bucket cannot be read or written, or this broker is fenced.
    """
    try:
        stored = stored_cluster_id(bucket)
    except Exception as exc:
        raise StorageError(f"cannot read the cluster id in the bucket: {describe(exc)}") from exc
    if stored:
        if configured and configured != stored:
            raise ConfigError(
                f"cluster.id {configured!r} differs from {stored!r}, the id of the log in "
                f"{bucket.description}"
            )
        return stored
    wal.check_fenced()
    try:
        bucket.put(layout.CLUSTER_ID_KEY, local.encode())
    except Exception as exc:
        raise StorageError(f"cannot record the cluster id in the bucket: {describe(exc)}") from exc
    return local


def put_topics(bucket: Bucket, wal: WalWriter, topics: Mapping[TopicName, TopicMeta]) -> None:
    """Write the topic metadata to the bucket.

    Raises:
        StorageError: the PUT failed, or this broker is fenced.
    """
    wal.check_fenced()
    try:
        bucket.put(layout.TOPICS_KEY, topics_doc(topics))
    except Exception as exc:
        raise StorageError(
            f"cannot write the topic metadata to the bucket: {describe(exc)}"
        ) from exc


SPREAD_INTERNAL_TOPICS = frozenset(
    {TopicName("__consumer_offsets"), TopicName("__transaction_state")}
)
"""Internal topics whose partitions are spread and balanced like any other: each
partition's leader coordinates its groups (``floe.coordinator.group``) or its
transactional ids (``floe.coordinator.txn``)."""


def stays_with_writer(meta: TopicMeta) -> bool:
    """Partitions the writer leads whoever else is live: internal topics' (but those of
    :data:`SPREAD_INTERNAL_TOPICS`), dead-letter topics' (the table coordinators, on the
    writer, write them), and those of table topics with a dead-letter topic (their
    coordinator copies the skipped records from the source log) or routed by record
    name (their route tables share retention holds on the writer). Other table
    topics' partitions are spread like any: their coordinator reads them from their
    leaders (``floe.tabletopic.placement``), which hold them for the table
    (``floe.tabletopic.holds``)."""
    if meta.internal:
        return meta.name not in SPREAD_INTERNAL_TOPICS
    table = {canonical_name(k): v.strip() for k, v in meta.configs.items() if is_table_topic_key(k)}
    enabled = table.get(TABLE_TOPIC_ENABLE.name, "").lower() == "true"
    routed = table.get(ROUTE_BY.name, "") == "record_name"
    dead_letters = table.get(ERRORS_DLQ_TOPIC.name, "") != ""
    return (enabled and (routed or dead_letters)) or table.get(DLQ_SOURCE.name, "") != ""


def partitions(
    topics: Iterable[TopicMeta],
    start: int = 0,
    holds: Callable[[TopicName, PartitionId], bool] | None = None,
) -> list[tuple[TopicName, PartitionId]]:
    """Every partition of ``topics`` from ``start`` on (that ``holds`` says is held
    here), for the write guard."""
    return [
        (m.name, PartitionId(p))
        for m in topics
        for p in range(start, m.partitions)
        if holds is None or holds(m.name, PartitionId(p))
    ]


def take_at_open(
    guard: WriteGuard,
    state: BucketState,
    me: int,
    *,
    member: bool,
    holds: Callable[[TopicName, int], bool] | None,
) -> tuple[dict[str, int], Callable[[TopicName, int], bool] | None]:
    """Fence, at open, the WAL streams this broker takes over and claim the partitions
    it leads: the WAL streams fenced, with the epoch of each, and which partitions it
    leads (``holds`` when its brokers share none: the writer alone leads them all).

    A member fences only its own stream (a dead broker's are the writer's to take
    over); the writer its own and every stream no live member writes, including those
    of dead owners that never wrote one. The writer alone claims every partition
    before its end is read; with shared partitions see :func:`claim_at_open`."""
    every = partitions((state.topics or {}).values())
    streams = {str(me)}
    if not member:
        streams |= state.streams | {str(guard.owner(*k)) for k in every}
    fences = guard.fence_streams(sorted(streams - {"None"}))
    if guard.share:
        holds = claim_at_open(guard, every, me, fences, member=member)
    else:
        guard.claim(every)
    return fences, holds


def claim_at_open(
    guard: WriteGuard,
    every: Iterable[tuple[TopicName, PartitionId]],
    me: int,
    fenced: Collection[str],
    *,
    member: bool,
) -> Callable[[TopicName, int], bool]:
    """Claim, at a new ownership epoch, the partitions of ``every`` this broker leads
    from now on: a ``member`` those the metadata store says it owns (a run of it before
    a crash may have led them), the writer those of nobody, of itself, or of a broker
    whose stream it just fenced (a dead one: it acknowledges nothing any more, and
    cannot come back as the same run). Only what it won is opened."""
    mine = [
        k
        for k in every
        if (owner := guard.owner(*k)) == me
        or (not member and (owner is None or str(owner) in fenced))
    ]
    won = set(guard.claim(mine))
    return lambda name, p: (name, PartitionId(p)) in won


def spread(
    meta: TopicMeta, new: Iterable[tuple[TopicName, PartitionId]], brokers: Sequence[int], me: int
) -> dict[tuple[TopicName, PartitionId], int]:
    """The partitions of ``new`` (of ``meta``) that other brokers lead, with their
    leader: round the live ``brokers``, from one the topic's name picks."""
    first = zlib.crc32(meta.name.encode())
    assigned: dict[tuple[TopicName, PartitionId], int] = {}
    for key in new:
        owner = brokers[(first + key[1]) % len(brokers)]
        if owner != me:
            assigned[key] = owner
    return assigned
