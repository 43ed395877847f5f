"""Metric families built at scrape time from what the broker already keeps.

Names follow Apache Kafka's, as Prometheus' JMX exporter spells them (``kafka_server_*``,
``kafka_network_*``, ``kafka_log_*``; its example Kafka rules), and kafka_exporter's for
consumer group lag (``kafka_consumergroup_*``); what Kafka has no metric for is
``floe_*``. Every function here reads plain data and does no I/O, so a scrape costs
the broker nothing between scrapes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
    SummaryMetricFamily,
)

from floe.admin import TableStatus
from floe.admin.tables import STATUS_FAILING, STATUS_STOPPED
from floe.broker.stats import BrokerStats, Histogram
from floe.cluster.membership import Membership
from floe.errors import ErrorCode
from floe.storage.interface import PartitionLog
from floe.storage.object.bucket import BucketStats
from floe.storage.object.wal import WalWriter
from floe.tabletopic.model import TableState
from floe.types import TopicName


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return str(code)


def _buckets(hist: Histogram) -> list[tuple[str, float]]:
    return [("+Inf" if b == float("inf") else repr(b), n) for b, n in hist.cumulative()]


def broker_families(stats: BrokerStats, api_names: Mapping[int, str]) -> list[Metric]:
    """Per-topic traffic, per-API requests, latencies and errors, open connections."""
    bytes_in = CounterMetricFamily(
        "kafka_server_brokertopicmetrics_bytesin",
        "Bytes of record batches appended by Produce.",
        labels=["topic"],
    )
    bytes_out = CounterMetricFamily(
        "kafka_server_brokertopicmetrics_bytesout",
        "Bytes of record batches returned by Fetch.",
        labels=["topic"],
    )
    messages_in = CounterMetricFamily(
        "kafka_server_brokertopicmetrics_messagesin",
        "Records appended by Produce.",
        labels=["topic"],
    )
    messages_out = CounterMetricFamily(
        "kafka_server_brokertopicmetrics_messagesout",
        "Records returned by Fetch (control records excluded).",
        labels=["topic"],
    )
    for topic, t in sorted(stats.topics.items()):
        bytes_in.add_metric([topic], t.bytes_in)
        bytes_out.add_metric([topic], t.bytes_out)
        messages_in.add_metric([topic], t.messages_in)
        messages_out.add_metric([topic], t.messages_out)
    requests = CounterMetricFamily(
        "kafka_network_requestmetrics_requests",
        "Requests answered, per API.",
        labels=["request"],
    )
    latency = HistogramMetricFamily(
        "kafka_network_requestmetrics_totaltime_seconds",
        "Time from a request read to its response written (long polls included), per API.",
        labels=["request"],
    )
    for key, hist in sorted(stats.latency.items()):
        name = api_names.get(key, str(key))
        requests.add_metric([name], hist.count)
        latency.add_metric([name], _buckets(hist), hist.sum)
    errors = CounterMetricFamily(
        "kafka_network_requestmetrics_errors",
        "Error codes in responses (one per failed partition, topic or group), per API.",
        labels=["request", "error"],
    )
    for (key, code), n in sorted(stats.errors.items()):
        errors.add_metric([api_names.get(key, str(key)), _error_name(code)], n)
    connections = GaugeMetricFamily(
        "kafka_server_socketservermetrics_connection_count",
        "Kafka client connections open now.",
        value=stats.connections,
    )
    return [bytes_in, bytes_out, messages_in, messages_out, requests, latency, errors, connections]


def partition_families(partitions: Iterable[PartitionLog]) -> list[Metric]:
    """Log end and start offsets and size of every partition."""
    end = GaugeMetricFamily(
        "kafka_log_log_logendoffset",
        "Offset the next record appended to the partition gets.",
        labels=["topic", "partition"],
    )
    start = GaugeMetricFamily(
        "kafka_log_log_logstartoffset",
        "First offset still in the partition (retention, DeleteRecords).",
        labels=["topic", "partition"],
    )
    size = GaugeMetricFamily(
        "kafka_log_log_size",
        "Bytes of the partition's segments on disk (on object storage, with the objects "
        "holding what left the local cache).",
        labels=["topic", "partition"],
    )
    for plog in partitions:
        labels = [plog.topic, str(plog.partition)]
        end.add_metric(labels, plog.log_end_offset)
        start.add_metric(labels, plog.log_start_offset)
        size.add_metric(labels, plog.size_bytes)
    return [end, start, size]


def bucket_families(
    stats: BucketStats, partitions: Iterable[PartitionLog], wal: WalWriter | None
) -> list[Metric]:
    """The object-storage engine's requests and bytes, its WAL's PUTs and commits (those
    an acks=all produce waits for), and each partition's records not yet in the bucket
    (``storage.type = s3`` only)."""
    requests = CounterMetricFamily(
        "floe_s3_requests",
        "Requests to the bucket, per operation (what object storage bills).",
        labels=["operation"],
    )
    for operation in ("put", "get", "list", "delete"):
        requests.add_metric([operation], getattr(stats, f"{operation}s"))
    transferred = CounterMetricFamily(
        "floe_s3_bytes",
        "Bytes written to (put) and read from (get) the bucket.",
        labels=["direction"],
    )
    transferred.add_metric(["put"], stats.bytes_put)
    transferred.add_metric(["get"], stats.bytes_got)
    behind = GaugeMetricFamily(
        "floe_s3_partition_unuploaded_offsets",
        "Offsets of the partition appended but not yet in the bucket (acks=0/1 records "
        "waiting for the next WAL upload).",
        labels=["topic", "partition"],
    )
    cached = GaugeMetricFamily(
        "floe_s3_partition_cache_start_offset",
        "First offset of the partition in the local cache (storage.s3.cache.max.bytes); "
        "reads below it, down to the log start, are served from the bucket.",
        labels=["topic", "partition"],
    )
    for plog in partitions:
        labels = [plog.topic, str(plog.partition)]
        behind.add_metric(labels, plog.log_end_offset - plog.durable_offset)
        cached.add_metric(labels, plog.local_log_start_offset)
    families: list[Metric] = [requests, transferred, behind, cached]
    if wal is not None:
        families.append(SummaryMetricFamily(
            "floe_s3_wal_put_seconds",
            "WAL objects put in the bucket, and the time their PUTs took (acks=all waits "
            "for them).",
            count_value=wal.uploads, sum_value=wal.put_seconds,
        ))  # fmt: skip
        families.append(SummaryMetricFamily(
            "floe_s3_wal_commit_seconds",
            "WAL objects' commits asked of the metadata store (in a cluster), and the time "
            "from each ask to its answer, the wait for the store's thread included (acks=all "
            "waits for them after the PUT).",
            count_value=wal.commits, sum_value=wal.commit_seconds,
        ))  # fmt: skip
    return families


def cluster_families(membership: Membership) -> list[Metric]:
    """This broker's membership of the cluster (``cluster.metadata.url`` only)."""
    brokers = GaugeMetricFamily(
        "floe_cluster_brokers", "Live brokers of the cluster, as the last lease renewal saw."
    )
    brokers.add_metric([], len(membership.view.brokers))
    valid = GaugeMetricFamily(
        "floe_cluster_lease_valid_seconds",
        "How long this broker may still write without renewing its lease in the metadata "
        "store (0: it is refusing writes).",
    )
    valid.add_metric([], max(0.0, membership.valid_for_s()))
    losses = CounterMetricFamily(
        "floe_cluster_lease_losses",
        "Times this broker's lease lapsed (the store saw no renewal for a session timeout).",
    )
    losses.add_metric([], membership.lease_losses)
    owned = GaugeMetricFamily(
        "floe_cluster_partitions_owned", "Partitions this broker owns in the metadata store."
    )
    owned.add_metric([], len(membership.owned))
    fenced = GaugeMetricFamily(
        "floe_cluster_fenced",
        "1 when another broker took a partition of this one: it writes nothing until a restart.",
    )
    fenced.add_metric([], int(membership.fenced is not None))
    commits = SummaryMetricFamily(
        "floe_cluster_commit_seconds",
        "Commits of WAL objects' records run in the metadata store (the commit point), and "
        "the time they took there (their transactions, and the reads after a refused one).",
        count_value=membership.commits, sum_value=membership.commit_seconds,
    )  # fmt: skip
    requests = CounterMetricFamily(
        "floe_cluster_store_requests",
        "Requests this broker made of the metadata store, by operation (one etcd RPC or "
        "one PostgreSQL/SQLite transaction each).",
        labels=["operation"],
    )
    for operation, count in sorted(membership.store_requests.items()):
        requests.add_metric([operation], count)
    return [brokers, valid, losses, owned, fenced, commits, requests]


@dataclass(frozen=True)
class GroupOffset:
    """One committed offset of a consumer group."""

    group: str
    topic: str
    partition: int
    offset: int


def group_families(
    offsets: Iterable[GroupOffset], high_watermark: Callable[[str, int], int | None]
) -> list[Metric]:
    """Committed offset and lag (``high watermark - committed``, never negative) per
    group and partition; ``high_watermark`` answers ``None`` for a partition that no
    longer exists, which is left out."""
    current = GaugeMetricFamily(
        "kafka_consumergroup_current_offset",
        "Offset the consumer group committed.",
        labels=["consumergroup", "topic", "partition"],
    )
    lag = GaugeMetricFamily(
        "kafka_consumergroup_lag",
        "Records between the group's committed offset and the partition's high watermark.",
        labels=["consumergroup", "topic", "partition"],
    )
    for o in offsets:
        hw = high_watermark(o.topic, o.partition)
        if hw is None:
            continue
        labels = [o.group, o.topic, str(o.partition)]
        current.add_metric(labels, o.offset)
        lag.add_metric(labels, max(0, hw - o.offset))
    return [current, lag]


def table_families(
    statuses: Iterable[TableStatus], states: Mapping[TopicName, TableState | None]
) -> list[Metric]:
    """Per table topic: lag (as ``floe table status`` computes it), partitions ahead of
    their log, bytes retention holds for the table, the last round, counters of rows,
    files, rounds and failures (this process's; a coordinator restarted by a settings
    change starts them at 0), skipped and lost records (the table's own counts, from the
    status), whether it is stopped or failing. ``states`` holds the running
    coordinators' commit state."""
    part = ["topic", "partition"]
    lag_records = GaugeMetricFamily(
        "floe_tabletopic_lag_records",
        "Offsets between the table's committed end and the partition's log end.",
        labels=part,
    )
    lag_seconds = GaugeMetricFamily(
        "floe_tabletopic_lag_seconds",
        "Record time the table is behind the partition's newest record.",
        labels=part,
    )
    ahead = GaugeMetricFamily(
        "floe_tabletopic_offsets_ahead",
        "Offsets the table's committed end is beyond the partition's log end (log "
        "truncated or restored); the partition waits while this is above 0.",
        labels=part,
    )
    held = GaugeMetricFamily(
        "floe_tabletopic_retention_held_bytes",
        "Bytes retention would have deleted but keeps until the table materializes them.",
        labels=part,
    )
    topic = ["topic"]
    duration = GaugeMetricFamily(
        "floe_tabletopic_commit_duration_seconds",
        "Duration of the last committed round (Spark job and Iceberg commit).",
        labels=topic,
    )
    last_commit = GaugeMetricFamily(
        "floe_tabletopic_last_commit_timestamp_seconds",
        "When the table's newest Floe snapshot was committed (Unix time).",
        labels=topic,
    )
    rounds = CounterMetricFamily(
        "floe_tabletopic_rounds", "Rounds committed by this broker process.", labels=topic
    )
    rows = CounterMetricFamily(
        "floe_tabletopic_rows_committed", "Rows appended to the table.", labels=topic
    )
    files = CounterMetricFamily(
        "floe_tabletopic_files_committed", "Data files appended to the table.", labels=topic
    )
    failed = CounterMetricFamily(
        "floe_tabletopic_failed_rounds",
        "Rounds that failed (Spark job, catalog, bad record under errors.tolerance=none).",
        labels=topic,
    )
    skipped = CounterMetricFamily(
        "floe_tabletopic_records_skipped",
        "Bad records skipped under errors.tolerance (the count the table records).",
        labels=topic,
    )
    dead_lettered = CounterMetricFamily(
        "floe_tabletopic_records_dead_lettered",
        "Skipped records in the table topic's dead-letter topic (replay markers not counted).",
        labels=topic,
    )
    lost = CounterMetricFamily(
        "floe_tabletopic_records_lost",
        "Records that never reached the table: deleted from the log before they were "
        "materialized, missing when read, or at offsets the table was ahead of the log "
        "by (the count the table records).",
        labels=topic,
    )
    failing = GaugeMetricFamily(
        "floe_tabletopic_failing",
        "1 while the table topic's last round or recovery failed, or a partition "
        "cannot advance (see floe table status).",
        labels=topic,
    )
    stopped = GaugeMetricFamily(
        "floe_tabletopic_stopped",
        "1 when a bad record under errors.tolerance=none stopped the table topic.",
        labels=topic,
    )
    for status in statuses:
        name = [status.topic]
        for p in status.partitions:
            labels = [status.topic, str(p.partition)]
            if p.lag_records is not None:
                lag_records.add_metric(labels, p.lag_records)
            if p.lag_seconds is not None:
                lag_seconds.add_metric(labels, p.lag_seconds)
            if p.committed_offset is not None:
                ahead.add_metric(labels, max(0, p.committed_offset - p.log_end_offset))
            held.add_metric(labels, p.retention_held_bytes)
        if status.last_commit_duration_s is not None:
            duration.add_metric(name, status.last_commit_duration_s)
        if status.last_commit_ms is not None:
            last_commit.add_metric(name, status.last_commit_ms / 1000)
        stopped.add_metric(name, 1 if status.status == STATUS_STOPPED else 0)
        failing.add_metric(name, 1 if status.status == STATUS_FAILING else 0)
        skipped.add_metric(name, status.skipped_records)
        if status.dead_letter_topic is not None:
            dead_lettered.add_metric(name, status.dead_lettered_records)
        lost.add_metric(name, status.lost_records)
        state = states.get(TopicName(status.topic))
        if state is None:
            continue
        rounds.add_metric(name, state.rounds)
        rows.add_metric(name, state.rows_total)
        files.add_metric(name, state.files_total)
        failed.add_metric(name, state.failed_rounds)
    return [
        lag_records,
        lag_seconds,
        ahead,
        held,
        duration,
        last_commit,
        rounds,
        rows,
        files,
        failed,
        skipped,
        dead_lettered,
        lost,
        stopped,
        failing,
    ]
