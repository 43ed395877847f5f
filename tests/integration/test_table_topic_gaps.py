"""No record goes missing from a table topic without a count and a reason, through real
Spark and a real Iceberg catalog (table topics in this process: tests/helpers/tables.py).

Records deleted while a round reads them are counted lost once, and the count survives
a restart; retention waits for the table; unusable batches in the log are bad records
for the errors tolerance; only fsynced data is materialized.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import crc32c
import pytest

from floe.protocol.batch import scan
from floe.protocol.records import Record, decode_batch, encode_batch
from floe.tabletopic.model import (
    DLQ_ERROR_CLASS_HEADER,
    DLQ_LAST_OFFSET_HEADER,
    DLQ_OFFSET_HEADER,
    DLQ_REASON_HEADER,
)
from floe.tabletopic.spark import job
from floe.types import Offset, PartitionId, TopicName
from helpers.spark import SPARK_WARNING_FILTERS
from helpers.tables import Lake, Node, unique

pytestmark = [*SPARK_WARNING_FILTERS, pytest.mark.timeout(300)]

SMALL_SEGMENTS = {"segment.bytes": "200"}  # every batch below gets its own segment


def produce_batches(node: Node, topic: str, batches: int, size: int = 4) -> None:
    for b in range(batches):
        node.produce(topic, 0, [f"{b}-{i}-".encode() + b"x" * 100 for i in range(size)])


def restart(node: Node, lake: Lake) -> None:
    node.manager = type(node.manager)(
        node.store, node.config, spark_factory=lambda: lake.spark, cluster_id="cluster-a"
    )


def test_records_deleted_while_a_round_reads_are_counted_lost_once(
    node: Node, lake: Lake, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = job.write_round
    deleted = threading.Event()

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        node.create("gone", configs=SMALL_SEGMENTS)
        plog = node.store.partition(TopicName("gone"), PartitionId(0))

        def write_round(*args: Any, **kwargs: Any) -> Any:
            if not deleted.is_set():  # planned [0, 40); now half of it goes
                loop.call_soon_threadsafe(plog.delete_records, Offset(20))
                time.sleep(0.5)
                deleted.set()
            return real(*args, **kwargs)

        monkeypatch.setattr(job, "write_round", write_round)
        produce_batches(node, "gone", 10)
        await node.start()
        rows = await node.wait_rows("gone", 20)
        # the rows are visible a moment before the coordinator applies its round
        await node.wait_for(lambda: node.coordinator("gone").state.committed == {0: 40})
        state = node.coordinator("gone").state
        await node.stop()
        assert deleted.is_set()
        assert unique(rows) and [o for _, o, _ in rows] == list(range(20, 40))
        assert state.lost_total == 20 and state.committed == {0: 40}
        restart(node, lake)  # the count is the table's: not counted again, not forgotten
        await node.start()
        await node.wait_for(lambda: not node.coordinator("gone").state.pending)
        again = node.coordinator("gone").state
        await node.stop()
        assert again.lost_total == 20

    asyncio.run(scenario())


def test_retention_waits_until_the_table_has_the_records(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    from helpers.tables import DEADLINE_S

    release = threading.Event()
    real = job.commit_round

    def held(*args: Any, **kwargs: Any) -> Any:
        release.wait(DEADLINE_S)
        return real(*args, **kwargs)

    monkeypatch.setattr(job, "commit_round", held)

    async def scenario() -> None:
        node.create("kept", configs={**SMALL_SEGMENTS, "retention.ms": "1000"})
        produce_batches(node, "kept", 10)
        plog = node.store.partition(TopicName("kept"), PartitionId(0))
        await node.start()
        await asyncio.sleep(2)  # the first round is held at its commit
        future = int(time.time() * 1000) + 60_000
        node.store.run_maintenance(future)  # every record is past retention.ms
        assert plog.log_start_offset == 0, "retention deleted records the table lacks"
        assert plog.held_bytes > 0
        release.set()
        rows = await node.wait_rows("kept", 40)
        await node.wait_for(lambda: plog.retention_hold == 40)
        node.store.run_maintenance(future)
        await node.stop()
        assert unique(rows) and len(rows) == 40
        assert plog.log_start_offset > 0 and plog.held_bytes == 0  # now it may go

    asyncio.run(scenario())


def test_without_retention_wait_deleted_records_are_counted_lost(node: Node) -> None:
    async def scenario() -> None:
        configs = {**SMALL_SEGMENTS, "retention.ms": "1000", "table.topic.retention.wait": "false"}
        node.create("unheld", configs=configs)
        produce_batches(node, "unheld", 10)
        node.store.run_maintenance(int(time.time() * 1000) + 60_000)
        start = node.store.partition(TopicName("unheld"), PartitionId(0)).log_start_offset
        assert start > 0
        await node.start()
        rows = await node.wait_rows("unheld", 40 - start)
        state = node.coordinator("unheld").state
        await node.stop()
        assert len(rows) == 40 - start and state.lost_total == start

    asyncio.run(scenario())


def unusable(node: Node, topic: str, how: str) -> bytes:
    """Append a batch of 3 records the reader cannot use, with a valid CRC; returns it."""
    plog = node.store.partition(TopicName(topic), PartitionId(0))
    base = plog.log_end_offset
    now = int(time.time() * 1000)
    buf = bytearray(
        encode_batch([Record(base + i, now, None, b"bad") for i in range(3)], base_offset=base)
    )
    if how == "codec":
        buf[22] = (buf[22] & ~0x07) | 0x05  # compression type 5: unknown
    else:  # "framing": the first record's length varint claims far more bytes
        buf[61] = 0x7E
    buf[17:21] = crc32c.crc32c(bytes(buf[21:])).to_bytes(4, "big")
    plog.append(buf, scan(buf), now)
    return bytes(plog.read(base, 1 << 20))  # as stored (the log sets nothing on append)


@pytest.mark.parametrize("tolerance", ["all", "none"])
def test_unusable_batches_are_bad_records(node: Node, tolerance: str) -> None:
    async def scenario() -> None:
        node.create("broken", configs={"table.topic.errors.tolerance": tolerance})
        node.produce("broken", 0, [b"a", b"b", b"c", b"d", b"e"])
        unusable(node, "broken", "codec")
        unusable(node, "broken", "framing")
        node.produce("broken", 0, [b"f", b"g", b"h", b"i", b"j"])
        await node.start()
        coordinator = node.coordinator("broken")
        if tolerance == "all":
            rows = await node.wait_rows("broken", 10)
            await asyncio.sleep(2)
            state = coordinator.state
            await node.stop()
            assert [v for _, _, v in rows] == list("abcdefghij")
            assert state.skipped_total == 6 and state.committed == {0: 16}
            assert state.last_error is None
        else:
            await node.wait_for(lambda: coordinator.state.stopped)
            state = coordinator.state
            await node.stop()
            assert state.last_error is not None
            assert "offset 5" in state.last_error and "unusable batch" in state.last_error

    asyncio.run(scenario())


def test_an_unusable_batch_goes_to_the_dead_letter_topic_as_it_is(node: Node) -> None:
    """Its records cannot be read one by one, so the batch is one dead letter: the
    batch's bytes as the log holds them, with the offsets it spans and why."""

    from floe.cli.dlq import replay  # (importing the CLI at collection hides hypothesis)

    async def scenario() -> None:
        node.create(
            "broken_dlq",
            configs={"table.topic.errors.tolerance": "all", "table.topic.errors.dlq.topic": "true"},
        )
        node.produce("broken_dlq", 0, [b"a", b"b"])
        raw = unusable(node, "broken_dlq", "codec")
        node.produce("broken_dlq", 0, [b"c"])
        await node.start()
        await node.wait_rows("broken_dlq", 3)  # committed after its dead letters
        await node.wait_for(lambda: node.coordinator("broken_dlq").state.committed == {0: 6})
        state = node.coordinator("broken_dlq").state
        host, port = node.config.values["host"], node.config.values["kafka.port"]
        counted = await asyncio.to_thread(
            replay, f"{host}:{port}", "broken_dlq.dlq", dry_run=True
        )  # counted apart, never replayed
        await node.stop()
        assert (counted["unusable_batches"], counted["dead_letters"]) == (1, 0)
        assert state.skipped_total == 3
        dlq = node.store.partition(TopicName("broken_dlq.dlq"), PartitionId(0))
        data = dlq.read(Offset(0), 1 << 20)
        letters = [r for h in scan(data) if not h.is_control for r in decode_batch(data, h)]
        assert len(letters) == 1
        headers = dict(letters[0].headers)
        assert letters[0].key is None and letters[0].value == raw
        assert (headers[DLQ_OFFSET_HEADER], headers[DLQ_LAST_OFFSET_HEADER]) == (b"2", b"4")
        assert headers[DLQ_ERROR_CLASS_HEADER] == b"unusable_batch"
        assert b"unusable batch" in (headers[DLQ_REASON_HEADER] or b"")

    asyncio.run(scenario())


def test_only_fsynced_records_are_materialized(lake: Lake) -> None:
    node = lake.node(
        "synced",
        **{"log.flush.policy": "interval", "log.flush.interval.ms": "3600000"},
    )

    async def scenario() -> None:
        node.create("synced")
        node.produce("synced", 0, [b"a", b"b", b"c"])
        plog = node.store.partition(TopicName("synced"), PartitionId(0))
        assert plog.durable_offset == 0  # nothing fsynced for an hour
        await node.start()
        rows = await node.wait_rows("synced", 3)
        await node.stop()
        assert len(rows) == 3
        assert plog.durable_offset >= 3  # the round fsynced before it read

    try:
        asyncio.run(scenario())
    finally:
        node.close()


def test_a_table_ahead_of_its_log_waits_says_so_and_counts_what_it_skips(
    node: Node, lake: Lake
) -> None:
    """The log ends below the table's committed offsets (truncated, or restored from an
    older copy): the partition waits with an error in status and metrics; once the log
    passes the committed end again it resumes, counting the offsets it never got."""
    from floe.admin import TableStatusService
    from floe.observability.collectors import table_families

    async def scenario() -> None:
        node.create("ahead")
        node.produce("ahead", 0, values_of("a", 10))
        await node.start()
        await node.wait_rows("ahead", 10)
        await node.stop()
        name = "{}.{}".format(*node.table_name("ahead"))
        await asyncio.to_thread(
            lake.sql, f"ALTER TABLE floe.{name} SET TBLPROPERTIES ('floe.offsets'='{{\"0\":15}}')"
        )
        restart(node, lake)
        await node.start()
        coordinator = node.coordinator("ahead")
        await node.wait_for(lambda: coordinator.state.ahead != {})
        service = TableStatusService(node.store, node.config, node.manager)
        (status,) = await service.status("ahead")
        (metric,) = [
            m for m in table_families([status], {}) if m.name == "floe_tabletopic_offsets_ahead"
        ]
        assert status.status == "failing"
        error = status.partitions[0].error
        assert error is not None and "log ends at 10" in error, error
        assert metric.samples[0].value == 5
        node.produce("ahead", 0, values_of("b", 8))  # offsets 10..17: 10..14 never land
        rows = await node.wait_rows("ahead", 13)
        await asyncio.sleep(2)
        state = coordinator.state
        (status,) = await service.status("ahead")
        await node.stop()
        assert [o for _, o, _ in rows] == [*range(10), 15, 16, 17]
        assert state.lost_total == 5 and state.ahead == {}
        assert status.status == "ok" and status.lost_records == 5

    asyncio.run(scenario())


def values_of(prefix: str, n: int) -> list[bytes | None]:
    return [f"{prefix}{i}".encode() for i in range(n)]


def test_a_broker_holds_its_partitions_at_the_tables_committed_end(node: Node) -> None:
    """In a cluster whose brokers share partitions, a broker leads partitions of a table
    topic another broker coordinates: before each maintenance pass it holds them at the
    committed end it reads from the table (all of the log while there is no table), and
    releases them once the topic is no longer a table topic."""
    from floe.tabletopic.holds import TableHolds

    def here(meta: object) -> bool:  # another broker coordinates every table topic
        return False

    holds = TableHolds(node.store, node.config, lambda t, p: True, here, lambda: node.cluster_id)
    future = int(time.time() * 1000) + 60_000  # every record is past retention.ms

    async def maintain() -> None:
        await holds.refresh()
        holds.apply()
        node.store.run_maintenance(future)

    async def scenario() -> None:
        node.create("shared", configs={**SMALL_SEGMENTS, "retention.ms": "1000"})
        produce_batches(node, "shared", 10)
        plog = node.store.partition(TopicName("shared"), PartitionId(0))
        await maintain()
        assert plog.log_start_offset == 0, "retention deleted records before the table"
        await node.start()
        await node.wait_rows("shared", 40)
        await node.stop()
        plog.set_retention_hold(None)  # the writer's hold: a member's partition has none
        produce_batches(node, "shared", 10)  # not in the table
        await maintain()
        assert plog.retention_hold == 40
        assert plog.log_start_offset == 40, "retention went past the table's end"
        node.alter("shared", {"table.topic.enable": "false"})
        await maintain()
        assert plog.retention_hold is None
        assert plog.log_start_offset > 40  # no table to wait for: retention goes on

    asyncio.run(scenario())
