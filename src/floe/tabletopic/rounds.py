"""The blocking side of table topics, shared by every coordinator: the catalog client
and Spark. Every method blocks (pyiceberg catalog calls, Spark jobs): call them in a
worker thread.

A round (:meth:`TableTopics.run_round`): create or evolve the table (pyiceberg,
metadata only), check that the table's newest Floe commit is still the one the round
starts from, run the Spark job that writes and stages the data files, then commit them
from the Spark driver with the round's recorded state, fenced against any other writer
(:mod:`floe.tabletopic.spark.job`). A round with no ranges but unrecorded changes (lost
records counted, a partition found ahead of its log) commits that state alone.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from floe.config.id_columns import FROM_DEBEZIUM_KEY
from floe.config.tabletopic import TableTopicConfig
from floe.errors import FloeError
from floe.protocol.ranges import Records
from floe.tabletopic import catalog as cat
from floe.tabletopic.convert import ConvertType
from floe.tabletopic.model import (
    MAINTENANCE_PROP,
    FencedError,
    MaintenancePolicy,
    MaintenanceResult,
    PartitionRange,
    RoundResult,
    TableState,
    TopicIdentity,
)
from floe.tabletopic.routes import ROUTE_PROP, RouteClashError, RouteFilter
from floe.tabletopic.schemas import PartPlan, RegistrySnapshot, SchemaUnavailableError
from floe.tabletopic.spark.fetch import FetchAccess
from floe.tabletopic.upsert import Upsert, UpsertSpecError, check_columns, debezium_key_columns
from floe.types import Offset, PartitionId, TopicName

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

    from floe.tabletopic.deadletter import DeadLetters
    from floe.tabletopic.spark import SparkManager
    from floe.tabletopic.spark.job import JobSpec

log = logging.getLogger("floe.tabletopic.rounds")

TABLE_PROPERTIES = {
    "format-version": "2",
    # an unpartitioned append needs no shuffle before the write
    "write.distribution-mode": "none",
    # measured ~10-15% faster rounds than Iceberg's default zstd on the 2-core machine
    "write.parquet.compression-codec": "snappy",
}
"""Properties of the tables Floe creates (a user's ALTER TABLE later is kept)."""


def metadata_properties(cfg: TableTopicConfig) -> dict[str, str]:
    """The table properties bounding its metadata files (set at each round when they
    differ: ``table.topic.metadata.versions.kept`` applies to existing tables too)."""
    return {
        "write.metadata.delete-after-commit.enabled": "true",
        "write.metadata.previous-versions-max": str(cfg.metadata_versions_kept),
    }


RECORD_ATTEMPTS = 5
"""Tries to set a table property while rounds keep committing."""


def _upsert_of(cfg: TableTopicConfig, table: Table, key: PartPlan, plan: Round) -> Upsert | None:
    """The round's upsert settings, checked against the table; None for append-only.
    ``[_from_debezium_key_]`` becomes the fields of the ``key`` part's record schema.

    Raises:
        UpsertSpecError: the id columns or CDC field do not fit the table, or the table
            is not format version 2 (position deletes).
    """
    if not cfg.upserts:
        return None
    upsert = Upsert(cfg.id_columns, cfg.cdc_field)
    if cfg.id_columns == (FROM_DEBEZIUM_KEY,):
        ids = debezium_key_columns(table.schema(), key, plan.snapshot, plan.parts[1].ids)
        upsert = Upsert(ids, cfg.cdc_field, from_key=True)
    check_columns(table.schema(), upsert)
    version = table.format_version
    if version != 2:
        raise UpsertSpecError(
            f"upserts need an Iceberg format version 2 table (position deletes); "
            f"this table is version {version}"
        )
    return upsert


class RoundCancelledError(FloeError):
    """The round was cancelled (its coordinator stopped) before its Spark job."""


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


def recovered(
    catalog: Catalog, topic: TopicName, table: tuple[str, str], identity: TopicIdentity | None
) -> TableState:
    """The commit state recorded in ``table`` (empty when there is no table yet), as
    the coordinator of ``topic`` recovers it (blocking: a worker thread).

    Raises:
        RecoveryError, StateError: see :meth:`TableTopics.recover`.
    """
    from pyiceberg.exceptions import NoSuchTableError

    from floe.tabletopic.model import Recorded

    try:
        loaded = cat.load_table(catalog, *table)
    except NoSuchTableError:
        return TableState.recovered(topic, table, Recorded(), identity)
    return TableState.recovered(topic, table, cat.read_recorded(loaded), identity)


@dataclass(frozen=True)
class Round:
    """What one round is to do, planned by the coordinator on the event loop.

    Attributes:
        ranges: per partition, the offsets the round commits (empty: a commit of the
            state's unrecorded changes alone).
        pieces: ``ranges`` cut into read tasks.
        leaders: the ``host:port`` the tasks of a partition another broker leads fetch
            from (a partition led here is absent: the tasks fetch from this broker).
        snapshot / parts: the registry's schemas and how each part is decoded.
        route: the records a route table keeps (``route.by = record_name``), else None.
    """

    ranges: tuple[PartitionRange, ...]
    pieces: tuple[PartitionRange, ...]
    leaders: Mapping[PartitionId, str]
    snapshot: RegistrySnapshot
    parts: tuple[Part, Part]
    route: RouteFilter | None = None


class TableTopics:
    """The catalog client and Spark, shared by all coordinators.

    Created by the manager on first use (cheap: starts nothing). ``catalog`` is the
    process's one catalog client (:class:`~floe.tabletopic.catalog.SharedCatalog`), also
    used by the admin API. ``bootstrap()`` is the ``host:port`` of the broker's Kafka
    listener that the Spark tasks fetch their records from (read at each round: the
    port may be known only once the listener is bound), ``access`` how they get in.
    ``dead_letters`` sends the records rounds skip to their topics' dead-letter topics.
    Nothing to clean up besides Spark (the manager stops it).
    """

    def __init__(
        self,
        settings: cat.CatalogSettings,
        spark: SparkManager,
        bootstrap: Callable[[], str],
        dead_letters: DeadLetters | None = None,
        *,
        access: FetchAccess | None = None,
    ) -> None:
        self.settings = settings
        self.spark = spark
        self.bootstrap = bootstrap
        self.access = access or FetchAccess()
        self.dead_letters = dead_letters
        self._cancelled: set[str] = set()  # commit ids (threads: the GIL guards a set)
        self.catalog = cat.SharedCatalog(settings)

    def spark_name(self, table: tuple[str, str]) -> str:
        return f"{self.settings.name}.{table[0]}.{table[1]}"

    def recover(
        self, topic: TopicName, table: tuple[str, str], identity: TopicIdentity | None
    ) -> TableState:
        """The commit state recorded in the table (empty when there is no table yet).

        Raises:
            RecoveryError: the table forbids writing it (another cluster's, offsets
                missing): the message says why.
            StateError: an unreadable recorded value.
        """
        return recovered(self.catalog(), topic, table, identity)

    def prepare(
        self,
        cfg: TableTopicConfig,
        table: tuple[str, str],
        *,
        snapshot: RegistrySnapshot,
        parts: tuple[Part, Part],
        ranges: tuple[PartitionRange, ...],
        topic: TopicName,
        route: str | None = None,
        leaders: Mapping[PartitionId, str] | None = None,
    ) -> tuple[Table, PartPlan, PartPlan]:
        """Load the table, creating it (format version 2, the row layout) if missing,
        evolve it to hold the parts' schemas (one metadata commit when anything
        changes) and return it with each part's decoding plan. ``route``: the record
        full name a route table holds (recorded in the table when it is created);
        ``leaders``: where a partition led by another broker is read (see
        :attr:`Round.leaders`).

        Raises:
            SchemaUnavailableError: a schema mode without a usable schema yet.
            RouteClashError: the table holds another record type.
        """
        from pyiceberg.exceptions import NoSuchTableError, TableAlreadyExistsError

        from floe.tabletopic.partitioning import describe_spec, evolve_spec, partition_spec
        from floe.tabletopic.schemas import HELD_PROP, first_schema, fit_table, held_ids, stage

        flatten, debezium = cfg.flattens, cfg.debezium
        subjects = {"value": cfg.value_subject_for(topic), "key": cfg.key_subject_for(topic)}
        if route is not None:
            subjects["value"] = f"{topic}-{route}"
        properties = {**TABLE_PROPERTIES, **metadata_properties(cfg)}
        if route is not None:
            properties[ROUTE_PROP] = route
        catalog = self.catalog()
        try:
            loaded = cat.load_table(catalog, *table)
        except NoSuchTableError:

            def first(value: Part, key: Part) -> Any:
                return first_schema(
                    snapshot,
                    value.fit_args()[:3],
                    key.fit_args()[:3],
                    flatten=flatten,
                    debezium=debezium,
                    subjects=subjects,
                )

            schema = first(*parts)
            if schema is None:
                parts = self._probe(snapshot, parts, ranges, topic, leaders or {})
                schema = first(*parts)
            if schema is None:
                raise SchemaUnavailableError(
                    "no record read so far carries a registered schema id "
                    "(the table is created from the first one)"
                ) from None
            cat.ensure_namespace(catalog, table[0])
            try:
                loaded = catalog.create_table(
                    table,
                    schema,
                    partition_spec=partition_spec(schema, cfg.partition_by),
                    properties=properties,
                )
                log.info(
                    "tabletopic.table_created table=%s.%s partition_by=%s",
                    *table,
                    describe_spec(loaded.spec(), loaded.schema()),
                )
            except TableAlreadyExistsError:
                loaded = cat.load_table(catalog, *table)
        held_route = loaded.properties.get(ROUTE_PROP)
        if route is not None and held_route != route:
            raise RouteClashError(
                f"table {table[0]}.{table[1]} holds "
                + (f"records of {held_route}" if held_route else "no route's records")
                + f", and record type {route} of topic {topic} maps to the same name: "
                "its records are not written (rename the record type, or drop that table)"
            )
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
                debezium=debezium,
                held=held,
                table=f"{table[0]}.{table[1]}",
                subjects=subjects,
            )
            props = {
                HELD_PROP.format(part=p.part): json.dumps(sorted(p.covered | held[p.part]))
                for p in (value_plan, key_plan)
                if not p.covered <= held[p.part]
            }
            current = txn.table_metadata.properties
            props.update({k: v for k, v in metadata_properties(cfg).items() if current.get(k) != v})
            if props:
                txn.set_properties(props)
            respecced = evolve_spec(txn, cfg.partition_by)
        if changed or respecced:
            loaded = cat.load_table(catalog, *table)
        if respecced:
            log.info(
                "tabletopic.spec_evolved table=%s.%s partition_by=%s spec_id=%d",
                *table,
                describe_spec(loaded.spec(), loaded.schema()),
                loaded.spec().spec_id,
            )
        if changed:
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
        leaders: Mapping[PartitionId, str],
    ) -> tuple[Part, Part]:
        """``by_schema_id`` parts without a candidate schema get the first registered
        schema id found in the round's records (fetched here, in the driver, from each
        partition's leader).

        Raises:
            FetchError: a leader cannot be read.
        """
        from floe.tabletopic.convert import wire
        from floe.tabletopic.spark.fetch import BrokerConnection, fetch_range

        wanted = [p.convert is ConvertType.BY_SCHEMA_ID and not p.ids for p in parts]
        found: list[int | None] = [None, None]

        def missing() -> bool:
            return any(w and f is None for w, f in zip(wanted, found, strict=True))

        for r in ranges:
            if not missing():
                break
            address = leaders.get(r.partition) or self.bootstrap()
            with BrokerConnection(address, access=self.access) as broker:
                for chunk in fetch_range(broker, topic, r.partition, r.start, r.end):
                    if not isinstance(chunk, Records):
                        continue
                    for record in chunk.records:
                        for i, data in enumerate((record.value, record.key)):
                            if not wanted[i] or found[i] is not None or data is None:
                                continue
                            try:
                                schema_id = int(wire.split(data)[0])
                            except ValueError:
                                continue
                            if schema_id in snapshot.schemas:
                                found[i] = schema_id
                    if not missing():
                        break
        out = list(parts)
        for i, first in enumerate(found):
            if first is not None:
                out[i] = Part(parts[i].name, parts[i].convert, parts[i].message, (first,))
        return out[0], out[1]

    def run_round(
        self, state: TableState, cfg: TableTopicConfig, plan: Round, on_start: Any = None
    ) -> RoundResult | None:
        """One round: the Spark job writing the data files (when there are ranges) and
        the one commit of the state after it. ``on_start(commit_id)`` is called once the
        round has its commit id (the coordinator keeps it to cancel the round's Spark
        job). Returns what was committed; ``None`` for a round without ranges when the
        table does not exist yet (its changes wait for the first data round).

        Raises:
            FencedError: the table's newest Floe commit is no longer ``state``'s.
            SchemaNotCoveredError: workers met a schema id the table lacks (redo).
            BadRecordError: a bad record under ``errors.tolerance = none``.
            SchemaUnavailableError: a schema mode has no usable schema yet.
            Exception: any other failure (the caller recovers state from the table).
        """
        started = time.monotonic()
        commit_id = uuid.uuid4().hex
        if on_start is not None:
            on_start(commit_id)
        try:
            return self._run_round(state, cfg, plan, commit_id, started)
        finally:
            self._cancelled.discard(commit_id)

    def _run_round(
        self, state: TableState, cfg: TableTopicConfig, plan: Round, commit_id: str, started: float
    ) -> RoundResult | None:
        from floe.tabletopic.spark.job import commit_round, write_round

        name = self.spark_name(state.table)
        skipped = lost = dead_lettered = 0
        dlq = cfg.dead_letter_topic(state.topic) if self.dead_letters is not None else None
        gaps: tuple[Any, ...] = ()
        refusals: tuple[str, ...] = ()
        set_id: str | None = None
        deletes = None
        if plan.ranges:
            table, value_plan, key_plan = self.prepare(
                cfg,
                state.table,
                snapshot=plan.snapshot,
                parts=plan.parts,
                ranges=plan.ranges,
                topic=state.topic,
                route=plan.route.record if plan.route is not None else None,
                leaders=plan.leaders,
            )
            self._check_not_fenced(table, state)  # fail fast, before the Spark job
            refusals = tuple(
                p.refused[p.latest]
                for p in (value_plan, key_plan)
                if p.latest is not None and p.latest in p.refused
            )
            spec = self._spec(
                cfg,
                state.topic,
                table,
                (value_plan, key_plan),
                plan,
                tolerance=cfg.errors_tolerance,
                dead_letter=dlq is not None,
            )
            session = self.spark.session()  # may start Spark: seconds
            if commit_id in self._cancelled:  # while Spark started: no job was there to cancel
                log.info("tabletopic.round_cancelled topic=%s commit_id=%s", state.topic, commit_id)
                raise RoundCancelledError(f"round {commit_id} was cancelled before its job")
            written = write_round(session, name, spec, commit_id, self.settings.fileio_properties())
            set_id, skipped, lost, gaps = commit_id, written.skipped, written.lost, written.gaps
            deletes = written.deletes
            if dlq is not None and written.dead and self.dead_letters is not None:
                # durable before the commit: a commit never outruns its dead letters
                dead_lettered = len(written.dead)
                self.dead_letters.send(state.topic, TopicName(dlq), written.dead)
        elif not self._exists(state.table):
            return None
        provisional = RoundResult(
            commit_id, int(time.time() * 1000), 0.0, 0, 0, skipped, lost, refusals=refusals
        )
        after = state.apply_round(plan.ranges, provisional)
        committed = commit_round(
            self.spark.session(),
            name,
            set_id,
            expected=state.last_commit_id,
            record=after.record(),
            deletes=deletes,
        )
        return RoundResult(
            commit_id=commit_id,
            committed_ms=committed.timestamp_ms,
            duration_s=time.monotonic() - started,
            rows=committed.rows,
            files=committed.files,
            skipped=skipped,
            lost=lost,
            gaps=gaps,
            refusals=refusals,
            dead_lettered=dead_lettered,
        )

    def _spec(
        self,
        cfg: TableTopicConfig,
        topic: TopicName,
        table: Table,
        plans: tuple[PartPlan, PartPlan],
        plan: Round,
        *,
        tolerance: str,
        dead_letter: bool = False,
    ) -> JobSpec:
        """The Spark job's spec for ``plan``'s read tasks into ``table`` (as loaded).

        Raises:
            UpsertSpecError: see :func:`_upsert_of`.
        """
        from floe.tabletopic.spark.job import JobSpec, read_tasks

        return JobSpec(
            topic=topic,
            bootstrap=self.bootstrap(),
            access=self.access,
            schema=table.schema(),
            value=plans[0],
            key=plans[1],
            flatten=cfg.flattens,
            debezium=cfg.debezium,
            snapshot=plan.snapshot,
            tolerance=tolerance,
            tasks=read_tasks(plan.pieces, plan.leaders),
            dead_letter=dead_letter,
            upsert=_upsert_of(cfg, table, plans[1], plan),
            route=plan.route,
        )

    def pin(self, table: tuple[str, str]) -> tuple[int | None, Mapping[PartitionId, Offset]]:
        """The table's current snapshot (None: none yet) and the offsets committed up to
        it, read from one metadata load (a round commits both in one transaction): where
        a fresh read's tail starts.

        Raises:
            NoSuchTableError: no table (yet).
            RecoveryError: the recorded offsets cannot be read.
        """
        loaded = cat.load_table(self.catalog(), *table)
        current = loaded.current_snapshot()
        snapshot_id = None if current is None else int(current.snapshot_id)
        return snapshot_id, cat.read_recorded(loaded).committed

    def tail_spec(
        self, cfg: TableTopicConfig, topic: TopicName, table: tuple[str, str], plan: Round
    ) -> JobSpec | None:
        """The Spark job's spec converting ``plan``'s ranges (a fresh read's tail) as a
        round would, writing nothing; None when the tail is empty. The table's schema is
        evolved first when the tail holds schemas it lacks, as the next round would (a
        metadata commit); bad records are skipped, whatever the errors tolerance.

        Raises:
            SchemaUnavailableError: a schema mode has no usable schema yet.
            UpsertSpecError: the id columns no longer fit the table.
        """
        if not plan.ranges:
            return None
        loaded, value_plan, key_plan = self.prepare(
            cfg,
            table,
            snapshot=plan.snapshot,
            parts=plan.parts,
            ranges=plan.ranges,
            topic=topic,
            route=plan.route.record if plan.route is not None else None,
            leaders=plan.leaders,
        )
        tolerance = "invalid_data" if cfg.errors_tolerance == "none" else cfg.errors_tolerance
        return self._spec(cfg, topic, loaded, (value_plan, key_plan), plan, tolerance=tolerance)

    def maintain(
        self, table: tuple[str, str], cfg: TableTopicConfig, job_group: str
    ) -> MaintenanceResult:
        """One maintenance run of ``table`` on Spark
        (:mod:`floe.tabletopic.spark.maintenance`), recorded in the table's
        ``floe.maintenance`` property (the schedule and status read it back).

        Raises:
            Exception: a procedure failed (the steps before it landed).
        """
        from floe.tabletopic.spark.maintenance import maintain

        policy = MaintenancePolicy(
            target_file_size_bytes=cfg.maintenance_target_file_size_bytes,
            min_input_files=cfg.maintenance_min_input_files,
            retain_last=cfg.maintenance_retain_last,
            snapshot_max_age_ms=cfg.maintenance_snapshot_max_age_ms,
            orphan_age_ms=cfg.maintenance_orphan_age_ms,
        )
        result = maintain(self.spark.session(), self.settings.name, table, policy, job_group)
        self._record(table, {MAINTENANCE_PROP: result.to_json()})
        return result

    def last_maintenance(self, table: tuple[str, str]) -> tuple[bool, MaintenanceResult | None]:
        """Whether ``table`` exists, and its last recorded maintenance run."""
        from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

        try:
            loaded = cat.load_table(self.catalog(), *table)
        except (NoSuchTableError, NoSuchNamespaceError):
            return False, None
        recorded = loaded.properties.get(MAINTENANCE_PROP)
        return True, None if recorded is None else MaintenanceResult.from_json(recorded)

    def _record(self, table: tuple[str, str], props: Mapping[str, str]) -> None:
        """Set table properties, again on the new metadata when a round committed
        between the load and the swap."""
        from pyiceberg.exceptions import CommitFailedException

        for attempt in range(RECORD_ATTEMPTS):
            loaded = cat.load_table(self.catalog(), *table)
            try:
                with loaded.transaction() as txn:
                    txn.set_properties(dict(props))
                return
            except CommitFailedException:
                if attempt == RECORD_ATTEMPTS - 1:
                    raise
                time.sleep(0.2 * (attempt + 1))

    def cancel(self, commit_id: str) -> None:
        """Cancel the round ``commit_id`` (its coordinator stopped): its Spark job if it
        runs, or before the job starts (a round waiting for Spark to start runs none);
        its commit, if reached, is fenced or lands once."""
        self._cancelled.add(commit_id)
        if self.spark.started:
            from floe.tabletopic.spark.job import cancel

            cancel(self.spark.session(), commit_id)

    def _exists(self, table: tuple[str, str]) -> bool:
        from pyiceberg.exceptions import NoSuchTableError

        try:
            cat.load_table(self.catalog(), *table)
        except NoSuchTableError:
            return False
        return True

    @staticmethod
    def _check_not_fenced(table: Table, state: TableState) -> None:
        """Raises:
        FencedError: the table's newest Floe commit is not the state's.
        """
        found = cat.read_recorded(table).commit_id
        if found != state.last_commit_id:
            raise FencedError(
                f"table {state.table[0]}.{state.table[1]}: the newest Floe commit is "
                f"{found}, this coordinator's state follows {state.last_commit_id}"
            )
