"""A large backlog catches up in bounded rounds with bounded worker memory.

2,000 records of 900 KB (1.8 GB) wait in one partition when the table topic starts
(after an outage, say). They must land in several rounds of at most
``table.topic.round.max.bytes`` each (every round its own commit), read by Spark tasks
of at most 64 MiB, converted in batches of at most 16 MiB: the Spark Python workers'
memory is bounded by bytes, not by the record count. Real Spark, real catalog, table
topics in this process (tests/helpers/tables.py).
"""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import pytest

from floe.types import PartitionId, TopicName
from helpers.spark import SPARK_WARNING_FILTERS
from helpers.tables import Lake, Node

pytestmark = [*SPARK_WARNING_FILTERS, pytest.mark.timeout(600)]

RECORDS = 2000
RECORD_BYTES = 900 * 1024
WORKER_RSS_BOUND = 600 * 1024 * 1024
"""Per Spark Python worker. Unbounded, one worker would hold the whole 1.8 GB backlog
twice (the records, then the Arrow batch)."""


def python_workers() -> dict[int, int]:
    """RSS in bytes of every Spark Python worker process (pyspark.daemon and its forks)."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            if b"pyspark.daemon" not in cmdline and b"pyspark/daemon" not in cmdline:
                continue
            for line in (entry / "status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    out[int(entry.name)] = int(line.split()[1]) * 1024
        except OSError:
            continue
    return out


class RssSampler:
    """Samples the workers' RSS every 0.2 s in a thread; keeps the peak per process."""

    def __init__(self) -> None:
        self.peak: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            for pid, rss in python_workers().items():
                self.peak[pid] = max(rss, self.peak.get(pid, 0))

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def test_a_large_backlog_catches_up_in_bounded_rounds(lake: Lake) -> None:
    node: Node = lake.node("backlog")
    block = os.urandom(1024)

    async def scenario() -> list[int]:
        node.create("big", configs={"table.topic.convert.value.type": "raw"})
        for i in range(RECORDS):
            node.produce("big", 0, [i.to_bytes(4, "big") + block * 900])
        plog = node.store.partition(TopicName("big"), PartitionId(0))
        assert plog.size_bytes > RECORDS * RECORD_BYTES
        with RssSampler() as rss:
            await node.start()
            coordinator = node.coordinator("big")
            done = PartitionId(0)
            await node.wait_for(lambda: coordinator.state.committed.get(done) == RECORDS, 300)
            state = coordinator.state
            await node.stop()
        table = node.table("big")
        added = [
            int(s.summary.additional_properties["added-records"])
            for s in table.metadata.snapshots
            if "added-records" in s.summary.additional_properties
        ]
        peak = max(rss.peak.values())
        print(
            f"\nrounds={state.rounds} rows per round={added} "
            f"worker peak RSS={peak / 2**20:.0f} MiB over {len(rss.peak)} workers"
        )
        assert sum(added) == RECORDS == table.scan().count()
        assert peak < WORKER_RSS_BOUND, f"a Spark Python worker reached {peak / 2**20:.0f} MiB"
        return added

    try:
        added = asyncio.run(scenario())
    finally:
        node.close()
    limit = 512 * 1024 * 1024 // (RECORD_BYTES + 100) + 1  # round.max.bytes default
    assert len(added) >= 4 and max(added) <= limit
