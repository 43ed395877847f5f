"""Topics for the admin facade: list, create, describe, alter configs, delete, and the
most recent records of a partition.

Every method runs on the broker's event loop and calls the same domain objects the
Kafka handlers call (the store, :func:`validate_topic_configs`,
:func:`floe.broker.configs.describe_topic`, the group coordinator on delete), so a topic
created here is exactly what CreateTopics would have created. Internal topics
(:meth:`Broker.is_internal`) are described but never deleted, altered or made table
topics (:class:`ForbiddenError`), and their names cannot be created. Reads of the log are
bounded (``MAX_MESSAGES`` records, ``READ_BYTES`` per read).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from floe.admin.errors import BadRequestError, ConflictError, ForbiddenError, NotFoundError
from floe.broker.configs import describe_topic
from floe.broker.core import SECURITY_TOPIC, Broker
from floe.config import broker as keys
from floe.config.tabletopic import PREFIX as TABLE_PREFIX
from floe.config.tabletopic import resolve_table_topic
from floe.config.topic import validate_topic_configs
from floe.errors import ConfigError, KafkaError
from floe.protocol.batch import scan
from floe.protocol.records import decode_batch
from floe.storage.interface import (
    NotCachedError,
    NotOwnerError,
    PartitionLog,
    TopicExistsError,
    TopicMeta,
)
from floe.types import Offset, PartitionId, TopicName

log = logging.getLogger("floe.admin.topics")

MAX_MESSAGES = 200
READ_BYTES = 1 << 20


@dataclass(frozen=True)
class TopicSummary:
    """One topic in the topic list. ``messages`` is the sum of ``log_end - log_start``
    over its partitions (offsets: transaction markers count)."""

    topic: str
    partitions: int
    internal: bool
    messages: int
    log_end_offsets: int
    size_bytes: int
    table_topic: bool


@dataclass(frozen=True)
class PartitionInfo:
    partition: int
    leader: int
    log_start_offset: int
    high_watermark: int
    last_stable_offset: int
    log_end_offset: int
    size_bytes: int


@dataclass(frozen=True)
class ConfigEntry:
    """A topic config with its effective value; ``source`` is ``topic`` (set on the
    topic), ``broker`` (a broker default set in floe.toml) or ``default``."""

    name: str
    value: str | None
    source: str


@dataclass(frozen=True)
class TopicDetail:
    topic: str
    topic_id: str
    internal: bool
    created_ms: int
    partitions: list[PartitionInfo]
    configs: list[ConfigEntry]
    overrides: dict[str, str]
    table_topic: bool


@dataclass(frozen=True)
class Message:
    """One record. ``key``/``value`` are text: decoded through the registry
    (``*_format`` ``avro``/``json``/``protobuf``, with ``*_schema_id``), else UTF-8
    (``text``), else hex (``hex``); ``None`` for a null."""

    partition: int
    offset: int
    timestamp: int
    key: str | None
    key_format: str | None
    key_schema_id: int | None
    value: str | None
    value_format: str | None
    value_schema_id: int | None
    headers: dict[str, str]


Decoder = Callable[[bytes], tuple[str, str, int | None]]
"""``payload -> (text, format, schema id)``: how message bytes become text."""

_SOURCES = {1: "topic", 4: "broker", 5: "default"}


def plain_decode(payload: bytes) -> tuple[str, str, int | None]:
    """UTF-8 text when the bytes are valid UTF-8 without control characters, else hex."""
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError:
        return payload.hex(), "hex", None
    if any(ord(c) < 32 and c not in "\t\n\r" for c in text):
        return payload.hex(), "hex", None
    return text, "text", None


class TopicService:
    """Topic operations over the broker's store (owned by the broker's event loop; no
    state of its own)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.store = broker.store

    def _led_here(self, name: TopicName, p: int) -> PartitionLog | None:
        """The partition's log, or None when another broker of the cluster leads it
        (brokers sharing partitions): its offsets are that broker's to tell."""
        try:
            return self.store.partition(name, PartitionId(p))
        except NotOwnerError:
            return None

    def _meta(self, topic: str) -> TopicMeta:
        """Raises:
        NotFoundError: no such topic.
        """
        meta = self.store.topic(TopicName(topic))
        if meta is None:
            raise NotFoundError(f"unknown topic {topic!r}")
        return meta

    def _refuse_internal(self, meta: TopicMeta, what: str) -> None:
        """Raises:
        ForbiddenError: ``meta`` is an internal topic (the broker's own state).
        """
        if self.broker.is_internal(meta.name):
            log.warning("admin.topic_refused topic=%s reason=internal", meta.name)
            raise ForbiddenError(f"{meta.name!r} is an internal topic (the broker's): {what}")

    def is_table_topic(self, meta: TopicMeta) -> bool:
        broker = {keys.TABLE_TOPIC_NAMESPACE.name: self.broker.config[keys.TABLE_TOPIC_NAMESPACE]}
        try:
            return resolve_table_topic(meta.configs, broker).enable
        except ConfigError:
            return False

    def all(self, *, internal: bool = False) -> list[TopicSummary]:
        """Every topic (``__``-internal ones only when ``internal``), sorted by name."""
        out = []
        for name, meta in sorted(self.store.topics().items()):
            if meta.internal and not internal:
                continue
            messages = ends = size = 0
            for p in range(meta.partitions):
                plog = self._led_here(name, p)
                if plog is None:  # counted by the broker that leads it
                    continue
                messages += plog.log_end_offset - plog.log_start_offset
                ends += plog.log_end_offset
                size += plog.size_bytes
            out.append(
                TopicSummary(
                    name,
                    meta.partitions,
                    meta.internal,
                    messages,
                    ends,
                    size,
                    self.is_table_topic(meta),
                )
            )
        return out

    def create(
        self,
        topic: str,
        partitions: int,
        configs: Mapping[str, str],
        replication_factor: int = 1,
    ) -> TopicDetail:
        """Create a topic, as CreateTopics does.

        Raises:
            BadRequestError: a bad or reserved (internal) name, a partition count outside
                1..``create.topic.max.partitions``, a replication factor or config (the
                config error's message).
            ConflictError: the topic exists.
        """
        if topic.startswith("__") or self.broker.is_internal(topic):
            raise BadRequestError(f"{topic!r} is a name reserved for internal topics")
        try:
            self.broker.check_partitions(partitions)
        except KafkaError as exc:
            raise BadRequestError(str(exc)) from None
        if replication_factor not in (-1, 1):
            raise BadRequestError(
                f"replication factor must be 1 (one broker), got {replication_factor}"
            )
        try:
            valid = validate_topic_configs(configs)
            self.broker.check_table(topic, valid)
        except ConfigError as exc:
            raise BadRequestError(str(exc)) from None
        try:
            self.store.create_topic(TopicName(topic), partitions, valid)
        except TopicExistsError:
            raise ConflictError(f"topic {topic!r} already exists") from None
        except KafkaError as exc:
            raise BadRequestError(str(exc)) from None
        log.info("admin.topic_created topic=%s partitions=%d configs=%s", topic, partitions, valid)
        return self.describe(topic)

    def describe(self, topic: str) -> TopicDetail:
        """Partitions with offsets and sizes, every config with its source.

        Raises:
            NotFoundError: no such topic.
        """
        meta = self._meta(topic)
        parts = []
        for p in range(meta.partitions):
            plog = self._led_here(meta.name, p)
            if plog is None:  # another broker leads it: its offsets are unknown here
                membership = self.broker.membership
                owner = membership.owner(meta.name, PartitionId(p)) if membership else None
                parts.append(PartitionInfo(p, -1 if owner is None else owner, -1, -1, -1, -1, 0))
                continue
            parts.append(
                PartitionInfo(
                    p,
                    self.broker.node_id,
                    plog.log_start_offset,
                    plog.high_watermark,
                    plog.last_stable_offset,
                    plog.log_end_offset,
                    plog.size_bytes,
                )
            )
        configs = [
            ConfigEntry(e["name"], e["value"], _SOURCES.get(e["config_source"], "default"))
            for e in describe_topic(self.broker, meta)
        ]
        return TopicDetail(
            meta.name,
            str(meta.topic_id),
            meta.internal,
            meta.created_ms,
            parts,
            configs,
            dict(meta.configs),
            self.is_table_topic(meta),
        )

    def alter(self, topic: str, set_: Mapping[str, str], delete: Sequence[str] = ()) -> TopicDetail:
        """Set and delete config overrides (like IncrementalAlterConfigs SET/DELETE).

        Raises:
            NotFoundError: no such topic.
            ForbiddenError: an internal topic.
            BadRequestError: an unknown key or an invalid value.
        """
        meta = self._meta(topic)
        self._refuse_internal(meta, "its configs cannot be altered")
        new: dict[str, str] = dict(meta.configs)
        for name in delete:
            new.pop(name, None)
        new.update(set_)
        try:
            valid = validate_topic_configs(new)
            self.broker.check_table(meta.name, valid)
        except ConfigError as exc:
            raise BadRequestError(str(exc)) from None
        self.store.set_topic_configs(meta.name, valid)
        log.info("admin.topic_configs_altered topic=%s configs=%s", topic, valid)
        return self.describe(topic)

    def set_table(self, topic: str, enable: bool, settings: Mapping[str, str]) -> TopicDetail:
        """Enable or disable the table topic and set ``table.topic.*`` settings (keys
        given with or without the ``table.topic.`` prefix).

        Raises:
            NotFoundError, ForbiddenError, BadRequestError: as :meth:`alter`.
        """
        wanted = {
            (k if k.startswith(TABLE_PREFIX) else TABLE_PREFIX + k): v for k, v in settings.items()
        }
        wanted[TABLE_PREFIX + "enable"] = "true" if enable else "false"
        return self.alter(topic, wanted)

    def delete(self, topic: str) -> None:
        """Delete a topic (its table, if any, is kept), as DeleteTopics does.

        Raises:
            NotFoundError: no such topic.
            ForbiddenError: an internal topic.
        """
        meta = self._meta(topic)
        self._refuse_internal(meta, "it cannot be deleted")
        self.store.delete_topic(meta.name)
        if self.broker.groups is not None:
            self.broker.groups.topic_deleted(meta.name)
        log.info("admin.topic_deleted topic=%s", topic)

    def messages(
        self, topic: str, partition: int | None, limit: int, decode: Decoder = plain_decode
    ) -> list[Message]:
        """The newest ``limit`` records (at most :data:`MAX_MESSAGES`) of one partition
        or of each partition, newest first; transaction markers are skipped.

        Raises:
            NotFoundError: no such topic or partition.
            BadRequestError: ``limit`` out of range.
        """
        if not 1 <= limit <= MAX_MESSAGES:
            raise BadRequestError(f"limit must be 1..{MAX_MESSAGES}, got {limit}")
        if topic == SECURITY_TOPIC:  # the users' salted keys: never shown (floe.broker.authz)
            raise NotFoundError(f"unknown topic {topic!r}")
        meta = self._meta(topic)
        if partition is not None and not 0 <= partition < meta.partitions:
            raise NotFoundError(f"topic {topic!r} has no partition {partition}")
        wanted = [partition] if partition is not None else list(range(meta.partitions))
        out: list[Message] = []
        for p in wanted:
            if self._led_here(meta.name, p) is not None:  # else another broker's to read
                out += self._tail(meta.name, PartitionId(p), limit, decode)
        out.sort(key=lambda m: (m.timestamp, m.offset), reverse=True)
        return out[:limit]

    def _tail(self, name: TopicName, p: PartitionId, limit: int, decode: Decoder) -> list[Message]:
        plog = self.store.partition(name, p)
        start, end = plog.log_start_offset, plog.high_watermark
        first = Offset(max(start, end - limit))
        out: list[Message] = []
        offset = first
        while offset < end and len(out) < limit:
            try:
                data = plog.read(offset, READ_BYTES, min_one=True)
            except NotCachedError:  # only in the bucket: the console shows the cache only
                offset = plog.local_log_start_offset
                continue
            headers = scan(data, verify_crc=False, partial_ok=True)
            if not headers:
                break
            for header in headers:
                offset = Offset(max(offset, header.last_offset + 1))
                if header.is_control:
                    continue
                for r in decode_batch(data, header):
                    if first <= r.offset < end:
                        out.append(_message(int(p), r, decode))
        return out[-limit:]


def _part(payload: bytes | None, decode: Decoder) -> tuple[str | None, str | None, int | None]:
    if payload is None:
        return None, None, None
    return decode(bytes(payload))


def _message(partition: int, r: Any, decode: Decoder) -> Message:
    key, key_format, key_id = _part(r.key, decode)
    value, value_format, value_id = _part(r.value, decode)
    headers = {}
    for name, raw in r.headers or ():
        headers[str(name)] = "" if raw is None else plain_decode(bytes(raw))[0]
    return Message(
        partition,
        r.offset,
        r.timestamp,
        key,
        key_format,
        key_id,
        value,
        value_format,
        value_id,
        headers,
    )
