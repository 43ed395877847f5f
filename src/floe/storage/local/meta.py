"""Durable small files of the local store: topic metadata and offset checkpoints.

Every file here is replaced atomically (write a temporary file, fsync it, rename it
over the old one, fsync the directory), so a crash leaves either the old or the new
content, never a mix.

Files:
    ``meta/topics.json``                    every topic (:class:`TopicMeta`)
    ``logs/recovery-point-offset-checkpoint``  per partition, offsets below are fsynced
    ``logs/<topic>-<partition>/log-start-offset``  set by DeleteRecords
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Mapping
from pathlib import Path

import orjson

from floe.storage.interface import InvalidPartitionsError, InvalidTopicError, TopicMeta
from floe.types import TopicName

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


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` durably and atomically."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def load_topics(path: Path) -> dict[TopicName, TopicMeta]:
    if not path.exists():
        return {}
    out: dict[TopicName, TopicMeta] = {}
    for t in orjson.loads(path.read_bytes())["topics"]:
        meta = TopicMeta(
            name=TopicName(t["name"]),
            topic_id=uuid.UUID(t["topic_id"]),
            partitions=int(t["partitions"]),
            configs=dict(t["configs"]),
            internal=bool(t["internal"]),
            created_ms=int(t["created_ms"]),
        )
        out[meta.name] = meta
    return out


def save_topics(path: Path, topics: Mapping[TopicName, TopicMeta]) -> None:
    doc = {
        "version": 1,
        "topics": [
            {
                "name": t.name,
                "topic_id": str(t.topic_id),
                "partitions": t.partitions,
                "configs": dict(t.configs),
                "internal": t.internal,
                "created_ms": t.created_ms,
            }
            for t in topics.values()
        ],
    }
    atomic_write(path, orjson.dumps(doc, option=orjson.OPT_INDENT_2))


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
