"""Commit rounds of table topics: one coordinator task per table topic.

:class:`TableTopicManager` (owned by the broker's event loop) polls the store's topics
every second and keeps one :class:`TableCoordinator` task per topic with
``table.topic.enable=true``; disabling or deleting the topic stops the task and keeps
the table; changing the topic's table settings restarts it.

A round (every ``commit.interval.ms``): per partition, the range
``[committed end, last stable offset)``; no new data, no commit; else one Spark job that
reads the ranges, converts and appends them in **one** Iceberg commit whose snapshot
summary carries ``floe.commit-id`` and ``floe.offsets`` (the committed end of every
partition). The commit state (:class:`~floe.tabletopic.model.TableState`) is recovered
from the table at start and after any failed round, so the committed offsets only ever
come from the table: a round that failed before its commit is redone, one whose commit
landed despite an error is not (exactly-once). Spark failures are logged in one line and
the round retried with exponential backoff (1 s doubling to 60 s); they never reach the
broker, and other table topics keep going.

Blocking work (Spark, pyiceberg catalog calls) runs in worker threads
(``asyncio.to_thread``); reading offsets from the store happens on the event loop.
Spark is started only when the first table topic needs it.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import re
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from floe.config import BrokerConfig
from floe.config import broker as keys
from floe.config.tabletopic import TableTopicConfig, resolve_table_topic
from floe.errors import ConfigError
from floe.storage.interface import Store, UnknownTopicOrPartitionError
from floe.storage.local.reader import Aborted
from floe.tabletopic import catalog as cat
from floe.tabletopic.convert import ConvertType
from floe.tabletopic.model import (
    COMMIT_ID_PROP,
    OFFSETS_PROP,
    TOPIC_PROP,
    PartitionRange,
    RoundResult,
    TableState,
    encode_offsets,
)
from floe.tabletopic.schemas import (
    PartPlan,
    RegistrySnapshot,
    SchemaNotCoveredError,
    SchemaUnavailableError,
    candidate_ids,
)
from floe.types import Offset, PartitionId, TopicName

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from floe.registry.core.service import Registry
    from floe.tabletopic.spark import SparkManager

log = logging.getLogger("floe.tabletopic.coordinator")

WATCH_INTERVAL_S = 1.0
BACKOFF_MIN_S = 1.0
BACKOFF_MAX_S = 60.0
TABLE_PROPERTIES = {
    "format-version": "2",
    # an unpartitioned append needs no shuffle before the write
    "write.distribution-mode": "none",
    # measured ~10-15% faster rounds than Iceberg's default zstd on the 2-core machine
    "write.parquet.compression-codec": "snappy",
}
"""Properties of the tables Floe creates (a user's ALTER TABLE later is kept)."""
SCHEMA_MODES = (ConvertType.BY_SCHEMA_ID, ConvertType.BY_LATEST_SCHEMA)
MAX_SCHEMA_REDOS = 20
"""Rounds redone in a row because workers met schema ids the table lacked; beyond, the
round counts as failed (backoff), so a misbehaving id cannot spin the coordinator."""


@dataclass(frozen=True)
class Part:
    """One part (value or key) of a round's records: how to decode it and the schema ids
    it should hold (see :func:`floe.tabletopic.schemas.candidate_ids`)."""

    name: str
    convert: ConvertType
    message: str | None
    ids: tuple[int, ...] = ()
    unknown: frozenset[int] = frozenset()

    def fit_args(self) -> tuple[ConvertType, str | None, list[int], set[int]]:
        return self.convert, self.message, list(self.ids), set(self.unknown)


class TableTopics:
    """The blocking side shared by all coordinators: the catalog client and Spark.

    Created by the manager on first use (cheap: starts nothing); its methods block (run
    them in a worker thread). ``catalog`` is the process's one catalog client
    (:class:`~floe.tabletopic.catalog.SharedCatalog`), also used by the admin API.
    """

    def __init__(self, settings: cat.CatalogSettings, spark: SparkManager, logs_dir: Path) -> None:
        self.settings = settings
        self.spark = spark
        self.logs_dir = logs_dir
        self.catalog = cat.SharedCatalog(settings)

    def spark_name(self, table: tuple[str, str]) -> str:
        return f"{self.settings.name}.{table[0]}.{table[1]}"

    def recover(self, topic: TopicName, table: tuple[str, str]) -> TableState:
        """The commit state recorded in the table (empty when there is no table yet)."""
        from pyiceberg.exceptions import NoSuchTableError

        try:
            loaded = cat.load_table(self.catalog(), *table)
        except NoSuchTableError:
            return TableState(topic, table)
        info = cat.latest_summary_with(loaded, OFFSETS_PROP)
        if info is None:
            return TableState(topic, table)
        return TableState.recovered(topic, table, info.summary, info.timestamp_ms)

    def prepare(
        self,
        cfg: TableTopicConfig,
        table: tuple[str, str],
        *,
        snapshot: RegistrySnapshot,
        parts: tuple[Part, Part],
        ranges: tuple[PartitionRange, ...],
        topic: TopicName,
    ) -> tuple[Table, PartPlan, PartPlan]:
        """Load the table, creating it (format version 2, the row layout) if missing,
        evolve it to hold the parts' schemas (one metadata commit when anything
        changes) and return it with each part's decoding plan.

        Raises:
            SchemaUnavailableError: a schema mode without a usable schema yet.
        """
        from pyiceberg.exceptions import NoSuchTableError, TableAlreadyExistsError

        from floe.tabletopic.schemas import HELD_PROP, first_schema, fit_table, held_ids, stage

        flatten = cfg.transform_value_type == "flatten"
        catalog = self.catalog()
        try:
            loaded = cat.load_table(catalog, *table)
        except NoSuchTableError:
            value, key = parts
            schema = first_schema(
                snapshot, value.fit_args()[:3], key.fit_args()[:3], flatten=flatten
            )
            if schema is None:
                parts = self._probe(snapshot, parts, ranges, topic)
                value, key = parts
                schema = first_schema(
                    snapshot, value.fit_args()[:3], key.fit_args()[:3], flatten=flatten
                )
            if schema is None:
                raise SchemaUnavailableError(
                    "no record read so far carries a registered schema id "
                    "(the table is created from the first one)"
                ) from None
            cat.ensure_namespace(catalog, table[0])
            try:
                loaded = catalog.create_table(table, schema, properties=TABLE_PROPERTIES)
                log.info("tabletopic.table_created table=%s.%s", *table)
            except TableAlreadyExistsError:
                loaded = cat.load_table(catalog, *table)
        changed: list[int] = []
        with loaded.transaction() as txn:

            def evolve(plan: Any) -> Any:
                with txn.update_schema() as update:
                    stage(update, plan.updates)
                changed.append(len(plan.updates))
                return txn.table_metadata.schema()

            held = held_ids(txn.table_metadata.properties)
            value_plan, key_plan = fit_table(
                txn.table_metadata.schema(),
                evolve,
                snapshot,
                parts[0].fit_args(),
                parts[1].fit_args(),
                flatten=flatten,
                held=held,
            )
            props = {
                HELD_PROP.format(part=p.part): json.dumps(sorted(p.covered | held[p.part]))
                for p in (value_plan, key_plan)
                if not p.covered <= held[p.part]
            }
            if props:
                txn.set_properties(props)
        if changed:
            loaded = cat.load_table(catalog, *table)
            log.info(
                "tabletopic.schema_evolved table=%s.%s updates=%d schema_id=%d",
                *table,
                sum(changed),
                loaded.schema().schema_id,
            )
        for plan in (value_plan, key_plan):
            for schema_id, reason in plan.refused.items():
                log.warning(
                    "tabletopic.schema_refused topic=%s part=%s schema_id=%d reason=%s",
                    topic,
                    plan.part,
                    schema_id,
                    reason,
                )
        return loaded, value_plan, key_plan

    def _probe(
        self,
        snapshot: RegistrySnapshot,
        parts: tuple[Part, Part],
        ranges: tuple[PartitionRange, ...],
        topic: TopicName,
    ) -> tuple[Part, Part]:
        """``by_schema_id`` parts without a candidate schema get the first registered
        schema id found in the round's records (read here, in the driver)."""
        from floe.storage.local.reader import read_range
        from floe.tabletopic.convert import wire

        wanted = [p.convert is ConvertType.BY_SCHEMA_ID and not p.ids for p in parts]
        found: list[int | None] = [None, None]
        for r in ranges:
            if not any(w and f is None for w, f in zip(wanted, found, strict=True)):
                break
            for _, records in read_range(self.logs_dir, topic, r.partition, r.start, r.end):
                for record in records:
                    for i, data in enumerate((record.value, record.key)):
                        if not wanted[i] or found[i] is not None or data is None:
                            continue
                        try:
                            schema_id = int(wire.split(data)[0])
                        except ValueError:
                            continue
                        if schema_id in snapshot.schemas:
                            found[i] = schema_id
                if not any(w and f is None for w, f in zip(wanted, found, strict=True)):
                    break
        out = list(parts)
        for i, first in enumerate(found):
            if first is not None:
                out[i] = Part(parts[i].name, parts[i].convert, parts[i].message, (first,))
        return out[0], out[1]

    def run_round(
        self,
        state: TableState,
        cfg: TableTopicConfig,
        ranges: tuple[PartitionRange, ...],
        aborted: Mapping[PartitionId, list[Aborted]],
        *,
        snapshot: RegistrySnapshot,
        parts: tuple[Part, Part],
    ) -> RoundResult:
        """One Spark job and its one commit; returns what the committed snapshot says.

        Raises:
            SchemaNotCoveredError: workers met a schema id the table lacks (redo).
            BadRecordError: a bad record under ``errors.tolerance = none``.
            SchemaUnavailableError: a schema mode has no usable schema yet.
            Exception: any other failure (the caller recovers state from the table).
        """
        from floe.tabletopic.spark.job import JobSpec, read_tasks, run_round

        started = time.monotonic()
        table, value_plan, key_plan = self.prepare(
            cfg, state.table, snapshot=snapshot, parts=parts, ranges=ranges, topic=state.topic
        )
        commit_id = uuid.uuid4().hex
        spec = JobSpec(
            topic=state.topic,
            logs_dir=str(self.logs_dir),
            schema=table.schema(),
            value=value_plan,
            key=key_plan,
            flatten=cfg.transform_value_type == "flatten",
            snapshot=snapshot,
            tolerance=cfg.errors_tolerance,
            tasks=read_tasks(ranges, aborted),
        )
        props = {
            COMMIT_ID_PROP: commit_id,
            OFFSETS_PROP: encode_offsets(state.next_offsets(ranges)),
            TOPIC_PROP: state.topic,
        }
        session = self.spark.session()
        skipped = run_round(session, self.spark_name(state.table), spec, props)
        table = cat.load_table(self.catalog(), *state.table)
        info = cat.latest_summary_with(table, COMMIT_ID_PROP)
        if info is None or info.summary.get(COMMIT_ID_PROP) != commit_id:
            raise RuntimeError(f"commit {commit_id} is not the table's newest floe commit")
        return RoundResult(
            commit_id=commit_id,
            committed_ms=info.timestamp_ms,
            duration_s=time.monotonic() - started,
            rows=int(info.summary.get("added-records", 0)),
            files=int(info.summary.get("added-data-files", 0)),
            skipped=skipped,
        )


@dataclass
class _Running:
    cfg: TableTopicConfig
    coordinator: TableCoordinator
    task: asyncio.Task[None]


class TableCoordinator:
    """Runs the commit rounds of one table topic, as one asyncio task.

    Owns its :class:`TableState` (replaced only by the model's validated updates) and
    the schema ids its workers reported; the manager creates it when the topic becomes
    a table topic and cancels its task when the topic stops being one, is deleted, or
    the broker stops. Nothing to clean up: a round cut short commits nothing (or
    committed, and recovery finds it).
    """

    def __init__(
        self,
        store: Store,
        topic: TopicName,
        cfg: TableTopicConfig,
        tables: Callable[[], TableTopics],
        registry: Registry | None = None,
    ) -> None:
        from floe.tabletopic.convert import table_identifier

        self.store = store
        self.topic = topic
        self.cfg = cfg
        self._tables = tables
        self._registry = registry
        self.table = table_identifier(cfg.namespace, topic)
        self.state: TableState | None = None
        self._seen: dict[str, set[int]] = {"value": set(), "key": set()}

    def ends(self) -> tuple[dict[PartitionId, Offset], dict[PartitionId, Offset]]:
        """(last stable offsets, log start offsets) per partition, read on the loop."""
        meta = self.store.topic(self.topic)
        if meta is None:
            raise UnknownTopicOrPartitionError(f"topic {self.topic} is gone")
        lso: dict[PartitionId, Offset] = {}
        starts: dict[PartitionId, Offset] = {}
        for p in range(meta.partitions):
            plog = self.store.partition(self.topic, PartitionId(p))
            lso[PartitionId(p)] = plog.last_stable_offset
            starts[PartitionId(p)] = plog.log_start_offset
        return lso, starts

    def schemas(self) -> tuple[RegistrySnapshot, tuple[Part, Part]]:
        """The registry's schemas and both parts' candidate ids (read on the loop).

        Raises:
            SchemaUnavailableError: a schema mode with the registry disabled, or a
                by_latest_schema subject without a version.
        """
        cfg = self.cfg
        specs = (
            (
                "value",
                cfg.convert_value_type,
                cfg.value_subject_for(self.topic),
                cfg.value_message_full_name,
            ),
            (
                "key",
                cfg.convert_key_type,
                cfg.key_subject_for(self.topic),
                cfg.key_message_full_name,
            ),
        )
        converts = [ConvertType(c) for _, c, _, _ in specs]
        if not any(c in SCHEMA_MODES for c in converts):
            return RegistrySnapshot(), (
                Part("value", converts[0], None),
                Part("key", converts[1], None),
            )
        if self._registry is None:
            raise SchemaUnavailableError(
                "schema modes need the built-in schema registry (registry.enable=false)"
            )
        snapshot = RegistrySnapshot.take(self._registry)
        parts = []
        for (name, _, subject, message), convert in zip(specs, converts, strict=True):
            if convert not in SCHEMA_MODES:
                parts.append(Part(name, convert, None))
                continue
            ids, unknown = candidate_ids(snapshot, convert, subject, sorted(self._seen[name]))
            parts.append(Part(name, convert, message or None, tuple(ids), frozenset(unknown)))
        return snapshot, (parts[0], parts[1])

    async def run(self) -> None:
        """Rounds forever (until cancelled); failures back off and retry."""
        from floe.tabletopic.spark.job import BadRecordError

        interval = self.cfg.commit_interval_ms / 1000
        backoff = 0.0
        redo = 0
        state: TableState | None = None
        log.info("tabletopic.started topic=%s table=%s.%s", self.topic, *self.table)
        started = time.monotonic()
        while True:
            # rounds start every interval (not interval after the previous round ended),
            # so a record waits at most one interval plus one round
            wait = interval - (time.monotonic() - started)
            await asyncio.sleep(0 if redo else backoff or max(0.0, wait))
            started = time.monotonic()
            try:
                tables = self._tables()
                if state is None:  # start, or after a failed round: the table says
                    recovered = await asyncio.to_thread(tables.recover, self.topic, self.table)
                    state = self.state = recovered.carrying(self.state)
                    log.info(
                        "tabletopic.recovered topic=%s commit_id=%s offsets=%s",
                        self.topic,
                        state.last_commit_id,
                        encode_offsets(state.committed),
                    )
                lso, starts = self.ends()
                for p, first in starts.items():
                    if first > state.start_of(p):
                        log.warning(
                            "tabletopic.records_lost topic=%s partition=%d from=%d to=%d "
                            "(deleted before they were materialized)",
                            self.topic,
                            p,
                            state.start_of(p),
                            first,
                        )
                        state = state.skip_deleted(p, first)
                ranges = state.plan(lso)
                if not ranges:
                    backoff = 0.0
                    redo = 0
                    continue
                aborted = {
                    r.partition: [
                        Aborted(a.producer_id, a.first_offset, a.last_offset)
                        for a in self.store.partition(self.topic, r.partition).aborted_transactions(
                            r.start, r.end
                        )
                    ]
                    for r in ranges
                }
                snapshot, parts = self.schemas()
                result = await asyncio.to_thread(
                    functools.partial(
                        tables.run_round,
                        state,
                        self.cfg,
                        ranges,
                        aborted,
                        snapshot=snapshot,
                        parts=parts,
                    )
                )
                state = state.apply_round(ranges, result)
                self.state = state
                backoff = 0.0
                redo = 0
                log.info(
                    "tabletopic.committed topic=%s commit_id=%s rows=%d files=%d skipped=%d "
                    "seconds=%.2f offsets=%s",
                    self.topic,
                    result.commit_id,
                    result.rows,
                    result.files,
                    result.skipped,
                    result.duration_s,
                    encode_offsets(state.committed),
                )
            except asyncio.CancelledError:
                raise
            except SchemaNotCoveredError as exc:
                redo += 1
                self._seen[exc.part].add(exc.schema_id)
                state = None
                if redo <= MAX_SCHEMA_REDOS:
                    log.info(
                        "tabletopic.schema_new topic=%s part=%s schema_id=%d: evolving the "
                        "table and redoing the round",
                        self.topic,
                        exc.part,
                        exc.schema_id,
                    )
                    continue
                redo = 0
                backoff = self._failed(exc, backoff)
            except BadRecordError as exc:
                error = f"stopped: {exc} (change the topic's table settings to resume)"
                if self.state is not None:
                    self.state = self.state.with_error(error, stopped=True)
                log.error("tabletopic.stopped_on_bad_record topic=%s error=%s", self.topic, exc)
                await asyncio.Event().wait()  # until the manager cancels this task
            except Exception as exc:  # never crash the broker: log, back off, redo
                redo = 0
                state = None  # re-read the committed offsets from the table
                backoff = self._failed(exc, backoff)

    def _failed(self, exc: Exception, backoff: float) -> float:
        """Record and log a failed round; returns the next backoff."""
        backoff = min(BACKOFF_MAX_S, max(BACKOFF_MIN_S, backoff * 2))
        error = f"{type(exc).__name__}: {_one_line(exc)}"
        if self.state is not None:
            self.state = self.state.with_error(error)
        log.warning(
            "tabletopic.round_failed topic=%s retry_in=%.0fs error=%s",
            self.topic,
            backoff,
            error,
        )
        return backoff


def _one_line(exc: BaseException, limit: int = 300) -> str:
    """``exc`` in one line; for an error quoted from a Spark Python worker, the
    worker's own exception line (the last ``...Error: ...`` of its traceback)."""
    text = str(exc)
    if "Traceback (most recent call last)" in text:
        found = re.findall(r"^(\w+(?:Error|Exception)\b.*)$", text, re.MULTILINE)
        if found:
            text = found[-1]
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class TableTopicManager:
    """Watches the topics and runs one :class:`TableCoordinator` per table topic.

    Owned by the broker's event loop: :meth:`start` after the store is open,
    :meth:`stop` before it closes (stops every coordinator, then Spark if it started).
    Spark and the catalog client are created on the first table topic only.
    """

    def __init__(
        self,
        store: Store,
        config: BrokerConfig,
        spark_factory: Callable[[], SparkManager] | None = None,
        registry: Registry | None = None,
    ) -> None:
        self.store = store
        self.config = config
        self.registry = registry
        self._spark_factory = spark_factory
        self._tables: TableTopics | None = None
        self._running: dict[TopicName, _Running] = {}
        self._watch: asyncio.Task[None] | None = None

    @property
    def coordinators(self) -> Mapping[TopicName, TableCoordinator]:
        return {t: r.coordinator for t, r in self._running.items()}

    def tables(self) -> TableTopics:
        """The shared catalog + Spark side, created on first use (cheap: starts nothing)."""
        if self._tables is None:
            from floe.tabletopic.spark import SparkManager

            spark = (
                self._spark_factory()
                if self._spark_factory
                else SparkManager.from_config(self.config)
            )
            self._tables = TableTopics(
                cat.CatalogSettings.from_config(self.config),
                spark,
                Path(self.store.log_dir()),
            )
        return self._tables

    async def start(self) -> None:
        """Start watching topic configs, after stopping a Spark driver that a killed
        broker on this data dir left running (so no stale commit can land once a
        coordinator has read the table's offsets)."""
        from floe.tabletopic.spark.session import SparkSettings, reap_previous_driver

        await asyncio.to_thread(
            reap_previous_driver, SparkSettings.from_config(self.config).work_dir
        )
        self._watch = asyncio.create_task(self._watch_topics(), name="table-topics")

    async def _watch_topics(self) -> None:
        while True:
            try:
                self.reconcile()
            except Exception:
                log.exception("tabletopic.watch_failed")
            await asyncio.sleep(WATCH_INTERVAL_S)

    def reconcile(self) -> None:
        """Start, restart or stop coordinators to match the topics' configs."""
        broker = {keys.TABLE_TOPIC_NAMESPACE.name: self.config[keys.TABLE_TOPIC_NAMESPACE]}
        wanted: dict[TopicName, TableTopicConfig] = {}
        for name, meta in self.store.topics().items():
            if meta.internal:
                continue
            try:
                cfg = resolve_table_topic(meta.configs, broker)
            except ConfigError as exc:
                log.warning("tabletopic.bad_config topic=%s error=%s", name, exc)
                continue
            if cfg.enable:
                wanted[name] = cfg
        for name, running in list(self._running.items()):
            if wanted.get(name) != running.cfg:
                running.task.cancel()
                del self._running[name]
                log.info("tabletopic.stopped topic=%s (table kept)", name)
        for name, cfg in wanted.items():
            if name not in self._running:
                coordinator = TableCoordinator(self.store, name, cfg, self.tables, self.registry)
                task = asyncio.create_task(coordinator.run(), name=f"table-topic:{name}")
                self._running[name] = _Running(cfg, coordinator, task)

    async def stop(self) -> None:
        """Stop watching and every coordinator, then Spark; idempotent."""
        tasks = [r.task for r in self._running.values()]
        if self._watch is not None:
            tasks.append(self._watch)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._running.clear()
        self._watch = None
        if self._tables is not None:
            await self._tables.spark.stop()
