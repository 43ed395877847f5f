"""What the bucket holds, read at open or at a takeover (:class:`BucketState`; what this
broker knows it holds from then on is :class:`~.inventory.Inventory`).

A :class:`BucketState` is read once, then only read from: topics, partition objects,
log starts, producer-state snapshots, and every WAL stream's objects with their floors
and takeover records. It also carries the rules for which records count: a WAL entry
counts up to the first offset a later owner of its partition wrote at (a higher
ownership epoch), and, in a cluster, up to the partition's committed end in the
metadata store (:meth:`BucketState.commit_point`). Reads of the bucket here are
blocking: callers on the event loop run them in a worker thread.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from floe.storage.interface import TopicMeta
from floe.storage.local.meta import topics_from_doc
from floe.storage.object import layout
from floe.storage.object.bucket import Bucket, Listed, describe
from floe.storage.object.layout import Entry, PartObject
from floe.types import PartitionId, TopicName

log = logging.getLogger(__name__)

Key = tuple[uuid.UUID, int]
"""A partition in the bucket: its topic's id and its number."""
_T = TypeVar("_T")
READERS = 16
"""Concurrent GETs while the bucket is read at open."""
STALE_READS = 5
"""Times a restore lists a partition's objects again when one it had listed is gone
(see :meth:`BucketState.read_from`) before that counts as an error."""


WalIndexes = dict[str, tuple[tuple[Entry, ...], int]]
"""WAL objects' indexes by key: entries and data start (a WAL object never changes)."""
Pointers = Callable[[], Mapping[tuple[TopicName, PartitionId], str]]
"""Reads each partition's manifest key from the metadata store (a cluster's
:meth:`~floe.storage.interface.WriteGuard.manifests`)."""


def read_wal_indexes(
    bucket: Bucket, items: Collection[Listed]
) -> dict[str, tuple[list[Entry], int] | None]:
    """The indexes of the WAL objects ``items``, :data:`READERS` at a time (None for one
    gone since it was listed)."""
    with ThreadPoolExecutor(READERS, thread_name_prefix="floe-s3-index") as pool:
        return dict(
            zip([item.key for item in items], pool.map(lambda w: _wal_index(bucket, w), items),
                strict=True)
        )  # fmt: skip


def follow_wal(bucket: Bucket, known: WalIndexes) -> WalIndexes:
    """The indexes of every WAL object the bucket lists now: ``known``'s for those it
    holds (read once), the new ones read; what a broker that may take the prefix over
    keeps current, so that its open reads only the objects written since (a new one
    gone by its read is left out: its records moved into partition objects)."""
    listed = [item for item in bucket.list(layout.WAL_PREFIX) if layout.parse_wal_key(item.key)]
    read = read_wal_indexes(bucket, [item for item in listed if item.key not in known])
    fresh: WalIndexes = {}
    for item in listed:
        index = read[item.key] if item.key in read else known[item.key]
        if index is not None:
            fresh[item.key] = (tuple(index[0]), index[1])
    return fresh


def _wal_index(bucket: Bucket, item: Listed) -> tuple[list[Entry], int] | None:
    """A WAL object's entries and data start, reading only its first bytes (more when
    the index is larger than :data:`~.layout.INDEX_PROBE`); None when it is gone since
    it was listed (its records moved into partition objects)."""
    try:
        head = bucket.get_range(item.key, 0, min(layout.INDEX_PROBE, item.size))
        need = layout.wal_index_size(head)
        if need > len(head):
            head = bucket.get_range(item.key, 0, need)
    except FileNotFoundError:
        return None
    return layout.decode_wal_index(head, item.size)


def _outermost(objs: list[PartObject], redundant: list[str]) -> list[PartObject]:
    """``objs`` in offset order without those inside another (a merge or rewrite cut
    short by a crash, or one that has not deleted what it merged yet), whose keys go
    to ``redundant``."""
    objs.sort(key=lambda o: (o.base, -o.end))
    kept: list[PartObject] = []
    for obj in objs:
        if kept and obj.end <= kept[-1].end:
            redundant.append(obj.key)
        else:
            kept.append(obj)
    return kept


def _data_objects(
    bucket: Bucket, prefixes: Iterable[str]
) -> Iterator[tuple[Key, PartObject | int | None, str]]:
    """Each data object under ``prefixes``: its partition, what it is (a partition
    object, a producer-state snapshot's offset, or None for the log start) and its key;
    manifests are left out (a listing does not read them), keys it does not know are
    logged and skipped. Several prefixes (the partitions without a manifest, at a
    writer's open) are listed :data:`READERS` at a time."""
    wanted = list(prefixes)
    listings: list[Iterable[Listed]]
    if len(wanted) > 1:
        with ThreadPoolExecutor(READERS, thread_name_prefix="floe-s3-list") as pool:
            listings = list(pool.map(lambda p: list(bucket.list(p)), wanted))
    else:
        listings = [bucket.list(p) for p in wanted]
    for listing in listings:
        for item in listing:
            parsed = layout.parse_data_key(item.key, item.size)
            if parsed is None:
                log.warning("storage.bucket.unknown_key key=%s", item.key)
                continue
            topic_id, partition, obj = parsed
            if not isinstance(obj, str):
                yield (topic_id, partition), obj, item.key


def _named(bucket: Bucket, prefix: str, parse: Callable[[str], _T | None]) -> list[tuple[_T, str]]:
    """What ``parse`` makes of each key under ``prefix``, with the key; keys it does not
    know are logged and skipped."""
    found: list[tuple[_T, str]] = []
    for item in bucket.list(prefix):
        parsed = parse(item.key)
        if parsed is None:
            log.warning("storage.bucket.unknown_key key=%s", item.key)
        else:
            found.append((parsed, item.key))
    return found


def list_partition_objects(bucket: Bucket, key: Key) -> list[PartObject]:
    """The partition objects of ``key`` as the bucket holds them now, in offset order,
    without those inside another."""
    prefix = layout.partition_prefix(*key)
    objs = [o for _, o, _ in _data_objects(bucket, [prefix]) if isinstance(o, PartObject)]
    return _outermost(objs, [])


def _manifest(
    bucket: Bucket, key: Key, manifest: str
) -> tuple[list[PartObject], list[int], int | None] | None:
    """The objects, snapshot offsets and log start (None: none recorded) of partition
    ``key`` as its manifest ``manifest`` names them; None when the manifest is gone."""
    try:
        parts, snapshots = layout.decode_manifest(bucket.get(manifest), *key)
    except FileNotFoundError:
        return None
    return parts, sorted(snapshots), read_log_start(bucket, key)


def read_log_start(bucket: Bucket, key: Key) -> int | None:
    """Partition ``key``'s log start as its ``log-start`` object records it (None:
    none recorded)."""
    try:
        return layout.decode_log_start(bucket.get(layout.log_start_key(*key)))
    except FileNotFoundError:
        return None


class BucketState:
    """What the bucket holds, read once at open: topics, partition objects, log starts
    and every WAL stream's objects (their indexes: only their first bytes are read; the
    uploader keeps WAL objects few by moving their records into partition objects),
    floors and takeover records. Reads run :data:`READERS` at a time.

    Other brokers on the prefix move WAL objects' records into partition objects and
    delete those WAL objects at any time. So the WAL objects are listed and indexed
    first, a WAL object gone by its index read is left out, and the partition objects
    are listed after: what a WAL object held that this state lacks is in them."""

    def __init__(
        self,
        bucket: Bucket,
        only: Collection[Key] | None = None,
        indexes: WalIndexes | None = None,
        pointers: Pointers | None = None,
    ) -> None:
        """``only``: read the data objects of those partitions alone (partitions taken
        over at runtime); the WAL streams are read whole either way. ``indexes``: the
        WAL objects' indexes read before, by key (a WAL object never changes: only
        those listed for the first time are read), updated to the listed ones.
        ``pointers``: in a cluster, a partition the metadata store names a manifest for
        is read from that manifest, not listed (see :meth:`read_partitions`)."""
        self._pointers = pointers
        self.manifests: dict[Key, str] = {}
        """The key of the manifest each partition read from one was read from."""
        self.topics: dict[TopicName, TopicMeta] | None = None
        self.parts: dict[Key, list[PartObject]] = {}
        self.log_starts: dict[Key, int] = {}
        self.snapshots: dict[Key, list[int]] = {}
        self.wal: dict[str, list[Entry]] = {}
        """Each WAL object's entries, by key (zombies left out)."""
        self.wal_data_start: dict[str, int] = {}
        try:
            self.topics = topics_from_doc(bucket.get(layout.TOPICS_KEY))
        except FileNotFoundError:
            self.topics = None
        floors = _named(bucket, layout.WAL_FLOOR_PREFIX, layout.parse_wal_floor_key)
        takeover_keys = _named(bucket, layout.TAKEOVER_PREFIX, layout.parse_takeover_key)
        self.floors: dict[str, int] = {}
        """Each stream's wal-floor."""
        self.takeovers: dict[str, dict[int, int]] = {}
        """Each stream's takeover records: epoch -> the first sequence it left to the
        stream's older epochs."""
        with ThreadPoolExecutor(READERS, thread_name_prefix="floe-s3-open") as pool:
            for (stream, _), blob in zip(
                floors, pool.map(bucket.get, [k for _, k in floors]), strict=True
            ):
                self.floors[stream] = layout.decode_wal_floor(blob)
            for ((stream, epoch), _), blob in zip(
                takeover_keys, pool.map(bucket.get, [k for _, k in takeover_keys]), strict=True
            ):
                self.takeovers.setdefault(stream, {})[epoch] = layout.decode_takeover(blob)
        self._sequences: dict[str, int] = {}  # each stream's largest sequence listed
        self.zombies: list[str] = []
        """WAL objects a writer wrote after it lost the lease (another took over before
        they landed): never acknowledged, ignored, deleted once this broker may write."""
        wal: list[Listed] = []
        suspects: list[Listed] = []
        for item in bucket.list(layout.WAL_PREFIX):
            named = layout.parse_wal_key(item.key)
            if named is None:
                log.warning("storage.bucket.unknown_key key=%s", item.key)
                continue
            stream, sequence, epoch = named
            self._sequences[stream] = max(self._sequences.get(stream, -1), sequence)
            takeovers = self.takeovers.get(stream, {}).items()
            if any(e > epoch and sequence >= first for e, first in takeovers):
                suspects.append(item)
            else:
                wal.append(item)
        known = {} if indexes is None else indexes
        read = read_wal_indexes(
            bucket, [item for item in (*wal, *suspects) if item.key not in known]
        )
        fresh: WalIndexes = {}
        for item in suspects:
            # written after a takeover record of its stream: an object whose entries
            # carry ownership epochs was committed or not by the metadata store (the
            # epochs decide, see _valid); an older one was never acknowledged
            index = read[item.key] if item.key in read else known.get(item.key)
            if index is not None and any(e.epoch for e in index[0]):
                wal.append(item)
            elif index is not None:
                self.zombies.append(item.key)
        for item in wal:
            index = read[item.key] if item.key in read else known[item.key]
            if index is not None:
                entries, start = index
                fresh[item.key] = (tuple(entries), start)
                self.wal[item.key], self.wal_data_start[item.key] = list(entries), start
        if indexes is not None:
            indexes.clear()
            indexes.update(fresh)
        self.redundant: list[str] = []
        """Partition objects inside another, of partitions listed (deleted once this
        broker may write)."""
        self._read_partitions(bucket, None if only is None else list(only))
        self.wal_entries: dict[Key, list[tuple[str, Entry]]] = {}
        """Each partition's WAL entries with their object's key (indexed once, not per
        partition)."""
        for wal_key, entries in self.wal.items():
            for e in entries:
                self.wal_entries.setdefault((e.topic_id, e.partition), []).append((wal_key, e))
        self.committed: dict[Key, int] = {}
        """In a cluster, each partition's committed end in the metadata store (read
        once the partitions restored are claimed: :meth:`commit_point`)."""
        self.fetched: dict[Key, int] = {}
        """How many objects (or WAL entries) :meth:`read_from` fetched of each partition."""
        self.epoch_ends: dict[Key, dict[int, int]] = {}
        """In a cluster, where each ownership epoch that a restored partition's WAL
        entries were written at ended, as the metadata store says (:meth:`commit_point`)."""

    def read_partitions(self, bucket: Bucket, keys: Iterable[Key]) -> None:
        """Read the data objects of the partitions ``keys`` too (a state read with
        ``only``), after the WAL objects, as the constructor reads them.

        A partition the metadata store names a manifest for (``pointers``) is read from
        that manifest, the objects its owner's last committed upload pass left, and
        its ``log-start`` object: two GETs, whatever the bucket holds. Read after the
        WAL objects were listed, it names every object that holds records of a WAL
        object deleted since (a WAL object is deleted only once a committed manifest
        covers it). The others (a bucket from before manifests, a broker alone) are
        listed."""
        self._read_partitions(bucket, list(keys))

    def _read_partitions(self, bucket: Bucket, keys: list[Key] | None) -> None:
        """Read the partitions ``keys`` (None: every partition of the bucket)."""
        if keys is not None and not keys:
            return
        manifests = self.manifest_keys()
        if keys is None:
            if not manifests:  # one listing of everything: fewer requests than one each
                self._list_partitions(bucket, [layout.DATA_PREFIX])
                return
            keys = [
                (meta.topic_id, p) for meta in (self.topics or {}).values()
                for p in range(meta.partitions)
            ]  # fmt: skip
        named = {key: manifests[key] for key in keys if key in manifests}
        listed = [key for key in keys if key not in named]
        if listed:
            self._list_partitions(bucket, [layout.partition_prefix(*k) for k in listed])
        if named:
            self._read_manifests(bucket, named)

    def manifest_keys(self) -> dict[Key, str]:
        """Each partition's manifest key in the metadata store, by bucket key (one of
        a topic deleted and created again under its name, not forgotten yet, left
        out)."""
        if self._pointers is None:
            return {}
        ids = {name: meta.topic_id for name, meta in (self.topics or {}).items()}
        return {
            (ids[name], int(p)): key
            for (name, p), key in self._pointers().items()
            if name in ids and key.startswith(layout.partition_prefix(ids[name], p))
        }

    def _read_manifests(self, bucket: Bucket, named: dict[Key, str]) -> None:
        """Read each partition of ``named`` from its manifest (and its log start). A
        manifest deleted since the store named it (its owner committed a newer one
        meanwhile) is looked up again (at most :data:`STALE_READS` times); a partition
        the store names none for any more (its topic deleted) is listed.

        Raises:
            FileNotFoundError: a manifest still gone after the last look-up.
        """
        todo = dict(named)
        for attempt in range(1, STALE_READS + 1):
            with ThreadPoolExecutor(READERS, thread_name_prefix="floe-s3-manifest") as pool:
                read = list(pool.map(lambda kv: _manifest(bucket, *kv), todo.items()))
            gone: list[Key] = []
            for (key, manifest), found in zip(todo.items(), read, strict=True):
                if found is None:
                    gone.append(key)
                    continue
                self.parts[key], self.snapshots[key], start = found
                if start is not None:
                    self.log_starts[key] = start
                self.manifests[key] = manifest
            if not gone:
                return
            if attempt == STALE_READS:
                raise FileNotFoundError(f"manifest {todo[gone[0]]} is gone")
            now = self.manifest_keys()
            todo = {key: now[key] for key in gone if key in now}
            log.info("storage.object.manifest_read_again partitions=%d", len(gone))
            if unnamed := [key for key in gone if key not in now]:
                self._list_partitions(bucket, [layout.partition_prefix(*k) for k in unnamed])
            if not todo:
                return

    def _list_partitions(self, bucket: Bucket, prefixes: Iterable[str]) -> None:
        """List the data objects under ``prefixes``; what they show of a partition
        replaces what an earlier listing showed."""
        starts: list[tuple[Key, str]] = []
        parts: dict[Key, list[PartObject]] = {}
        snapshots: dict[Key, list[int]] = {}
        for key, obj, name in _data_objects(bucket, prefixes):
            if obj is None:
                starts.append((key, name))
            elif isinstance(obj, int):
                snapshots.setdefault(key, []).append(obj)
            else:
                parts.setdefault(key, []).append(obj)
        for key, offsets in snapshots.items():
            self.snapshots[key] = sorted(offsets)
        for key, objs in parts.items():
            self.parts[key] = _outermost(objs, self.redundant)
        with ThreadPoolExecutor(READERS, thread_name_prefix="floe-s3-open") as pool:
            for (key, _), blob in zip(
                starts, pool.map(bucket.get, [k for _, k in starts]), strict=True
            ):
                self.log_starts[key] = layout.decode_log_start(blob)

    def written_by(self, stream: str) -> set[Key]:
        """The partitions with entries in ``stream``'s WAL objects (those its broker's
        upload pass deletes once their records are in partition objects)."""
        return {
            (e.topic_id, e.partition)
            for wal_key, entries in self.wal.items()
            if (named := layout.parse_wal_key(wal_key)) is not None and named[0] == stream
            for e in entries
        }

    def commit_point(
        self,
        ends: Mapping[tuple[TopicName, PartitionId], int],
        epoch_ends: Mapping[tuple[TopicName, PartitionId], Mapping[int, int]] | None = None,
    ) -> None:
        """Read each partition only up to its committed end ``ends``, and each WAL entry
        only up to where its ownership epoch ended (``epoch_ends``; both by name, from
        the metadata store): records beyond were never part of the log."""
        ids = {name: meta.topic_id for name, meta in (self.topics or {}).items()}
        self.committed = {
            (ids[name], int(p)): end for (name, p), end in ends.items() if name in ids
        }
        self.epoch_ends = {
            (ids[name], int(p)): dict(at)
            for (name, p), at in (epoch_ends or {}).items()
            if name in ids
        }

    def wal_epochs(self, key: Key) -> set[int]:
        """The ownership epochs the WAL entries of ``key`` were written at (0, a broker
        outside a cluster, left out)."""
        return {e.epoch for _, e in self.wal_entries.get(key, ()) if e.epoch}

    def _valid(self, key: Key) -> list[tuple[int, int, PartObject | tuple[str, Entry]]]:
        """The partition's sources as ``(base, valid end, source)``: the records of a
        WAL entry count up to the first offset a later owner of the partition wrote at
        (a higher ownership epoch: what a former owner wrote from there on was never
        committed, as Kafka truncates a diverging log by leader epoch) and, in a
        cluster, up to where the metadata store says its epoch ended (the later
        owner's WAL entries are gone once their records moved into partition objects,
        which name no epoch) and up to the committed end."""
        cap = self.committed.get(key)
        ended = self.epoch_ends.get(key, {})
        entries = self.wal_entries.get(key, ())
        starts: dict[int, int] = {}
        for _, e in entries:
            starts[e.epoch] = min(starts.get(e.epoch, e.base), e.base)
        out: list[tuple[int, int, PartObject | tuple[str, Entry]]] = []
        for o in self.parts.get(key, ()):
            end = o.end if cap is None else min(o.end, cap)
            if end > o.base:
                out.append((o.base, end, o))
        for wal_key, e in entries:
            end = min([e.end, *(at for epoch, at in starts.items() if epoch > e.epoch)])
            if e.epoch in ended:
                end = min(end, ended[e.epoch])
            if cap is not None:
                end = min(end, cap)
            if end > e.base:
                out.append((e.base, end, (wal_key, e)))
        return out

    def list_parts(self, bucket: Bucket, key: Key) -> None:
        """Read the partition objects of ``key`` again (others' objects may have
        replaced the ones read): from its manifest in a cluster, else listed."""
        if self._pointers is not None and key in self.manifests:
            self._read_partitions(bucket, [key])
        else:
            self.parts[key] = list_partition_objects(bucket, key)

    @property
    def streams(self) -> set[str]:
        """Every WAL stream the bucket names (objects, floors or takeover records)."""
        return {*self._sequences, *self.floors, *self.takeovers}

    def next_sequence(self, stream: str) -> int:
        """The first sequence no object of ``stream`` had or will have."""
        return max(self._sequences.get(stream, -1) + 1, self.floors.get(stream, 0))

    def last_epoch(self, stream: str) -> int:
        """The newest epoch that recorded a takeover of ``stream`` (0: none)."""
        return max(self.takeovers.get(stream, {}), default=0)

    def end(self, key: Key) -> int:
        """The offset after the last record the bucket holds for ``key`` (0: none)."""
        return max((end for _, end, _ in self._valid(key)), default=self.log_starts.get(key, 0))

    def read_from(self, bucket: Bucket, key: Key, offset: int) -> Iterator[memoryview]:
        """The batches the bucket holds for ``key`` from the one holding ``offset`` on,
        one object (or WAL entry) at a time, each chunk starting at a batch; objects in
        offset order, WAL entries after the partition objects. The objects it will need
        are fetched :data:`READERS` at a time ahead of the one being read (a takeover
        reads one small WAL entry per WAL object, thousands of them under load).

        A WAL object gone since it was listed had its records moved into partition
        objects: the partition's objects are listed again and the read goes on from
        where it stopped (at most :data:`STALE_READS` times).

        Raises:
            FileNotFoundError: an object still gone after the last listing.
        """
        position = offset
        for attempt in range(1, STALE_READS + 1):
            try:
                for chunk, end in self._read_sources(bucket, key, position):
                    yield chunk
                    position = max(position, end)
                return
            except FileNotFoundError as exc:
                if attempt == STALE_READS:
                    raise
                log.info(
                    "storage.object.listed_again offset=%d reason=%s",
                    position, describe(exc).split(":", 1)[0],
                )  # fmt: skip
                self.list_parts(bucket, key)

    def _read_sources(
        self, bucket: Bucket, key: Key, offset: int
    ) -> Iterator[tuple[memoryview, int]]:
        """:meth:`read_from`'s chunks, each with the end of the object it came from."""
        sources = self._valid(key)
        sources.sort(key=lambda s: (s[0], -s[1]))  # from one base, the one reaching furthest
        wanted: list[int] = []  # the sources read if each holds what its name says
        reach = offset
        for i, (_, end, _) in enumerate(sources):
            if end > reach:
                wanted.append(i)
                reach = end
        position = offset
        with ThreadPoolExecutor(READERS, thread_name_prefix="floe-s3-restore") as pool:
            ahead: dict[int, Future[bytes]] = {}
            queue = iter(wanted)
            for i, (_, end, source) in enumerate(sources):
                if end <= position:
                    if (skipped := ahead.pop(i, None)) is not None:
                        skipped.cancel()
                    continue
                while len(ahead) < READERS and (nxt := next(queue, None)) is not None:
                    if nxt >= i:  # (one passed already: what it held was not there)
                        ahead[nxt] = pool.submit(self._fetch, bucket, sources[nxt][2])
                fetched = ahead.pop(i, None)
                self.fetched[key] = self.fetched.get(key, 0) + 1
                blob = memoryview(
                    fetched.result() if fetched is not None else self._fetch(bucket, source)
                )
                found = layout.slice_from(blob, position)
                if found is not None:
                    chunk = found[0]
                    nominal = source.end if isinstance(source, PartObject) else source[1].end
                    if end < nominal:  # it holds more than counts (see _valid)
                        chunk = memoryview(layout.cut_at(bytes(chunk), end))
                    yield chunk, end
                    position = max(position, end)

    def _fetch(self, bucket: Bucket, source: PartObject | tuple[str, Entry]) -> bytes:
        """A partition object's bytes, or a WAL entry's."""
        if isinstance(source, PartObject):
            return bucket.get(source.key)
        wal_key, entry = source
        return bucket.get_range(
            wal_key, self.wal_data_start[wal_key] + entry.position, entry.length
        )
