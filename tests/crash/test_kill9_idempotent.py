"""``kill -9`` the broker repeatedly under an idempotent acks=all producer.

The producer (confluent-kafka, ``enable.idempotence=true``) retries every batch whose
answer was lost in a crash; the broker's producer state, rebuilt from the log on each
start, answers retries of batches it already holds with their original offsets. After
the last restart each partition holds every produced record exactly once, in produce
order, with no gaps, and every acknowledgement names the record's real offset.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

import pytest

from helpers.admin import create_topic
from helpers.broker import Broker
from helpers.streaming import SequenceStream, read_sequences

CRASHES = 5
PARTITIONS = 2


@pytest.mark.crash
def test_idempotent_producer_exactly_once_across_kill9(
    engine_broker_factory: Callable[..., Broker],
) -> None:
    b = engine_broker_factory({"log.segment.bytes": "65536"})
    topic = create_topic(b.bootstrap, partitions=PARTITIONS)
    rng = random.Random(20261122)
    stream = SequenceStream(
        b.bootstrap, topic, PARTITIONS, idempotent=True, message_timeout_ms=90000
    )
    stream.thread.start()
    try:
        for crash in range(CRASHES):
            stream.wait_for_acks(len(stream.acked) + 200)
            time.sleep(rng.uniform(0.05, 1.0))
            b.kill()
            if b.on_object_storage and crash % 2:  # and the disk is gone: the bucket has all
                b.lose_disk()
            b.start()
        stream.wait_for_acks(len(stream.acked) + 300)
    finally:
        stream.stop.set()
        stream.thread.join(150)
    assert not stream.thread.is_alive(), "producer did not finish flushing"
    assert not stream.failed, (
        f"{len(stream.failed)} failed, e.g. {next(iter(stream.failed.items()))}"
    )
    assert len(stream.acked) == stream.produced

    seqs = read_sequences(b.bootstrap, topic, PARTITIONS)
    for p in range(PARTITIONS):
        expected = list(range(p, stream.produced, PARTITIONS))
        assert seqs[p] == expected, (
            f"partition {p}: {len(seqs[p])} records vs {len(expected)} produced; "
            f"duplicates {len(seqs[p]) - len(set(seqs[p]))}"
        )
    for seq, (p, offset, _) in stream.acked.items():
        assert seqs[p][offset] == seq, f"seq {seq} acked at {p}/{offset}"
