"""What the object-storage engine keeps in its bucket, and how the objects are encoded
(no I/O here).

Keys, under ``storage.s3.prefix``::

    topics.json                                      every topic (the local snapshot format)
    cluster.id                                       the cluster id of the log (tables record it)
    wal/<broker>/<20-digit sequence>.wal             a WAL object of broker ``<broker>``'s
                                                     stream: many partitions' batches
    wal/<broker>/<20-digit sequence>-<epoch>.wal     the same in a cluster, ``epoch`` the
                                                     broker's stream lease's
    wal-floor/<broker>                               no sequence of that stream below it is
                                                     used again
    takeover/<broker>/<20-digit epoch>               the first sequence of the stream that
                                                     was recorded as its next when
                                                     ``epoch`` took it over: an older
                                                     epoch's WAL object of the stream at or
                                                     after it was written by a broker that
                                                     had lost its lease
    data/<topic id>/<partition>/<base>-<end>_<ts>.log one partition's batches [base, end),
                                                     ``ts`` their largest timestamp
    data/<topic id>/<partition>/log-start            its log start offset (DeleteRecords)
    data/<topic id>/<partition>/<offset>.snapshot    its producer state as of ``offset``
                                                     (with a bounded cache: a restore
                                                     starts there)
    data/<topic id>/<partition>/<20-digit ns>-<broker>.manifest
                                                     in a cluster, the partition's objects
                                                     and snapshots as one owner's upload
                                                     pass left them; the metadata store
                                                     names the one that counts

Every broker writes its own WAL stream (named by its ``node.id``), so that brokers can
write one bucket side by side; sequence numbers, the floor and takeover records are per
stream. Buckets written before streams existed hold one unnamed stream
(``wal/<sequence>[-<epoch>].wal``, ``wal-floor``, ``takeover/<epoch>``): it is read,
fenced and emptied like the others, and never written to again.

A WAL object is ``MAGIC``, a 4-byte index length, the index (JSON: one entry per
partition it holds, ``[topic id, partition, base, end, position, length, epoch]`` with
the position relative to the data and the partition's ownership epoch, 0 outside a
cluster; objects from before epochs were recorded have six fields), then the data:
whole record batches exactly as the partition's log holds them (offsets assigned, CRCs
intact). A partition object is the batches alone. Offsets in keys are zero-padded so
that keys sort by offset.

Topic ids, not names, name the data: a topic deleted and created again under the same
name never sees the old topic's objects.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import orjson

from floe.protocol.batch import LOG_OVERHEAD
from floe.storage.interface import StorageError

TOPICS_KEY = "topics.json"
CLUSTER_ID_KEY = "cluster.id"
WAL_FLOOR_PREFIX = "wal-floor"
"""``wal-floor/<broker>``: the next WAL sequence number of that stream at least (deleted
WAL objects' numbers are never reused, so that a second broker writing the stream
collides with the first's next upload)."""
WAL_PREFIX = "wal/"
TAKEOVER_PREFIX = "takeover/"
DATA_PREFIX = "data/"
LOG_START = "log-start"
SNAPSHOT_SUFFIX = ".snapshot"
MANIFEST_SUFFIX = ".manifest"
MAGIC = b"FLOEWAL1"
_LEN = struct.Struct(">I")
BATCH_PREFIX = struct.Struct(">qi")  # baseOffset, batchLength
_LAST_DELTA = struct.Struct(">i")
_LAST_DELTA_AT = 23  # baseOffset 8, length 4, epoch 4, magic 1, crc 4, attributes 2
BATCH_HEAD_BYTES = _LAST_DELTA_AT + _LAST_DELTA.size
"""Bytes from a batch's start that hold what :func:`batch_head` reads."""
_MAX_TIMESTAMP = struct.Struct(">q")
_MAX_TIMESTAMP_AT = 35  # ... lastOffsetDelta 4, baseTimestamp 8


class CorruptObjectError(StorageError):
    """An object in the bucket is not what this engine wrote (truncated, foreign)."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One partition's batches ``[base, end)`` inside a WAL object, at ``position``
    (from the data's start) for ``length`` bytes."""

    topic_id: uuid.UUID
    partition: int
    base: int
    end: int
    position: int
    length: int
    epoch: int = 0
    """The partition's ownership epoch its writer held (0: outside a cluster, or an
    object from before epochs were recorded)."""


@dataclass(frozen=True, slots=True)
class PartObject:
    """A partition object: the batches of offsets ``[base, end)``, the largest timestamp
    among them ``max_timestamp`` (-1: none, or a key from before it was recorded)."""

    key: str
    base: int
    end: int
    size: int
    max_timestamp: int = -1

    @classmethod
    def of(
        cls, topic_id: uuid.UUID, partition: int, data: bytes, base: int, end: int
    ) -> PartObject:
        """The object that holds ``data`` (whole batches of ``[base, end)``)."""
        ts = max_timestamp(data)
        return cls(part_key(topic_id, partition, base, end, ts), base, end, len(data), ts)


def wal_key(stream: str, sequence: int, epoch: int = 0) -> str:
    """A WAL object's key in ``stream`` (a broker's id; "" the unnamed stream of the
    layout before streams); ``epoch`` 0 (a broker without a cluster) adds nothing."""
    suffix = f"-{epoch}" if epoch else ""
    return f"{wal_folder(stream)}{sequence:020d}{suffix}.wal"


def wal_folder(stream: str) -> str:
    """The prefix of ``stream``'s WAL keys (the unnamed stream's holds the others')."""
    return f"{WAL_PREFIX}{stream}/" if stream else WAL_PREFIX


def parse_wal_key(key: str) -> tuple[str, int, int] | None:
    """The stream, sequence number and epoch (0: none) of a WAL object's key,
    None for any other key."""
    name = key.removeprefix(WAL_PREFIX)
    if name == key or not name.endswith(".wal"):
        return None
    stream, _, name = name.rpartition("/")
    sequence, dash, epoch = name[:-4].partition("-")
    if (stream and not stream.isdigit()) or not sequence.isdigit():
        return None
    if dash and not epoch.isdigit():
        return None
    return stream, int(sequence), int(epoch or 0)


def wal_floor_key(stream: str) -> str:
    return f"{WAL_FLOOR_PREFIX}/{stream}" if stream else WAL_FLOOR_PREFIX


def parse_wal_floor_key(key: str) -> str | None:
    """The stream of a ``wal-floor`` key, None for any other key."""
    if key == WAL_FLOOR_PREFIX:
        return ""
    stream = key.removeprefix(WAL_FLOOR_PREFIX + "/")
    return stream if stream != key and stream.isdigit() else None


def takeover_key(stream: str, epoch: int) -> str:
    folder = f"{TAKEOVER_PREFIX}{stream}/" if stream else TAKEOVER_PREFIX
    return f"{folder}{epoch:020d}"


def parse_takeover_key(key: str) -> tuple[str, int] | None:
    """The stream and epoch of a takeover record's key, None for any other key."""
    name = key.removeprefix(TAKEOVER_PREFIX)
    if name == key:
        return None
    stream, _, epoch = name.rpartition("/")
    if (stream and not stream.isdigit()) or not epoch.isdigit():
        return None
    return stream, int(epoch)


def encode_takeover(first_sequence: int) -> bytes:
    return orjson.dumps({"first_sequence": first_sequence})


def decode_takeover(blob: bytes) -> int:
    """The first WAL sequence of a takeover record.

    Raises:
        CorruptObjectError: not a takeover record.
    """
    try:
        return int(orjson.loads(blob)["first_sequence"])
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise CorruptObjectError(f"unreadable takeover record: {exc}") from exc


def partition_prefix(topic_id: uuid.UUID, partition: int) -> str:
    return f"{DATA_PREFIX}{topic_id}/{partition}/"


def topic_prefix(topic_id: uuid.UUID) -> str:
    return f"{DATA_PREFIX}{topic_id}/"


def part_key(topic_id: uuid.UUID, partition: int, base: int, end: int, max_ts: int) -> str:
    return f"{partition_prefix(topic_id, partition)}{base:020d}-{end:020d}_{max_ts}.log"


def log_start_key(topic_id: uuid.UUID, partition: int) -> str:
    return partition_prefix(topic_id, partition) + LOG_START


def snapshot_key(topic_id: uuid.UUID, partition: int, offset: int) -> str:
    return f"{partition_prefix(topic_id, partition)}{offset:020d}{SNAPSHOT_SUFFIX}"


def manifest_key(topic_id: uuid.UUID, partition: int, number: int, broker: str) -> str:
    """A manifest's key: ``number`` (the writer's clock in ns) and ``broker`` make it
    one no other write uses."""
    return f"{partition_prefix(topic_id, partition)}{number:020d}-{broker}{MANIFEST_SUFFIX}"


def encode_manifest(parts: list[PartObject], snapshots: list[int]) -> bytes:
    """A partition's manifest: its objects (``[base, end, size, largest timestamp]``
    each, in offset order: the key follows from them) and its producer-state
    snapshots' offsets."""
    return orjson.dumps(
        {"objects": [[o.base, o.end, o.size, o.max_timestamp] for o in parts],
         "snapshots": snapshots}
    )  # fmt: skip


def decode_manifest(
    blob: bytes, topic_id: uuid.UUID, partition: int
) -> tuple[list[PartObject], list[int]]:
    """The objects (in offset order) and snapshot offsets a manifest names.

    Raises:
        CorruptObjectError: not a manifest.
    """
    try:
        doc = orjson.loads(blob)
        parts = [
            PartObject(part_key(topic_id, partition, base, end, ts), base, end, size, ts)
            for base, end, size, ts in doc["objects"]
        ]
        return parts, [int(o) for o in doc["snapshots"]]
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise CorruptObjectError(f"unreadable manifest: {exc}") from exc


def parse_data_key(
    key: str, size: int
) -> tuple[uuid.UUID, int, PartObject | int | str | None] | None:
    """``(topic id, partition, what)`` of a key under ``data/``: a partition object, a
    producer-state snapshot's offset, the key itself for a manifest, or None for the
    partition's ``log-start``; None for a key this engine did not write."""
    parts = key.removeprefix(DATA_PREFIX).split("/")
    if len(parts) != 3 or not parts[1].isdigit():
        return None
    try:
        topic_id = uuid.UUID(parts[0])
    except ValueError:
        return None
    name = parts[2]
    if name == LOG_START:
        return topic_id, int(parts[1]), None
    if name.endswith(MANIFEST_SUFFIX):
        return topic_id, int(parts[1]), key
    stem = name.removesuffix(SNAPSHOT_SUFFIX)
    if stem != name:
        return (topic_id, int(parts[1]), int(stem)) if stem.isdigit() else None
    if not name.endswith(".log"):
        return None
    stem, _, ts = name.removesuffix(".log").partition("_")
    bounds = stem.split("-")
    if len(bounds) != 2 or not all(b.isdigit() for b in bounds):
        return None
    try:
        max_ts = int(ts) if ts else -1
    except ValueError:
        return None
    obj = PartObject(key, int(bounds[0]), int(bounds[1]), size, max_ts)
    return topic_id, int(parts[1]), obj


def batch_head(data: bytes | memoryview, position: int = 0) -> tuple[int, int, int]:
    """``(base offset, length after the size prefix, last offset delta)`` of the batch
    at ``position`` (at least :data:`BATCH_HEAD_BYTES` bytes from it)."""
    base, length = BATCH_PREFIX.unpack_from(data, position)
    (delta,) = _LAST_DELTA.unpack_from(data, position + _LAST_DELTA_AT)
    return base, length, delta


def encode_wal(entries: list[Entry], data: list[bytes]) -> bytes:
    """A WAL object of ``entries`` whose bytes are ``data`` (concatenated, in order)."""
    index = orjson.dumps(
        [
            [str(e.topic_id), e.partition, e.base, e.end, e.position, e.length, e.epoch]
            for e in entries
        ]
    )
    return b"".join([MAGIC, _LEN.pack(len(index)), index, *data])


INDEX_PROBE = 64 * 1024
"""Bytes read from a WAL object's start to get its index (most indexes fit)."""


def wal_index_size(head: bytes) -> int:
    """How many bytes from the object's start hold the magic, length and index.

    Raises:
        CorruptObjectError: not a WAL object.
    """
    fixed = len(MAGIC) + _LEN.size
    if len(head) < fixed or head[: len(MAGIC)] != MAGIC:
        raise CorruptObjectError("not a Floe WAL object")
    (size,) = _LEN.unpack_from(head, len(MAGIC))
    return fixed + int(size)


def decode_wal_index(head: bytes, object_size: int) -> tuple[list[Entry], int]:
    """The entries of a WAL object from its first :func:`wal_index_size` bytes (or
    more), and where its data starts (entry positions are relative to it).

    Raises:
        CorruptObjectError: not a WAL object, or its index does not fit it.
    """
    data_start = wal_index_size(head)
    if len(head) < data_start:
        raise CorruptObjectError("truncated WAL index")
    try:
        raw = orjson.loads(head[len(MAGIC) + _LEN.size : data_start])
        entries = [
            Entry(uuid.UUID(t), int(p), int(b), int(e), int(o), int(n), int(rest[0]) if rest else 0)
            for t, p, b, e, o, n, *rest in raw
        ]
    except (orjson.JSONDecodeError, ValueError, TypeError) as exc:
        raise CorruptObjectError(f"unreadable WAL index: {exc}") from exc
    for e in entries:
        if e.position < 0 or data_start + e.position + e.length > object_size or e.base >= e.end:
            raise CorruptObjectError(f"WAL entry outside the object: {e}")
    return entries, data_start


def encode_wal_floor(sequence: int) -> bytes:
    return orjson.dumps({"next_sequence": sequence})


def decode_wal_floor(blob: bytes) -> int:
    try:
        return int(orjson.loads(blob)["next_sequence"])
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise CorruptObjectError(f"unreadable wal-floor object: {exc}") from exc


def encode_log_start(offset: int) -> bytes:
    return orjson.dumps({"log_start_offset": offset})


def decode_log_start(blob: bytes) -> int:
    try:
        return int(orjson.loads(blob)["log_start_offset"])
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise CorruptObjectError(f"unreadable log-start object: {exc}") from exc


def slice_from(data: bytes | memoryview, offset: int) -> tuple[memoryview, int] | None:
    """The batches of ``data`` from the one holding ``offset`` on, with that batch's base
    offset; None when every batch ends before ``offset``.

    Raises:
        CorruptObjectError: a batch runs past the end of ``data``.
    """
    view = memoryview(data)
    position = 0
    while position < len(view):
        if len(view) - position < LOG_OVERHEAD + _LAST_DELTA_AT:
            raise CorruptObjectError("truncated record batch in an object")
        base, length, delta = batch_head(view, position)
        size = LOG_OVERHEAD + length
        if length <= 0 or position + size > len(view):
            raise CorruptObjectError("record batch runs past the end of its object")
        if base + delta >= offset:
            return view[position:], base
        position += size
    return None


def max_timestamp(data: bytes | memoryview) -> int:
    """The largest batch max timestamp in ``data`` (whole batches); -1 for none.

    Raises:
        CorruptObjectError: ``data`` is not whole batches.
    """
    view = memoryview(data)
    position, found = 0, -1
    while position < len(view):
        if len(view) - position < LOG_OVERHEAD + _MAX_TIMESTAMP_AT - 4:
            raise CorruptObjectError("truncated record batch")
        (length,) = _LEN.unpack_from(view, position + 8)
        (ts,) = _MAX_TIMESTAMP.unpack_from(view, position + _MAX_TIMESTAMP_AT)
        found = max(found, ts)
        position += LOG_OVERHEAD + length
    return found


def batch_runs(data: memoryview, first_bytes: int, max_bytes: int) -> Iterator[memoryview]:
    """``data`` (whole batches) in consecutive runs of whole batches: the first of at
    most ``first_bytes``, the others of at most ``max_bytes`` (a batch larger than that
    alone; an empty first run is skipped).

    Raises:
        CorruptObjectError: a batch runs past the end of ``data``.
    """
    limit = first_bytes
    while len(data):
        run = cut_to(data, limit, min_one=limit == max_bytes)
        if len(run):
            yield run
            data = data[len(run) :]
        limit = max_bytes


def cut_to(data: memoryview, max_bytes: int, min_one: bool) -> memoryview:
    """The first whole batches of ``data`` that fit ``max_bytes`` (at least one batch
    when ``min_one``).

    Raises:
        CorruptObjectError: a batch runs past the end of ``data``.
    """
    position = 0
    while position < len(data):
        if len(data) - position < LOG_OVERHEAD:
            raise CorruptObjectError("truncated record batch")
        _, length = BATCH_PREFIX.unpack_from(data, position)
        size = LOG_OVERHEAD + length
        if length <= 0 or position + size > len(data):
            raise CorruptObjectError("record batch runs past the end of its object")
        if position + size > max_bytes and not (position == 0 and min_one):
            break
        position += size
    return data[:position]


def end_offset(data: bytes | memoryview) -> int:
    """The offset after the last batch of ``data`` (whole batches, at least one).

    Raises:
        CorruptObjectError: ``data`` is not whole batches.
    """
    view = memoryview(data)
    position, end = 0, -1
    while position < len(view):
        if len(view) - position < LOG_OVERHEAD + _LAST_DELTA_AT:
            raise CorruptObjectError("truncated record batch")
        base, length, delta = batch_head(view, position)
        position += LOG_OVERHEAD + length
        end = base + delta + 1
    if end < 0 or position != len(view):
        raise CorruptObjectError("not whole record batches")
    return end


def cut_at(data: bytes, end: int) -> bytes:
    """The batches of ``data`` (whole batches) that start before offset ``end``.

    Raises:
        CorruptObjectError: ``data`` is not whole batches.
    """
    view = memoryview(data)
    position = 0
    while position < len(view):
        if len(view) - position < LOG_OVERHEAD:
            raise CorruptObjectError("truncated record batch")
        base, length = BATCH_PREFIX.unpack_from(view, position)
        if base >= end:
            return data[:position]
        position += LOG_OVERHEAD + length
    return data
