"""confluent-kafka batches are stored compressed, with the codec the producer chose.

librdkafka enables lz4 only once the broker advertises FindCoordinator (its feature
detection); before Floe had a group coordinator, lz4 batches silently went out
uncompressed. This reads the segment files and checks each batch's codec attribute.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from floe.protocol import batch
from helpers.admin import create_topic
from helpers.clients import confluent_produce
from helpers.records import Record

CODEC_IDS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def stored_codecs(data_dir: Path, topic: str) -> set[int]:
    codecs: set[int] = set()
    for segment in sorted((data_dir / "logs" / f"{topic}-0").glob("*.log")):
        data = segment.read_bytes()
        codecs |= {h.compression for h in batch.scan(data, verify_crc=False, partial_ok=True)}
    return codecs


@pytest.mark.parametrize("codec", sorted(CODEC_IDS))
def test_confluent_batches_are_stored_compressed(broker: Any, codec: str) -> None:
    topic = create_topic(broker.bootstrap)
    value = b"floe compresses well " * 20
    confluent_produce(
        broker.bootstrap,
        topic,
        [Record(str(i).encode(), value, partition=0) for i in range(200)],
        compression=codec,
    )
    assert stored_codecs(broker.data_dir, topic) == {CODEC_IDS[codec]}
