"""Commit rounds of table topics: one coordinator task per table topic.

The manager (:mod:`floe.tabletopic.manager`) keeps one :class:`TableCoordinator` task
per table topic this broker coordinates.

A round starts every ``commit.interval.ms`` (right away while a backlog remains). Per
partition it takes ``[committed end, durable last stable offset)``, capped by
``round.max.records``/``round.max.bytes``; the log is fsynced first, so the table never
holds a record a power loss could take from the log. One Spark job reads, converts and
writes the ranges, and one Iceberg commit appends them with the round's recorded state
(:mod:`floe.tabletopic.rounds`). That commit only lands if the table's newest Floe
commit is still the one the round started from (a restarted coordinator, another
broker: :class:`~floe.tabletopic.model.FencedError`), so a range is never committed
twice. The commit state (:class:`~floe.tabletopic.model.TableState`) is recovered from
the table at start and after any failed round, so the committed offsets only ever come
from the table.

Nothing goes missing silently: records deleted before they were materialized, offsets a
reader found missing, and offsets the table is ahead of a truncated log by are counted
as lost, logged, and recorded in the table. While ``table.topic.retention.wait`` holds
(the default), retention and compaction keep what the table has not materialized.

Failures are logged in one line and the round retried with exponential backoff (1 s
doubling to 60 s); they never reach the broker, and other table topics keep going. A
bad record under ``errors.tolerance = none`` stops the table until its settings change.

Blocking work (Spark, pyiceberg catalog calls) runs in worker threads; reading offsets
from the store (or, for a partition another broker leads, from that broker:
:mod:`floe.tabletopic.placement`) happens on the event loop. Spark is started only when
the first table topic needs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import re
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from floe.config.tabletopic import TableTopicConfig
from floe.errors import FloeError
from floe.storage.interface import NotOwnerError, Store
from floe.tabletopic.convert import ConvertType
from floe.tabletopic.model import (
    FencedError,
    MaintenanceResult,
    PartitionRange,
    RecoveryError,
    TableState,
    TopicIdentity,
    encode_offsets,
)
from floe.tabletopic.placement import Ends, Locate, TopicPartitions, cut
from floe.tabletopic.rounds import Part, Round, TableTopics
from floe.tabletopic.routes import RouteFilter, route_table
from floe.tabletopic.schemas import (
    RegistrySnapshot,
    SchemaNotCoveredError,
    SchemaUnavailableError,
    candidate_ids,
)
from floe.tasks import retrieve
from floe.types import Offset, PartitionId, TopicName

if TYPE_CHECKING:
    from floe.registry.core.service import Registry

log = logging.getLogger("floe.tabletopic.coordinator")

BACKOFF_MIN_S = 1.0
BACKOFF_MAX_S = 60.0
SCHEMA_MODES = (ConvertType.BY_SCHEMA_ID, ConvertType.BY_LATEST_SCHEMA)
MAX_REDOS = 20
"""Rounds redone in a row at once (workers met schema ids the table lacked, or another
writer's commit fenced the round); beyond, the round counts as failed (backoff), so a
misbehaving id or a second writer cannot spin the coordinator."""
TASK_MAX_RECORDS = 250_000
"""Offsets per Spark read task at most (so that partitions spread over cores)."""
PEER_TIMEOUT_S = 10.0
"""How long a coordinator waits for another broker's answer (the offsets of a partition
it leads) before the round waits for the next look."""
MAINTENANCE_RETRY_S = 300.0
"""A failed maintenance run (or an unreadable table) is tried again this much later,
or at the next interval if that comes first."""
"""At shutdown, how long to wait for rounds cut short (their Spark jobs are cancelled)."""
TASK_MAX_BYTES = 64 * 1024 * 1024
"""Log bytes per Spark read task at most (bounds a worker's memory by bytes)."""


class NoTableError(FloeError):
    """Maintenance asked for before the table exists (its first round creates it)."""


@dataclass(frozen=True)
class MaintenanceState:
    """A coordinator's maintenance, for status: the last run (as the table records it),
    whether one runs now, the last failure and when the next is due."""

    last: MaintenanceResult | None = None
    running: bool = False
    error: str | None = None
    next_ms: int | None = None


class TopicChangedError(Exception):
    """The topic this coordinator followed was deleted, or replaced by a new topic of
    the same name: its state must be recovered for the topic now in the store."""


class RetentionHolds:
    """The retention holds wanted by the route tables of one topic
    (``route.by = record_name``): a partition is held at the lowest offset any of them
    wants, so retention keeps what one table has not materialized although another
    has. Owned by the manager, used on the event loop by the topic's coordinators."""

    def __init__(self) -> None:
        self._wanted: dict[str, dict[PartitionId, Offset | None]] = {}

    def want(self, route: str, partition: PartitionId, offset: Offset | None) -> Offset | None:
        """Record what ``route`` wants for ``partition``; return the hold to set."""
        self._wanted.setdefault(route, {})[partition] = offset
        return self.lowest(partition)

    def drop(self, route: str) -> None:
        self._wanted.pop(route, None)

    def lowest(self, partition: PartitionId) -> Offset | None:
        """The lowest offset wanted for ``partition``; None: no hold."""
        offsets = [w[partition] for w in self._wanted.values() if w.get(partition) is not None]
        return min(offsets) if offsets else None  # type: ignore[type-var]


class TableCoordinator:
    """Runs the commit rounds of one table topic, as one asyncio task.

    In ``route.by = record_name`` mode there is one coordinator per record type
    (``route``) of the topic, each with its own table and commit state, sharing the
    topic's :class:`RetentionHolds`.

    Owns its :class:`TableState` (replaced only by the model's validated updates), the
    schema ids its workers reported, the retention holds of its partitions and the
    worker-thread task of its running round; the manager creates it when the topic
    becomes a table topic and cancels its task when the topic stops being one, is
    deleted, or the broker stops. A cancelled coordinator cancels its round's Spark job;
    a round already committing lands or is fenced, and a coordinator that replaces it
    (``previous``) waits for that round to end before reading the table.
    """

    def __init__(
        self,
        store: Store,
        topic: TopicName,
        cfg: TableTopicConfig,
        tables: Callable[[], TableTopics],
        registry: Registry | None = None,
        *,
        cluster_id: str | None = None,
        previous: TableCoordinator | None = None,
        route: str | None = None,
        holds: RetentionHolds | None = None,
        locate: Locate | None = None,
        peer_timeout_s: float = PEER_TIMEOUT_S,
    ) -> None:
        from floe.tabletopic.convert import table_identifier

        self.store = store
        self.topic = topic
        self.partitions = TopicPartitions(store, topic, locate, peer_timeout_s)
        self.cfg = cfg
        self._tables = tables
        self._registry = registry
        self._cluster_id = cluster_id
        self._previous = previous
        self.route = route
        self._holds = holds if route is not None else None
        self.table = (
            table_identifier(cfg.namespace, topic)
            if route is None
            else route_table(cfg.namespace, topic, route)
        )
        self.label = topic if route is None else f"{topic}[{route}]"
        """The topic, with the record type of a route table (for log lines)."""
        self.state = TableState.starting(topic, self.table)
        self._seen: dict[str, set[int]] = {"value": set(), "key": set()}
        self._inflight: asyncio.Task[Any] | None = None
        self._commit_id: str | None = None
        self._noted: str | None = None
        self.maintenance = MaintenanceState()
        self._maintaining = asyncio.Lock()

    # -- what the store says (on the event loop) ---------------------------------------

    def identity(self) -> TopicIdentity | None:
        """The topic's identity in this cluster (``None`` without a cluster id).

        Raises:
            TopicChangedError: the topic is gone.
        """
        meta = self.store.topic(self.topic)
        if meta is None:
            raise TopicChangedError(f"topic {self.topic} is gone")
        if self._cluster_id is None:
            return None
        return TopicIdentity(self._cluster_id, str(meta.topic_id), int(meta.created_ms))

    async def ends(self) -> Ends:
        """Every partition's log start, durable last stable offset and log end, here or
        from its leader (:class:`~floe.tabletopic.placement.TopicPartitions`).

        Raises:
            TopicChangedError: the topic is gone or was replaced.
            NotOwnerError: a partition has no live leader now (in a cluster whose
                brokers share partitions: moving, or its broker died).
            StorageError: the fsync failed.
        """
        meta = self.store.topic(self.topic)
        if meta is None:
            raise TopicChangedError(f"topic {self.topic} is gone")
        identity = self.state.identity
        if identity is not None and str(meta.topic_id) != identity.topic_id:
            raise TopicChangedError(f"topic {self.topic} was recreated")
        return await self.partitions.ends(meta.partitions)

    def hold(self) -> None:
        """Set each partition's retention hold at its committed end (at its log start
        while the committed ends are unknown), or release the holds when
        ``retention.wait`` is off."""
        meta = self.store.topic(self.topic)
        if meta is None:
            return
        for p in map(PartitionId, range(meta.partitions)):
            try:
                plog = self.store.partition(self.topic, p)
            except NotOwnerError:
                continue  # on its way to this broker: held from the next round on
            hold: Offset | None
            if not self.cfg.retention_wait:
                hold = None
            elif self.state.pending:
                hold = plog.log_start_offset
            else:
                hold = self.state.start_of(p)
            if self._holds is not None and self.route is not None:
                hold = self._holds.want(self.route, p, hold)
            plog.set_retention_hold(hold)

    def release(self) -> None:
        """Release the retention holds (the topic stopped being a table topic)."""
        meta = self.store.topic(self.topic)
        if meta is None:
            return
        if self._holds is not None and self.route is not None:
            self._holds.drop(self.route)  # the topic's other route tables keep theirs
        for p in map(PartitionId, range(meta.partitions)):
            with contextlib.suppress(NotOwnerError):  # another broker's holds nothing
                hold = self._holds.lowest(p) if self._holds is not None else None
                self.store.partition(self.topic, p).set_retention_hold(hold)

    def plan(self, state: TableState, ends: Ends) -> tuple[Round | None, bool]:
        """The next round (``None``: nothing to do) and whether a backlog remains after
        it (then the next round starts at once). Read on the loop.

        Raises:
            SchemaUnavailableError: see :meth:`schemas`.
        """
        pending = [p for p, end in ends.stable.items() if end > state.start_of(p)]
        pending = [p for p in pending if p not in state.ahead]
        capped: dict[PartitionId, Offset] = dict(ends.stable)
        more = False
        if pending:
            share_records = max(1, self.cfg.round_max_records // len(pending))
            share_bytes = max(1, self.cfg.round_max_bytes // len(pending))
            for p in pending:
                plog = self.partitions.local(p)
                start, stable = state.start_of(p), ends.stable[p]
                capped[p] = cut(plog, start, stable, share_records, share_bytes)
                more = more or capped[p] < stable
        ranges = state.plan(capped)
        if not ranges and not state.unrecorded:
            return None, False
        return self._round(ranges), more

    async def tail(self, committed: Mapping[PartitionId, Offset]) -> Round:
        """A fresh read's tail: every partition's records from ``committed`` (a pinned
        snapshot's offsets; 0 where none) up to its last stable offset, as read tasks
        the way a round cuts them (any number of rounds' worth).

        Raises:
            TopicChangedError, NotOwnerError, StorageError: see :meth:`ends`.
            SchemaUnavailableError: see :meth:`schemas`.
        """
        ends = await self.ends()
        ranges = tuple(
            PartitionRange(p, committed.get(p, Offset(0)), end)
            for p, end in sorted(ends.stable.items())
            if end > committed.get(p, Offset(0))
        )
        return self._round(ranges)

    def _round(self, ranges: tuple[PartitionRange, ...]) -> Round:
        """``ranges`` cut into read tasks, with where to read them and the schemas.

        Raises:
            NotOwnerError: a partition has no live leader now.
        """
        pieces: list[PartitionRange] = []
        for r in ranges:
            plog = self.partitions.local(r.partition)
            start = r.start
            while start < r.end:
                stop = cut(plog, start, r.end, TASK_MAX_RECORDS, TASK_MAX_BYTES)
                pieces.append(PartitionRange(r.partition, start, stop))
                start = stop
        leaders = self.partitions.leaders([r.partition for r in ranges])
        snapshot, parts = self.schemas() if ranges else (RegistrySnapshot(), _raw_parts())
        route = None
        if self.route is not None and ranges:
            route = RouteFilter.of(self.route, snapshot, self.topic)
            # the table holds its record type's schemas only, oldest first
            value = replace(parts[0], ids=tuple(sorted(route.mine)), unknown=frozenset())
            parts = (value, parts[1])
        return Round(ranges, tuple(pieces), leaders, snapshot, parts, route)

    def schemas(self) -> tuple[RegistrySnapshot, tuple[Part, Part]]:
        """The registry's schemas and both parts' candidate ids (read on the loop).

        Raises:
            SchemaUnavailableError: a schema mode with the registry disabled, or a
                by_latest_schema subject without a version.
        """
        cfg = self.cfg
        specs = cfg.parts_of(self.topic)
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

    # -- the rounds ------------------------------------------------------------------

    async def finished(self, timeout: float | None = None) -> None:
        """Return once this coordinator's last round (if any) has ended in its thread,
        or after ``timeout`` seconds."""
        if self._inflight is not None:
            await asyncio.wait([self._inflight], timeout=timeout)

    async def _in_thread(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` in a worker thread as this coordinator's in-flight round: if the
        coordinator is cancelled meanwhile, the thread goes on (its Spark job is
        cancelled) and :meth:`finished` waits for it."""
        self._inflight = asyncio.ensure_future(asyncio.to_thread(fn))
        self._inflight.add_done_callback(retrieve)
        try:
            return await asyncio.shield(self._inflight)
        except asyncio.CancelledError:
            commit_id, tables = self._commit_id, self._tables()
            if commit_id is not None:
                loop = asyncio.get_running_loop()
                loop.run_in_executor(None, tables.cancel, commit_id).add_done_callback(retrieve)
            raise

    async def _recover(self, tables: TableTopics) -> TableState:
        identity = self.identity()
        recovered = await asyncio.to_thread(tables.recover, self.topic, self.table, identity)
        state = recovered.carrying(self.state)
        self.state = state
        if state.note and state.note != self._noted:
            log.warning("tabletopic.topic_recreated topic=%s note=%s", self.topic, state.note)
            self._noted = state.note
        log.info(
            "tabletopic.recovered topic=%s commit_id=%s offsets=%s lost=%d skipped=%d",
            self.topic,
            state.last_commit_id,
            encode_offsets(state.committed),
            state.lost_total,
            state.skipped_total,
        )
        return state

    async def run(self) -> None:
        """Rounds forever (until cancelled); failures back off and retry."""
        from floe.tabletopic.spark.job import BadRecordError

        self.hold()
        if self._previous is not None:
            if self._previous._inflight is not None and not self._previous._inflight.done():
                log.info("tabletopic.waiting_for_previous_round topic=%s", self.topic)
            await self._previous.finished()
            self._previous = None
        interval = self.cfg.commit_interval_ms / 1000
        backoff = 0.0
        redo = 0
        more = True  # the first round starts at once: the backlog of the downtime
        state: TableState | None = None
        waiting = False  # for partitions other brokers lead (logged once)
        log.info("tabletopic.started topic=%s table=%s.%s", self.label, *self.table)
        started = time.monotonic()
        while True:
            # rounds start every interval (not interval after the previous round ended),
            # so a record waits at most one interval plus one round; at once while a
            # backlog remains
            since = time.monotonic() - started
            wait = 0 if redo or more else backoff or max(0.0, interval - since)
            await asyncio.sleep(wait)
            started = time.monotonic()
            try:
                tables = self._tables()
                if state is None:  # start, or after a failed round: the table says
                    state = await self._recover(tables)
                ends = await self.ends()
                waiting = False
                state, lines = state.observe_log(ends.starts, ends.ends)
                for line in lines:
                    log.warning("%s", line)
                self.state = state
                self.hold()  # partitions added since the last round are held too
                plan, more = self.plan(state, ends)
                if plan is None:
                    backoff = 0.0
                    redo = 0
                    continue
                result = await self._in_thread(
                    functools.partial(
                        tables.run_round, state, self.cfg, plan, on_start=self._started
                    )
                )
                if result is None:  # no table yet: the changes wait for data
                    continue
                state = state.apply_round(plan.ranges, result)
                self.state = state
                self.hold()
                backoff = 0.0
                redo = 0
                for gap in result.gaps:
                    log.warning(
                        "tabletopic.records_lost topic=%s partition=%d from=%d to=%d "
                        "(missing from the log when read)",
                        self.label,
                        gap.partition,
                        gap.first,
                        gap.last + 1,
                    )
                log.info(
                    "tabletopic.committed topic=%s commit_id=%s rows=%d files=%d skipped=%d "
                    "dead_lettered=%d lost=%d seconds=%.2f offsets=%s backlog=%s",
                    self.label,
                    result.commit_id,
                    result.rows,
                    result.files,
                    result.skipped,
                    result.dead_lettered,
                    result.lost,
                    result.duration_s,
                    encode_offsets(state.committed),
                    "yes" if more else "no",
                )
            except asyncio.CancelledError:
                raise
            except NotOwnerError as exc:
                more = False
                if not waiting:
                    log.info(
                        "tabletopic.waiting_for_partitions topic=%s reason=%s (rounds resume "
                        "once every partition has a live leader)",
                        self.label, exc,
                    )  # fmt: skip
                waiting = True
                continue
            except SchemaNotCoveredError as exc:
                self._seen[exc.part].add(exc.schema_id)
                state, redo, more = None, redo + 1, False
                if redo <= MAX_REDOS:
                    log.info(
                        "tabletopic.schema_new topic=%s part=%s schema_id=%d: evolving the "
                        "table and redoing the round",
                        self.label,
                        exc.part,
                        exc.schema_id,
                    )
                    continue
                redo = 0
                backoff = self._failed(exc, backoff)
            except (FencedError, TopicChangedError) as exc:
                state, redo, more = None, redo + 1, False
                log.warning(
                    "tabletopic.fenced topic=%s error=%s: re-reading the table", self.label, exc
                )
                if redo > MAX_REDOS:
                    redo = 0
                    backoff = self._failed(exc, backoff)
            except BadRecordError as exc:
                error = f"stopped: {exc} (change the topic's table settings to resume)"
                self.state = self.state.with_error(error, stopped=True)
                log.error("tabletopic.stopped_on_bad_record topic=%s error=%s", self.label, exc)
                await asyncio.Event().wait()  # until the manager cancels this task
            except Exception as exc:  # never crash the broker: log, back off, redo
                state, redo, more = None, 0, False  # re-read the committed offsets
                backoff = self._failed(exc, backoff)

    async def maintain_on_schedule(self) -> None:
        """Maintenance runs forever (until cancelled), every ``maintenance.interval.ms``
        counted from the last run the table records, beside the rounds (never between
        them: a round's commit is rebuilt on whatever maintenance committed). Nothing
        with an interval of 0."""
        interval_ms = self.cfg.maintenance_interval_ms
        if not interval_ms:
            return
        retry_s = min(interval_ms / 1000, MAINTENANCE_RETRY_S)
        first_due: int | None = None  # a table never maintained: one interval from now
        while True:
            try:
                exists, last = await asyncio.to_thread(self._tables().last_maintenance, self.table)
            except Exception as exc:
                log.warning(
                    "tabletopic.maintenance_unscheduled topic=%s retry_in=%.0fs error=%s",
                    self.topic, retry_s, exc,
                )  # fmt: skip
                await asyncio.sleep(retry_s)
                continue
            now_ms = int(time.time() * 1000)
            if last is None:
                first_due = first_due or now_ms + interval_ms
            due = first_due if last is None else last.started_ms + interval_ms
            assert due is not None
            self.maintenance = replace(
                self.maintenance, last=last or self.maintenance.last, next_ms=due
            )
            await asyncio.sleep(max(0.0, (due - now_ms) / 1000))
            if not exists:
                continue
            try:
                await self.maintain_now()
            except Exception:  # recorded in self.maintenance and logged: retry later
                self.maintenance = replace(
                    self.maintenance, next_ms=int(time.time() * 1000 + retry_s * 1000)
                )
                await asyncio.sleep(retry_s)

    async def maintain_now(self) -> MaintenanceResult:
        """One maintenance run now (after the one running, if any); returns what it did.

        Raises:
            NoTableError: the table does not exist yet.
            Exception: a procedure failed (recorded for status; the steps before it
                landed).
        """
        async with self._maintaining:
            tables = self._tables()
            exists, _ = await asyncio.to_thread(tables.last_maintenance, self.table)
            if not exists:
                raise NoTableError(
                    f"table {self.table[0]}.{self.table[1]} does not exist yet (its first "
                    "round creates it)"
                )
            group = f"maintenance-{uuid.uuid4().hex}"
            self.maintenance = replace(self.maintenance, running=True)
            log.info("tabletopic.maintenance_started topic=%s table=%s.%s", self.topic, *self.table)
            run = asyncio.ensure_future(
                asyncio.to_thread(tables.maintain, self.table, self.cfg, group)
            )
            run.add_done_callback(retrieve)
            try:
                result: MaintenanceResult = await asyncio.shield(run)
            except asyncio.CancelledError:
                loop = asyncio.get_running_loop()
                loop.run_in_executor(None, tables.cancel, group).add_done_callback(retrieve)
                self.maintenance = replace(self.maintenance, running=False)
                raise
            except Exception as exc:
                error = f"{type(exc).__name__}: {_one_line(exc)}"
                self.maintenance = replace(self.maintenance, running=False, error=error)
                log.warning("tabletopic.maintenance_failed topic=%s error=%s", self.topic, error)
                raise
            self.maintenance = replace(self.maintenance, running=False, error=None, last=result)
            log.info(
                "tabletopic.maintained topic=%s seconds=%.1f %s",
                self.topic, result.duration_s, result.describe(),
            )  # fmt: skip
            return result

    def _started(self, commit_id: str) -> None:
        """Called from the round's thread with its commit id (to cancel its job)."""
        self._commit_id = commit_id

    def _failed(self, exc: Exception, backoff: float) -> float:
        """Record and log a failed round (or recovery); returns the next backoff."""
        backoff = min(BACKOFF_MAX_S, max(BACKOFF_MIN_S, backoff * 2))
        kind = "" if isinstance(exc, RecoveryError) else f"{type(exc).__name__}: "
        error = f"{kind}{_one_line(exc, 600 if isinstance(exc, RecoveryError) else 300)}"
        self.state = self.state.with_error(error)
        log.warning(
            "tabletopic.round_failed topic=%s retry_in=%.0fs error=%s",
            self.label,
            backoff,
            error,
        )
        return backoff


def _raw_parts() -> tuple[Part, Part]:
    return Part("value", ConvertType.RAW, None), Part("key", ConvertType.RAW, None)


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
