"""Table maintenance on Spark: Iceberg's own procedures, run by the broker's Spark.

One run (:func:`maintain`), in this order, each step its own Iceberg commit:

1. **Compaction**: ``rewrite_data_files`` (binpack, or sort when the table has a sort
   order) to ``target-file-size-bytes``, only where at least ``min-input-files`` small
   files can be combined, and wherever a data file has position deletes (an upsert
   table's), which the rewrite applies; ``partial-progress`` commits file groups as they
   finish, so a long compaction lands in pieces instead of racing the commit rounds for
   one big swap.
2. **Snapshot expiry**: ``expire_snapshots`` older than the age limit, keeping the last
   ``retain_last``. Floe's offsets live in the table properties, which no expiry
   touches, so nothing the pipeline resumes from goes (docs/table-topics.md).
3. **Orphan files**: ``remove_orphan_files`` older than the safety window (files a
   failed or cancelled round wrote and never committed). The window must outlast any
   round: a round's staged files are orphans until its commit.
4. **Manifests**: ``rewrite_manifests`` (a 1-s commit interval leaves one small
   manifest per commit).

Rounds go on meanwhile: a round's commit is a compare-and-swap rebuilt on the new
metadata when maintenance committed first (and the reverse: Iceberg retries
compaction's commit on top of new appends, which never conflict with a rewrite).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from floe.tabletopic.model import MaintenancePolicy, MaintenanceResult

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


STEP_ATTEMPTS = 3
RETRY_WAIT_S = 0.5
_CONCURRENT_COMMIT = ("ValidationException", "CommitFailedException")
"""Iceberg's refusals of a commit that another commit (a round's) overtook."""


def _ts(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _one(spark: SparkSession, sql: str) -> Mapping[str, Any]:
    """The procedure's one result row; tried again (up to :data:`STEP_ATTEMPTS` times)
    when a round's commit landed first and made Iceberg refuse the step's commit
    (rewrite_manifests: "could not be found in the latest snapshot")."""
    for attempt in range(1, STEP_ATTEMPTS + 1):
        try:
            rows = spark.sql(sql).collect()
            return rows[0].asDict() if rows else {}
        except Exception as exc:
            if attempt == STEP_ATTEMPTS or not any(c in str(exc) for c in _CONCURRENT_COMMIT):
                raise
            time.sleep(RETRY_WAIT_S * attempt)
    raise AssertionError("unreachable")


def _snapshot_ids(spark: SparkSession, table: str) -> set[int]:
    """The table's snapshot ids now (the rounds' new ones do not count as expired)."""
    return {int(r[0]) for r in spark.sql(f"SELECT snapshot_id FROM {table}.snapshots").collect()}


def maintain(
    spark: SparkSession,
    catalog: str,
    table: tuple[str, str],
    policy: MaintenancePolicy,
    job_group: str,
) -> MaintenanceResult:
    """One maintenance run of ``<catalog>.<table>`` (blocking: call it in a worker
    thread); its Spark jobs belong to ``job_group`` (cancel with
    :func:`floe.tabletopic.spark.job.cancel`).

    Raises:
        Exception: a procedure failed (py4j/pyspark errors); the steps before it landed.
    """
    started = time.time()
    now_ms = int(started * 1000)
    spark.sparkContext.setJobGroup(job_group, f"floe maintenance {table[0]}.{table[1]}", True)
    name = _quote(f"{table[0]}.{table[1]}")
    jvm = spark._jvm
    assert jvm is not None
    loaded = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
        spark._jsparkSession, f"{catalog}.{table[0]}.{table[1]}"
    )
    strategy = "binpack" if loaded.sortOrder().isUnsorted() else "sort"
    options = {
        "target-file-size-bytes": str(policy.target_file_size_bytes),
        "min-input-files": str(policy.min_input_files),
        "partial-progress.enabled": "true",
        # an upsert table's position deletes: a data file with any is rewritten without
        # its deleted rows
        "delete-file-threshold": "1",
    }
    option_sql = ", ".join(f"{_quote(k)}, {_quote(v)}" for k, v in options.items())
    rewrite = _one(
        spark,
        f"CALL {catalog}.system.rewrite_data_files(table => {name}, "
        f"strategy => {_quote(strategy)}, options => map({option_sql}))",
    )
    before = _snapshot_ids(spark, f"{catalog}.{table[0]}.{table[1]}")
    expire = _one(
        spark,
        f"CALL {catalog}.system.expire_snapshots(table => {name}, "
        f"older_than => TIMESTAMP {_quote(_ts(now_ms - policy.snapshot_max_age_ms))}, "
        f"retain_last => {policy.retain_last})",
    )
    expired = len(before - _snapshot_ids(spark, f"{catalog}.{table[0]}.{table[1]}"))
    orphans = spark.sql(
        f"CALL {catalog}.system.remove_orphan_files(table => {name}, "
        f"older_than => TIMESTAMP {_quote(_ts(now_ms - policy.orphan_age_ms))})"
    ).count()
    manifests = _one(spark, f"CALL {catalog}.system.rewrite_manifests(table => {name})")
    deleted = sum(
        int(v or 0) for k, v in expire.items() if k.startswith("deleted_") and k.endswith("_count")
    )
    return MaintenanceResult(
        started_ms=now_ms,
        duration_s=round(time.time() - started, 3),
        rewritten_files=int(rewrite.get("rewritten_data_files_count") or 0),
        added_files=int(rewrite.get("added_data_files_count") or 0),
        rewritten_bytes=int(rewrite.get("rewritten_bytes_count") or 0),
        expired_snapshots=expired,
        deleted_files=deleted,
        orphan_files=int(orphans),
        rewritten_manifests=int(manifests.get("rewritten_manifests_count") or 0),
        added_manifests=int(manifests.get("added_manifests_count") or 0),
    )
