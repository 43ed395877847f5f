"""The topics a run aims at, and the few setup calls made with :class:`KioClient`.

``fuzz-plain`` (delete policy) and ``fuzz-compact`` (compact policy, small segments so
the cleaner runs during the run) are created at start and again every few seconds,
since the fuzzer itself deletes them now and then; the internal topics are the
broker's own; ``missing`` stands for names the broker may auto-create.
"""

from __future__ import annotations

import datetime
import importlib
import uuid
from typing import Any

from fuzz import batches, wire
from fuzz.client import KioClient, decode_response
from fuzz.layout import request_schema
from fuzz.seeds import INTERNAL_TOPICS, Topic

FUZZ_TOPICS: dict[str, tuple[int, dict[str, str]]] = {
    # name: (partitions, topic configs)
    "fuzz-plain": (3, {"retention.bytes": str(64 << 20), "segment.bytes": str(8 << 20)}),
    "fuzz-compact": (
        2,
        {"cleanup.policy": "compact", "segment.bytes": str(1 << 20), "segment.ms": "5000"},
    ),
}


BIG_TOPIC = "fuzz-big"
"""Filled with a few MiB at start for the never-reading clients' Fetches; no mutator
names it, so it keeps its data."""


def _module(api_key: int, version: int) -> Any:
    return importlib.import_module(request_schema(api_key, version).__module__)


def advertised(host: str, port: int) -> dict[int, tuple[int, int]]:
    """api key -> (min, max) version from the broker's ApiVersions v3 answer."""
    with KioClient(host, port) as client:
        resp = client.request(18, 3, client_software_name="floe-fuzz", client_software_version="1")
    return {int(a.api_key): (int(a.min_version), int(a.max_version)) for a in resp.api_keys}


def create_fuzz_topics(host: str, port: int) -> dict[str, int]:
    """Create the fuzz topics (existing ones are left as they are); name -> error code."""
    m = _module(19, 7)
    topics = tuple(
        m.CreatableTopic(
            name=name,
            num_partitions=partitions,
            replication_factor=1,
            assignments=(),
            configs=tuple(m.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()),
        )
        for name, (partitions, configs) in FUZZ_TOPICS.items()
    )
    with KioClient(host, port) as client:
        resp = client.call(
            m.CreateTopicsRequest(
                topics=topics, timeout=datetime.timedelta(seconds=10), validate_only=False
            )
        )
    return {t.name: int(t.error_code) for t in resp.topics}


def topic_ids(host: str, port: int, names: list[str]) -> dict[str, uuid.UUID]:
    """Topic ids by name (Metadata v12), for the topics that exist."""
    m = _module(3, 12)
    request = m.MetadataRequest(
        topics=tuple(m.MetadataRequestTopic(name=n, topic_id=uuid.UUID(int=0)) for n in names),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    with KioClient(host, port) as client:
        resp = client.call(request)
    return {t.name: t.topic_id for t in resp.topics if t.name and int(t.error_code) == 0}


def targets(ids: dict[str, uuid.UUID]) -> list[Topic]:
    """Every topic the mutators aim at, with ids where known."""
    zero = uuid.UUID(int=0)
    out = [
        Topic(name, "compact" if "compact" in name else "plain", partitions, ids.get(name, zero))
        for name, (partitions, _) in FUZZ_TOPICS.items()
    ]
    out += [Topic(name, "internal", 1, ids.get(name, zero)) for name in INTERNAL_TOPICS]
    out.append(Topic("fuzz-auto", "missing", 1, uuid.uuid4()))
    return out


def fill_big_topic(host: str, port: int, mib: int) -> int:
    """Create :data:`BIG_TOPIC` and append ``mib`` MiB of honest batches; the bytes acked.

    Raises:
        RuntimeError: the broker refused a batch.
    """
    m = _module(19, 7)
    topic = m.CreatableTopic(
        name=BIG_TOPIC, num_partitions=1, replication_factor=1, assignments=(), configs=()
    )
    request = m.CreateTopicsRequest(
        topics=(topic,), timeout=datetime.timedelta(seconds=10), validate_only=False
    )
    acked = 0
    with KioClient(host, port) as client:
        client.call(request)
        for i in range(mib * 8):
            batch = batches.honest(128, value_size=1000).encode()
            body = wire.string(None, False) + wire.I16.pack(1) + wire.I32.pack(10000)
            body += wire.I32.pack(1) + wire.string(BIG_TOPIC.encode(), False)
            body += wire.I32.pack(1) + wire.I32.pack(0) + wire.bytes_field(batch, False)
            reply = client.raw(wire.frame(wire.request_header(0, 3, i + 1, b"fuzz", False) + body))
            part = decode_response(0, 3, reply).responses[0].partition_responses[0]
            if int(part.error_code) != 0:
                raise RuntimeError(f"{BIG_TOPIC} refused an honest batch: {part}")
            acked += len(batch)
    return acked
