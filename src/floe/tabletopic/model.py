"""Commit state of one table topic: plain data, changed only by validated updates.

Invariants (Redpanda datalake, AutoMQ table topics):

* ``committed[p]`` is the offset one past the last record of partition ``p`` that the
  table accounts for (the *committed end*). It only ever comes from the table: recovery
  reads it back (:meth:`Recorded.read`, :meth:`TableState.recovered`), and a round
  applies it only after its commit (:meth:`TableState.apply_round`).
* Every Floe commit records its state in the **table properties** (which snapshot
  expiry, compaction and ``DELETE`` leave alone) and in its snapshot summary (history),
  in the same Iceberg commit as its data: :meth:`TableState.record`.
* Per partition, the ranges of successive rounds are contiguous: a round's range for
  ``p`` starts exactly at ``committed[p]`` (no gap, no overlap). Offsets are skipped
  only explicitly and counted in ``lost_total``: records deleted from the log before
  they were materialized (:meth:`TableState.observe_log`), offsets a round's reader
  found missing (:attr:`RoundResult.lost`), and offsets the table was ahead of the log
  by (``ahead``).
* A table belongs to one topic of one Floe cluster (:class:`TopicIdentity`, recorded
  with the offsets). A newer topic of the same cluster with the same name (deleted and
  recreated) starts at offset 0 in the same table; another cluster's, or an older
  topic's, writes are refused (:class:`TableOwnedError`).
* A round that finds nothing new and has nothing unrecorded commits nothing.

No I/O, no asyncio, no Spark: the coordinator owns one :class:`TableState` per table
topic and replaces it with the value each update returns.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace

from floe.errors import FloeError
from floe.types import Offset, PartitionId, TopicName

COMMIT_ID_PROP = "floe.commit-id"
"""The id of the round that made the newest Floe commit (property and summary)."""
COMMIT_MS_PROP = "floe.commit-ms"
"""When that round committed, ms since the epoch (driver clock)."""
OFFSETS_PROP = "floe.offsets"
"""JSON ``{"<partition>": <committed end>}`` for every partition committed so far (not
only the round's), so the newest value is the full state."""
TOPIC_PROP = "floe.topic"
"""The Kafka topic name (informational)."""
TOPIC_ID_PROP = "floe.topic-id"
"""The id of the topic whose offsets ``floe.offsets`` are."""
TOPIC_CREATED_PROP = "floe.topic-created-ms"
"""When that topic was created (tells a recreated topic from an older one)."""
CLUSTER_ID_PROP = "floe.cluster-id"
"""The Floe cluster that writes the table."""
LOST_PROP = "floe.lost-records"
"""Records that never reached the table, counted once (deleted before materialized,
missing when read, or skipped because the table was ahead of the log)."""
SKIPPED_PROP = "floe.skipped-records"
"""Bad records skipped under ``errors.tolerance``, counted once."""
DLQ_TOPIC_HEADER = "floe.dlq.topic"
"""Dead-letter record headers: where the record came from (topic, partition, offset),
what failed and why, its value's schema id; a replay marker names the dead letter it
replayed and where to."""
DLQ_PARTITION_HEADER = "floe.dlq.partition"
DLQ_OFFSET_HEADER = "floe.dlq.offset"
UNUSABLE_BATCH = "unusable_batch"
"""The error class of an unusable batch's dead letter."""
DLQ_LAST_OFFSET_HEADER = "floe.dlq.last.offset"
"""On the dead letter of an unusable batch (its value is the batch's bytes as stored):
the batch's last offset; ``floe.dlq.offset`` is its first."""
DLQ_ERROR_CLASS_HEADER = "floe.dlq.error.class"
DLQ_REASON_HEADER = "floe.dlq.error.reason"
DLQ_SCHEMA_ID_HEADER = "floe.dlq.schema.id"
DLQ_REPLAYED_HEADER = "floe.dlq.replayed.offset"
DLQ_REPLAYED_TO_HEADER = "floe.dlq.replayed.to"
DLQ_HEADER_PREFIX = "floe.dlq."
MAINTENANCE_PROP = "floe.maintenance"
"""JSON of the last maintenance run's :class:`MaintenanceResult` (its schedule counts
from there, across restarts)."""
AHEAD_PROP = "floe.ahead"
"""JSON ``{"<partition>": <log end>}``: partitions whose log ended below the committed
end, with the lowest log end seen (their offsets above it are counted lost once the log
passes the committed end again)."""

RECORD_PROPS = (
    COMMIT_ID_PROP,
    COMMIT_MS_PROP,
    OFFSETS_PROP,
    TOPIC_PROP,
    TOPIC_ID_PROP,
    TOPIC_CREATED_PROP,
    CLUSTER_ID_PROP,
    LOST_PROP,
    SKIPPED_PROP,
    AHEAD_PROP,
)


class StateError(ValueError):
    """An update that would break the state's invariants (a bug, or a table whose
    recorded state is unreadable)."""


class RecoveryError(FloeError):
    """The table's recorded state forbids writing it; the message says why and how to
    move on. The coordinator shows it and checks again later."""


class OffsetsMissingError(RecoveryError):
    """The table holds data but its Floe offsets cannot be found: Floe refuses to guess
    where to resume."""


class TableOwnedError(RecoveryError):
    """The table records another cluster's topic, or a newer topic of this name."""


class FencedError(FloeError):
    """A round's commit was refused: the table's newest Floe commit is no longer the one
    the round started from (another writer committed meanwhile). Nothing of the round
    landed; the coordinator re-reads the table and plans again."""


class RowsMovedError(FencedError):
    """An upsert round's commit was refused: a data file its position deletes refer to
    left the table since the round read it (a compaction rewrote it). Nothing of the
    round landed; the coordinator redoes it on the new files."""


@dataclass(frozen=True, slots=True)
class PartitionRange:
    """Offsets ``[start, end)`` of one partition; ``end`` is exclusive."""

    partition: PartitionId
    start: Offset
    end: Offset

    def __post_init__(self) -> None:
        if self.partition < 0 or self.start < 0 or self.end <= self.start:
            raise StateError(f"invalid range {self}")


@dataclass(frozen=True, slots=True)
class TopicIdentity:
    """Which topic of which cluster a table's offsets belong to."""

    cluster_id: str
    topic_id: str
    created_ms: int


@dataclass(frozen=True, slots=True)
class Gap:
    """Offsets ``[first, last]`` of ``partition`` that a round found missing."""

    partition: int
    first: int
    last: int


@dataclass(frozen=True, slots=True)
class RoundResult:
    """What one committed round did.

    Attributes:
        lost: offsets the round's readers found missing from the log (see ``gaps``).
        skipped: bad records skipped under ``errors.tolerance``.
        gaps: the missing ranges (at most a few dozen are kept; ``lost`` counts all).
        refusals: why a ``by_latest_schema`` part's latest schema could not be written
            (its records were bad records), one line per part.
        dead_lettered: skipped records sent to the dead-letter topic.
    """

    commit_id: str
    committed_ms: int
    duration_s: float
    rows: int
    files: int
    skipped: int
    lost: int = 0
    gaps: tuple[Gap, ...] = ()
    refusals: tuple[str, ...] = ()
    dead_lettered: int = 0


def encode_offsets(offsets: Mapping[PartitionId, Offset]) -> str:
    """The ``floe.offsets`` value: compact JSON, partitions in order."""
    return json.dumps({str(p): int(offsets[p]) for p in sorted(offsets)}, separators=(",", ":"))


def decode_offsets(text: str, what: str = OFFSETS_PROP) -> dict[PartitionId, Offset]:
    """Parse a ``floe.offsets`` (or ``floe.ahead``) value.

    Raises:
        StateError: not a JSON object of non-negative integer offsets.
    """
    try:
        raw = json.loads(text)
        out = {PartitionId(int(p)): Offset(int(o)) for p, o in raw.items()}
    except (ValueError, AttributeError, TypeError) as exc:
        raise StateError(f"unreadable {what} {text!r}: {exc}") from None
    if any(p < 0 or o < 0 for p, o in out.items()):
        raise StateError(f"negative partition or offset in {what} {text!r}")
    return out


def _count(props: Mapping[str, str], name: str) -> int:
    try:
        return max(0, int(props.get(name, "0")))
    except ValueError:
        raise StateError(f"unreadable {name} {props[name]!r}") from None


@dataclass(frozen=True)
class Recorded:
    """What a table records about Floe's commits (empty: nothing yet).

    Attributes:
        commit_id: the newest Floe commit (``None``: none).
        identity: the topic the offsets belong to (``None``: not recorded, a table
            written by a Floe version before topic identities).
        legacy: read from a snapshot summary, not from table properties.
    """

    commit_id: str | None = None
    commit_ms: int | None = None
    committed: Mapping[PartitionId, Offset] = field(default_factory=dict)
    identity: TopicIdentity | None = None
    lost: int = 0
    skipped: int = 0
    ahead: Mapping[PartitionId, Offset] = field(default_factory=dict)
    legacy: bool = False

    @classmethod
    def read(
        cls,
        properties: Mapping[str, str],
        history: Iterable[tuple[Mapping[str, str], int]] = (),
        *,
        has_rows: bool = False,
    ) -> Recorded:
        """The recorded state: from the table properties; for tables written before
        Floe kept them there, from the newest snapshot summary carrying offsets
        (``history``: summaries with their timestamps, newest first).

        Raises:
            OffsetsMissingError: the table holds rows (``has_rows``) or names a Floe
                commit, but no offsets can be found (say, properties removed and the
                snapshots that carried them expired).
            StateError: a recorded value is unreadable.
        """
        if OFFSETS_PROP in properties:
            return cls._parse(properties, legacy=False)
        for summary, timestamp_ms in history:
            if OFFSETS_PROP in summary:
                found = cls._parse(summary, legacy=True)
                return (
                    found if found.commit_ms is not None else replace(found, commit_ms=timestamp_ms)
                )
        if has_rows or COMMIT_ID_PROP in properties:
            raise OffsetsMissingError(
                "the table holds data but no Floe offsets (table property "
                f"{OFFSETS_PROP!r} and the snapshots that carried it are gone): Floe will "
                "not guess where to resume. Set the property to the committed ends, e.g. "
                f"ALTER TABLE ... SET TBLPROPERTIES ('{OFFSETS_PROP}'='{{\"0\":1234}}'), "
                "or drop the table to materialize the topic again from its log start"
            )
        return cls()

    @classmethod
    def _parse(cls, props: Mapping[str, str], *, legacy: bool) -> Recorded:
        identity = None
        if TOPIC_ID_PROP in props and CLUSTER_ID_PROP in props:
            try:
                created = int(props.get(TOPIC_CREATED_PROP, "0"))
            except ValueError:
                raise StateError(f"unreadable {TOPIC_CREATED_PROP}") from None
            identity = TopicIdentity(props[CLUSTER_ID_PROP], props[TOPIC_ID_PROP], created)
        commit_ms = props.get(COMMIT_MS_PROP)
        return cls(
            commit_id=props.get(COMMIT_ID_PROP),
            commit_ms=int(commit_ms) if commit_ms and commit_ms.isdigit() else None,
            committed=decode_offsets(props[OFFSETS_PROP]),
            identity=identity,
            lost=_count(props, LOST_PROP),
            skipped=_count(props, SKIPPED_PROP),
            ahead=decode_offsets(props[AHEAD_PROP], AHEAD_PROP) if AHEAD_PROP in props else {},
            legacy=legacy,
        )


@dataclass(frozen=True)
class TableState:
    """One table topic's commit state.

    Attributes:
        topic: the Kafka topic.
        table: the Iceberg identifier ``(namespace, table)``.
        identity: the topic this state belongs to (recorded with every commit).
        committed: per partition, the committed end offset (absent: nothing yet).
        pending: the offsets are not known yet (the coordinator is starting, or its
            first recovery failed: see ``last_error``).
        ahead: partitions whose log ends below the committed end (log truncated or
            restored from an older copy), with the lowest log end seen; no rounds for
            them until the log passes the committed end again.
        unrecorded: the state moved without a commit (deleted records skipped, a
            partition found ahead or back): the next round commits even without data.
        last_commit_id: the table's newest Floe commit (the one the next commit must
            follow, or it is fenced).
        last_commit_ms / last_duration_s / last_rows / last_files: that commit's time,
            and, when this process made it, its duration, rows and data files.
        skipped_total / lost_total: the table's counts (recorded in it, so they
            survive restarts): bad records skipped, records that never reached it.
        rounds / rows_total / files_total / failed_rounds: this process's counters.
        last_error: one line about the last failed round, cleared by a committed round.
        note: one line about something the user should know that is not an error
            (a recreated topic started at offset 0).
        warning: one line about records the last round skipped for a reason the user
            can fix (a ``by_latest_schema`` schema the table cannot hold).
        stopped: a bad record under ``errors.tolerance = none`` stopped the table.
    """

    topic: TopicName
    table: tuple[str, str]
    identity: TopicIdentity | None = None
    committed: Mapping[PartitionId, Offset] = field(default_factory=dict)
    pending: bool = False
    ahead: Mapping[PartitionId, Offset] = field(default_factory=dict)
    unrecorded: bool = False
    last_commit_id: str | None = None
    last_commit_ms: int | None = None
    last_duration_s: float | None = None
    last_rows: int = 0
    last_files: int = 0
    skipped_total: int = 0
    lost_total: int = 0
    rounds: int = 0
    rows_total: int = 0
    files_total: int = 0
    last_error: str | None = None
    failed_rounds: int = 0
    note: str | None = None
    warning: str | None = None
    stopped: bool = False

    @classmethod
    def starting(cls, topic: TopicName, table: tuple[str, str]) -> TableState:
        """The state before the first recovery: offsets unknown."""
        return cls(topic, table, pending=True)

    @classmethod
    def recovered(
        cls,
        topic: TopicName,
        table: tuple[str, str],
        recorded: Recorded,
        identity: TopicIdentity | None = None,
    ) -> TableState:
        """The state the table records, for the topic ``identity`` (``None``: not
        checked, as in tests of the round logic).

        A table without a recorded identity (written before Floe recorded one) is
        adopted by the first commit. A newer topic of the same cluster (deleted and
        recreated under the same name) starts at offset 0 in the same table, with a
        ``note``; its counters carry on.

        Raises:
            TableOwnedError: the table records another cluster, or a newer topic of
                this name than ``identity``.
        """
        was = recorded.identity
        state = cls(
            topic,
            table,
            identity=identity,
            committed=dict(recorded.committed),
            ahead=dict(recorded.ahead),
            last_commit_id=recorded.commit_id,
            last_commit_ms=recorded.commit_ms,
            skipped_total=recorded.skipped,
            lost_total=recorded.lost,
            unrecorded=identity is not None and was != identity,
        )
        if identity is None or was is None or was == identity:
            return state
        name = f"{table[0]}.{table[1]}"
        if was.cluster_id != identity.cluster_id:
            raise TableOwnedError(
                f"table {name} is written by another Floe cluster ({was.cluster_id}, "
                f"topic id {was.topic_id}); this cluster is {identity.cluster_id}: refusing "
                "to write it. Give this topic another table (table.topic.namespace) or "
                "drop that table"
            )
        if was.topic_id != identity.topic_id and identity.created_ms <= was.created_ms:
            raise TableOwnedError(
                f"table {name} follows a newer topic {topic!r} (id {was.topic_id}) than "
                f"this one (id {identity.topic_id}): refusing to write it"
            )
        if was.topic_id == identity.topic_id:  # same topic, creation time re-read
            return state
        return replace(
            state,
            committed={},
            ahead={},
            note=(
                f"topic {topic} was recreated (id {was.topic_id} -> {identity.topic_id}): "
                "the new topic is materialized from offset 0 into the same table, after "
                "the old topic's rows"
            ),
        )

    def carrying(self, previous: TableState | None) -> TableState:
        """This recovered state with what ``previous`` (the state before the failure
        that caused the recovery) counted in this process: rounds, rows, files, failed
        rounds, the last error and note, and the last commit's details when it is still
        the table's newest. Offsets and the table's counts always stay the table's."""
        if previous is None:
            return self
        same = previous.last_commit_id == self.last_commit_id and not previous.pending
        return replace(
            self,
            last_commit_ms=previous.last_commit_ms if same else self.last_commit_ms,
            last_duration_s=previous.last_duration_s if same else None,
            last_rows=previous.last_rows if same else 0,
            last_files=previous.last_files if same else 0,
            rounds=previous.rounds,
            rows_total=previous.rows_total,
            files_total=previous.files_total,
            failed_rounds=previous.failed_rounds,
            last_error=previous.last_error,
            note=self.note or previous.note,
            warning=previous.warning,
        )

    def start_of(self, partition: PartitionId) -> Offset:
        """Where the next range of ``partition`` starts (0 when nothing is committed)."""
        return self.committed.get(partition, Offset(0))

    def observe_log(
        self, log_starts: Mapping[PartitionId, Offset], log_ends: Mapping[PartitionId, Offset]
    ) -> tuple[TableState, list[str]]:
        """The state after looking at the partitions' log start and end offsets, with a
        line for the log about each change:

        * a committed end beyond the log end: the partition is *ahead* (log truncated,
          or restored from an older copy); no rounds for it while the log ends below
          the committed end, the lowest log end seen is kept;
        * an ahead partition whose log end reached the committed end again: resumes;
          the offsets between the lowest log end seen and the committed end hold
          records the table never got (the table has other records at those offsets):
          counted lost;
        * a log start beyond the committed end: the records between were deleted
          (retention, DeleteRecords) before they were materialized: counted lost.
        """
        state = self
        lines: list[str] = []
        for p in sorted(log_ends):
            end, mark = log_ends[p], state.start_of(p)
            ahead = dict(state.ahead)
            if mark > end:
                if p not in ahead or end < ahead[p]:
                    if p not in ahead:
                        lines.append(
                            f"tabletopic.offsets_ahead topic={self.topic} partition={p} "
                            f"committed={mark} log_end={end} (log truncated or restored: "
                            "the partition waits until its log passes the committed end)"
                        )
                    ahead[p] = end
                    state = replace(state, ahead=ahead, unrecorded=True)
                continue
            if p in ahead:
                lost = mark - ahead.pop(p)
                lines.append(
                    f"tabletopic.records_lost topic={self.topic} partition={p} "
                    f"from={mark - lost} to={mark} (the table was ahead of the log there)"
                )
                state = replace(
                    state, ahead=ahead, lost_total=state.lost_total + lost, unrecorded=True
                )
            first = log_starts.get(p, Offset(0))
            if first > mark:
                lines.append(
                    f"tabletopic.records_lost topic={self.topic} partition={p} from={mark} "
                    f"to={first} (deleted from the log before they were materialized)"
                )
                state = replace(
                    state,
                    committed={**state.committed, p: first},
                    lost_total=state.lost_total + first - mark,
                    unrecorded=True,
                )
        return state, lines

    def plan(self, ends: Mapping[PartitionId, Offset]) -> tuple[PartitionRange, ...]:
        """The ranges of the next round: per partition ``[committed end, ends[p])``,
        only where that is not empty and the partition is not ahead. ``ends`` are the
        partitions' durable last stable offsets (possibly capped for a bounded round).
        """
        return tuple(
            PartitionRange(p, self.start_of(p), ends[p])
            for p in sorted(ends)
            if ends[p] > self.start_of(p) and p not in self.ahead
        )

    def next_offsets(self, ranges: tuple[PartitionRange, ...]) -> dict[PartitionId, Offset]:
        """The committed ends after ``ranges`` commit (every partition, for the record).

        Raises:
            StateError: ranges that do not start at the committed ends, or two ranges of
                one partition.
        """
        out = dict(self.committed)
        seen: set[PartitionId] = set()
        for r in ranges:
            if r.partition in seen:
                raise StateError(f"two ranges for partition {r.partition} in one round")
            seen.add(r.partition)
            if r.start != self.start_of(r.partition):
                raise StateError(
                    f"partition {r.partition}: range starts at {r.start}, "
                    f"committed end is {self.start_of(r.partition)} (gap or overlap)"
                )
            out[r.partition] = r.end
        return out

    def apply_round(self, ranges: tuple[PartitionRange, ...], result: RoundResult) -> TableState:
        """The state after a round over ``ranges`` committed as ``result``.

        Raises:
            StateError: see :meth:`next_offsets`; or a round with nothing to commit.
        """
        if not ranges and not self.unrecorded:
            raise StateError("a round without ranges or unrecorded changes commits nothing")
        return replace(
            self,
            committed=self.next_offsets(ranges),
            unrecorded=False,
            last_commit_id=result.commit_id,
            last_commit_ms=result.committed_ms,
            last_duration_s=result.duration_s,
            last_rows=result.rows,
            last_files=result.files,
            skipped_total=self.skipped_total + result.skipped,
            lost_total=self.lost_total + result.lost,
            rounds=self.rounds + 1,
            rows_total=self.rows_total + result.rows,
            files_total=self.files_total + result.files,
            last_error=None,
            warning=("; ".join(result.refusals) or None) if ranges else self.warning,
        )

    def record(self) -> dict[str, str]:
        """What a commit of this (already applied) state writes into the table
        properties and its snapshot summary."""
        out = {
            OFFSETS_PROP: encode_offsets(self.committed),
            TOPIC_PROP: self.topic,
            LOST_PROP: str(self.lost_total),
            SKIPPED_PROP: str(self.skipped_total),
            AHEAD_PROP: encode_offsets(self.ahead),
        }
        if self.last_commit_id is not None:
            out[COMMIT_ID_PROP] = self.last_commit_id
        if self.last_commit_ms is not None:
            out[COMMIT_MS_PROP] = str(self.last_commit_ms)
        if self.identity is not None:
            out[TOPIC_ID_PROP] = self.identity.topic_id
            out[TOPIC_CREATED_PROP] = str(self.identity.created_ms)
            out[CLUSTER_ID_PROP] = self.identity.cluster_id
        return out

    def with_error(self, error: str, *, stopped: bool = False) -> TableState:
        """The state after a failed round (nothing committed, offsets unchanged);
        ``stopped``: the coordinator runs no more rounds."""
        return replace(
            self, last_error=error, stopped=stopped, failed_rounds=self.failed_rounds + 1
        )


@dataclass(frozen=True)
class MaintenancePolicy:
    """What one run does (a table topic's ``table.topic.maintenance.*`` settings)."""

    target_file_size_bytes: int
    min_input_files: int
    retain_last: int
    snapshot_max_age_ms: int
    orphan_age_ms: int


@dataclass(frozen=True)
class MaintenanceResult:
    """What one run changed, as Iceberg's procedures report it."""

    started_ms: int
    duration_s: float
    rewritten_files: int
    added_files: int
    rewritten_bytes: int
    expired_snapshots: int
    deleted_files: int
    orphan_files: int
    rewritten_manifests: int
    added_manifests: int

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> MaintenanceResult | None:
        """The recorded run; None when unreadable (a run of another version)."""
        try:
            doc = json.loads(text)
            return cls(**{f: doc[f] for f in cls.__dataclass_fields__})
        except (ValueError, TypeError, KeyError):
            return None

    @classmethod
    def total(cls, runs: Sequence[MaintenanceResult]) -> MaintenanceResult:
        """Several tables' runs as one (a topic routed by record type): counts summed,
        from the first run's start, the durations added."""
        counts = {
            f: sum(getattr(r, f) for r in runs)
            for f in cls.__dataclass_fields__
            if f not in ("started_ms", "duration_s")
        }
        return cls(
            started_ms=min(r.started_ms for r in runs),
            duration_s=round(sum(r.duration_s for r in runs), 3),
            **counts,
        )

    def describe(self) -> str:
        return (
            f"compacted {self.rewritten_files} files into {self.added_files}, expired "
            f"{self.expired_snapshots} snapshots ({self.deleted_files} files deleted), "
            f"removed {self.orphan_files} orphan files, rewrote {self.rewritten_manifests} "
            f"manifests into {self.added_manifests}"
        )


@dataclass(frozen=True, slots=True)
class DeadRecord:
    """A record a round skipped (errors tolerance) that goes to the dead-letter topic:
    where it is in the source topic, and why it was skipped (``error_class``: what
    failed, ``conversion``; ``reason``: one line). An unusable batch is one dead record
    (``error_class`` :data:`UNUSABLE_BATCH`) from ``offset`` to ``last``: its records
    cannot be read one by one, so the batch goes as it is stored."""

    partition: int
    offset: int
    error_class: str
    reason: str
    last: int | None = None

    @property
    def end(self) -> int:
        """The last source offset it covers."""
        return self.offset if self.last is None else self.last
