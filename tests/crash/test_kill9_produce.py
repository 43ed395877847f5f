"""``kill -9`` the broker repeatedly under an acks=all producer; nothing acknowledged is lost.

Invariants checked after the last restart:
- each partition's log is dense: offsets 0..high-1, each holding a record this test
  produced to that partition;
- every acknowledged record is at the partition and offset its acknowledgement named;
- a record appears more than once only if a crash fell between its produce() call and
  its acknowledgement (a retried batch whose first attempt was written: the producer is
  not idempotent, so that duplicate is allowed; its count is reported).
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable

import pytest

from helpers.admin import create_topic
from helpers.broker import Broker
from helpers.streaming import SequenceStream, read_sequences

CRASHES = 8


@pytest.mark.crash
@pytest.mark.parametrize(("partitions", "codec"), [(1, "none"), (3, "lz4")])
def test_acknowledged_records_survive_repeated_kill9(
    engine_broker_factory: Callable[..., Broker], partitions: int, codec: str
) -> None:
    b = engine_broker_factory({"log.segment.bytes": "65536"})
    topic = create_topic(b.bootstrap, partitions=partitions)
    rng = random.Random(20260501 + partitions)
    stream = SequenceStream(b.bootstrap, topic, partitions, idempotent=False, codec=codec)
    stream.thread.start()
    try:
        for crash in range(CRASHES):
            stream.wait_for_acks(len(stream.acked) + 200)  # it is really streaming
            time.sleep(rng.uniform(0.05, 1.5))  # a random moment, not synchronization
            b.kill()
            # only now: a record produced before the broker died may have been sent to
            # it (bumped before the kill, such a record was counted as produced after
            # the crash, and its retry's duplicate failed a CI run on a loaded machine)
            stream.generation += 1
            if b.on_object_storage and crash % 2:  # and the disk is gone: the bucket has all
                b.lose_disk()
            b.start()
        stream.wait_for_acks(len(stream.acked) + 500)
    finally:
        stream.stop.set()
        stream.thread.join(120)
    assert not stream.thread.is_alive(), "producer did not finish flushing"

    seqs = read_sequences(b.bootstrap, topic, partitions)
    produced = set(stream.produced_gen)
    assert all(set(s) <= produced for s in seqs.values()), "records nobody produced"

    for seq, (p, offset, _) in stream.acked.items():
        assert offset < len(seqs[p]), f"seq {seq} acked at {p}/{offset}, log ends earlier"
        assert seqs[p][offset] == seq, f"acked seq {seq} at {p}/{offset}, log has {seqs[p][offset]}"

    counts = Counter(s for ss in seqs.values() for s in ss)
    duplicated = {s: n for s, n in counts.items() if n > 1}
    for seq in duplicated:
        ack = stream.acked.get(seq)
        assert ack is None or ack[2] != stream.produced_gen[seq], (
            f"seq {seq} appears {counts[seq]} times but no crash fell between its send "
            f"and its acknowledgement"
        )
    unresolved = len(stream.produced_gen) - len(stream.acked) - len(stream.failed)
    print(
        f"crash test ({partitions} partitions, {codec}): {len(stream.produced_gen)} produced, "
        f"{len(stream.acked)} acked, {len(stream.failed)} failed, {unresolved} unresolved, "
        f"log {sum(map(len, seqs.values()))} records, {len(duplicated)} duplicated records "
        f"({sum(duplicated.values()) - len(duplicated)} extra copies)"
    )
    b.stop()
