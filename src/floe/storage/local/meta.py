"""Durable small files of the local store: topic metadata and offset checkpoints.

Checkpoint files are replaced atomically (write a temporary file, fsync it, rename it
over the old one, fsync the directory), so a crash leaves either the old or the new
content, never a mix.

Topic metadata is a snapshot plus an append-only log of changes
(:class:`TopicMetadata`), so creating N topics one by one writes O(N) bytes, not
O(N^2) as rewriting one file per change would.

Files:
    ``meta/topics.json``                    snapshot of every topic (:class:`TopicMeta`)
    ``meta/topics.log``                     changes since that snapshot
    ``logs/recovery-point-offset-checkpoint``  per partition, offsets below are fsynced
    ``logs/<topic>-<partition>/log-start-offset``  set by DeleteRecords
"""

from __future__ import annotations

import logging
import os
import re
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import crc32c
import orjson

from floe.storage.interface import InvalidPartitionsError, InvalidTopicError, TopicMeta
from floe.storage.local import fileio
from floe.storage.local.fileio import fsync_dir
from floe.types import TopicName

log = logging.getLogger(__name__)

__all__ = ["fsync_dir"]

MAX_TOPIC_NAME = 249
MAX_PARTITIONS = 10000
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")


def validate_topic_name(name: str) -> None:
    """Apply Kafka's topic name rules.

    Raises:
        InvalidTopicError: empty, longer than 249 characters, ``.`` or ``..``, or a
            character outside ``[a-zA-Z0-9._-]``.
    """
    if not name:
        raise InvalidTopicError("topic name is empty")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name cannot be {name!r}")
    if len(name) > MAX_TOPIC_NAME:
        raise InvalidTopicError(f"topic name is longer than {MAX_TOPIC_NAME} characters")
    if not _LEGAL.fullmatch(name):
        raise InvalidTopicError(
            f"topic name {name!r} is illegal: only ASCII letters, digits, '.', '_' and '-'"
        )


def validate_partitions(count: int) -> None:
    """Raises: InvalidPartitionsError: ``count`` outside 1..10000."""
    if not 1 <= count <= MAX_PARTITIONS:
        raise InvalidPartitionsError(f"partition count must be 1..{MAX_PARTITIONS}, got {count}")


def atomic_write(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` durably and atomically.

    Raises:
        OSError: a write, fsync or rename failed (the old content is still in place).
    """
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        fileio.write_all(fd, data)
        fileio.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def _meta_of(t: Mapping[str, Any]) -> TopicMeta:
    return TopicMeta(
        name=TopicName(t["name"]),
        topic_id=uuid.UUID(t["topic_id"]),
        partitions=int(t["partitions"]),
        configs=dict(t["configs"]),
        internal=bool(t["internal"]),
        created_ms=int(t["created_ms"]),
    )


def _doc_of(t: TopicMeta) -> dict[str, Any]:
    return {
        "name": t.name,
        "topic_id": str(t.topic_id),
        "partitions": t.partitions,
        "configs": dict(t.configs),
        "internal": t.internal,
        "created_ms": t.created_ms,
    }


def topics_doc(topics: Mapping[TopicName, TopicMeta], generation: int = 0) -> bytes:
    """The snapshot format of ``topics`` (also the object-storage engine's)."""
    doc = {"version": 1, "generation": generation, "topics": [_doc_of(t) for t in topics.values()]}
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2)


def topics_from_doc(data: bytes) -> dict[TopicName, TopicMeta]:
    """The topics of :func:`topics_doc`'s bytes.

    Raises:
        ValueError: not such a document.
    """
    try:
        return {m.name: m for m in map(_meta_of, orjson.loads(data)["topics"])}
    except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
        raise ValueError(f"not a topic metadata document: {exc}") from exc


def load_topics(path: Path) -> dict[TopicName, TopicMeta]:
    """The topics of a snapshot file alone (no log; see :class:`TopicMetadata`)."""
    if not path.exists():
        return {}
    return topics_from_doc(path.read_bytes())


def save_topics(path: Path, topics: Mapping[TopicName, TopicMeta], generation: int = 0) -> None:
    """Write a snapshot file atomically.

    Raises:
        OSError: it could not be written (the old one stays).
    """
    atomic_write(path, topics_doc(topics, generation))


class TopicMetadata:
    """Every topic, durable as a snapshot (``topics.json``) plus a log of the changes
    made since it (``topics.log``).

    A change is one line appended to the log and fsynced (``<crc32c hex> <json>``); when
    the log grows past the snapshot's size the current state becomes the new snapshot,
    so the bytes written stay proportional to the changes made (each snapshot is paid
    for by at least as many log bytes). Every snapshot carries a generation and the
    log starts with the generation it follows: a log left from an older generation (a
    crash right after a new snapshot) is ignored, and a torn last line (a crash
    mid-append) is cut off; its change was never acknowledged. After a failed append
    the log's content is unknown, so the next change writes a new snapshot first.

    Owned by the store, on the event loop.
    """

    def __init__(self, directory: Path) -> None:
        self._snapshot = directory / "topics.json"
        self._log = directory / "topics.log"
        self.topics: dict[TopicName, TopicMeta] = {}
        self._generation = 0
        self._snapshot_size = 0
        self._log_size = 0  # 0: no log of the current generation yet
        self._suspect = False
        self._load()

    def _load(self) -> None:
        if self._snapshot.exists():
            raw = self._snapshot.read_bytes()
            doc = orjson.loads(raw)
            self._generation = int(doc.get("generation", 0))
            self._snapshot_size = len(raw)
            self.topics = {m.name: m for m in map(_meta_of, doc["topics"])}
        try:
            data = self._log.read_bytes()
        except FileNotFoundError:
            return
        header = f"floe-topics-log {self._generation}\n".encode()
        if not data.startswith(header):
            log.info("store.meta.log_ignored path=%s", self._log)  # an older generation
            return
        valid = len(header)
        for line in data[valid:].split(b"\n")[:-1]:
            crc, _, body = line.partition(b" ")
            try:
                if int(crc, 16) != crc32c.crc32c(body):
                    break
                change = orjson.loads(body)
            except ValueError:
                break
            if change["op"] == "put":
                meta = _meta_of(change["topic"])
                self.topics[meta.name] = meta
            else:
                self.topics.pop(TopicName(change["name"]), None)
            valid += len(line) + 1
        if valid < len(data):
            log.warning("store.meta.log_truncated path=%s bytes=%d", self._log, len(data) - valid)
            with open(self._log, "r+b") as f:
                fileio.ftruncate(f.fileno(), valid)
                fileio.fsync(f.fileno())
        self._log_size = valid

    def put(self, meta: TopicMeta) -> None:
        """Record a new or changed topic durably.

        Raises:
            OSError: it could not be recorded (the in-memory state is unchanged).
        """
        self._append({"op": "put", "topic": _doc_of(meta)})
        self.topics[meta.name] = meta
        self._maybe_compact()

    def remove(self, name: TopicName) -> None:
        """Record a deletion durably.

        Raises:
            OSError: it could not be recorded (the in-memory state is unchanged).
        """
        self._append({"op": "delete", "name": name})
        del self.topics[name]
        self._maybe_compact()

    def _append(self, change: dict[str, Any]) -> None:
        body = orjson.dumps(change)
        line = b"%08x %s\n" % (crc32c.crc32c(body), body)
        if self._suspect:
            self._compact()
        try:
            if not self._log_size:
                header = f"floe-topics-log {self._generation}\n".encode()
                atomic_write(self._log, header)
                self._log_size = len(header)
            fd = os.open(self._log, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
            try:
                fileio.write_all(fd, line)
                fileio.fsync(fd)
            finally:
                os.close(fd)
        except OSError:
            self._suspect = True
            raise
        self._log_size += len(line)

    def _maybe_compact(self) -> None:
        """Snapshot once the log outgrows the snapshot (the change is already durable:
        a failure here is only logged)."""
        if self._log_size <= self._snapshot_size:
            return
        try:
            self._compact()
        except OSError as exc:
            log.warning("store.meta.snapshot_failed path=%s error=%s", self._snapshot, exc)

    def _compact(self) -> None:
        """The current state becomes a snapshot of a new generation (the old log is
        ignored from then on, and replaced by the next change).

        Raises:
            OSError: the snapshot could not be written (nothing changed).
        """
        generation = self._generation + 1
        doc = {
            "version": 1,
            "generation": generation,
            "topics": [_doc_of(t) for t in self.topics.values()],
        }
        data = orjson.dumps(doc, option=orjson.OPT_INDENT_2)
        atomic_write(self._snapshot, data)
        self._generation, self._snapshot_size = generation, len(data)
        self._log_size = 0
        self._suspect = False


def read_offsets(path: Path) -> dict[str, int]:
    """A checkpoint file: one ``<key> <offset>`` per line; missing file: empty."""
    if not path.exists():
        return {}
    out: dict[str, int] = {}
    for line in path.read_text().splitlines():
        key, _, value = line.rpartition(" ")
        if key:
            out[key] = int(value)
    return out


def write_offsets(path: Path, offsets: Mapping[str, int]) -> None:
    atomic_write(path, "".join(f"{k} {v}\n" for k, v in offsets.items()).encode())
