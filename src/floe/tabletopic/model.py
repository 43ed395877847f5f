"""Commit state of one table topic: plain data, changed only by validated updates.

Invariants (Redpanda datalake, AutoMQ table topics):

* ``committed[p]`` is the offset one past the last record of partition ``p`` that is in
  the table (the *committed end*). It only ever comes from the table: recovery reads it
  from the newest snapshot summary carrying ``floe.offsets``
  (:meth:`TableState.recovered`), and a round applies it only after its commit
  (:meth:`TableState.apply_round`).
* Per partition, the ranges of successive rounds are contiguous: a round's range for
  ``p`` starts exactly at ``committed[p]`` (no gap, no overlap). The one exception is
  explicit: :meth:`TableState.skip_deleted` moves a committed end forward over records
  that retention or DeleteRecords removed before they were materialized, and counts them.
* A round that finds nothing new commits nothing (:meth:`TableState.plan` returns no
  ranges).

No I/O, no asyncio, no Spark: the coordinator owns one :class:`TableState` per table
topic and replaces it with the value each update returns.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from floe.types import Offset, PartitionId, TopicName

COMMIT_ID_PROP = "floe.commit-id"
"""Snapshot-summary property: the id of the round that made the snapshot."""
OFFSETS_PROP = "floe.offsets"
"""Snapshot-summary property: JSON ``{"<partition>": <committed end>}`` for every
partition committed so far (not only the round's), so the newest one is the full state."""
TOPIC_PROP = "floe.topic"
"""Snapshot-summary property: the Kafka topic name (informational)."""


class StateError(ValueError):
    """An update that would break the state's invariants (a bug, never bad data)."""


@dataclass(frozen=True, slots=True)
class PartitionRange:
    """Offsets ``[start, end)`` of one partition; ``end`` is exclusive."""

    partition: PartitionId
    start: Offset
    end: Offset

    def __post_init__(self) -> None:
        if self.partition < 0 or self.start < 0 or self.end <= self.start:
            raise StateError(f"invalid range {self}")

    def split(self, max_records: int) -> list[PartitionRange]:
        """This range cut into pieces of at most ``max_records`` offsets (for tasks)."""
        out = []
        start = int(self.start)
        while start < self.end:
            stop = min(int(self.end), start + max_records)
            out.append(PartitionRange(self.partition, Offset(start), Offset(stop)))
            start = stop
        return out


@dataclass(frozen=True, slots=True)
class RoundResult:
    """What one committed round did (read back from its snapshot)."""

    commit_id: str
    committed_ms: int
    duration_s: float
    rows: int
    files: int
    skipped: int


def encode_offsets(offsets: Mapping[PartitionId, Offset]) -> str:
    """The ``floe.offsets`` summary value: compact JSON, partitions in order."""
    return json.dumps({str(p): int(offsets[p]) for p in sorted(offsets)}, separators=(",", ":"))


def decode_offsets(text: str) -> dict[PartitionId, Offset]:
    """Parse a ``floe.offsets`` summary value.

    Raises:
        StateError: not a JSON object of non-negative integer offsets.
    """
    try:
        raw = json.loads(text)
        out = {PartitionId(int(p)): Offset(int(o)) for p, o in raw.items()}
    except (ValueError, AttributeError, TypeError) as exc:
        raise StateError(f"unreadable {OFFSETS_PROP} {text!r}: {exc}") from None
    if any(p < 0 or o < 0 for p, o in out.items()):
        raise StateError(f"negative partition or offset in {OFFSETS_PROP} {text!r}")
    return out


@dataclass(frozen=True)
class TableState:
    """One table topic's commit state.

    Attributes:
        topic: the Kafka topic.
        table: the Iceberg identifier ``(namespace, table)``.
        committed: per partition, the committed end offset (absent: nothing yet).
        last_commit_id / last_commit_ms / last_duration_s / last_rows / last_files: the
            newest round committed by this process (recovery knows only the id).
        skipped_total: bad records skipped (errors tolerance) since this process started.
        lost_total: records removed from the log before they were materialized.
        rounds: rounds committed by this process.
        rows_total / files_total: rows and data files those rounds added (for metrics).
        last_error: one line about the last failed round, cleared by a committed round.
        failed_rounds: rounds that failed since this process started (Spark, catalog,
            bad records under tolerance none; redone rounds for a new schema excluded).
        stopped: a bad record under ``errors.tolerance = none`` stopped the table (see
            ``last_error``); it stays stopped until its settings change.
    """

    topic: TopicName
    table: tuple[str, str]
    committed: Mapping[PartitionId, Offset] = field(default_factory=dict)
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
    stopped: bool = False

    @classmethod
    def recovered(
        cls,
        topic: TopicName,
        table: tuple[str, str],
        summary: Mapping[str, str] | None,
        committed_ms: int | None = None,
    ) -> TableState:
        """The state recorded in the table: ``summary`` is the newest snapshot summary
        carrying ``floe.offsets`` (``None``: nothing committed yet, or no table).

        Raises:
            StateError: an unreadable ``floe.offsets``.
        """
        if summary is None:
            return cls(topic, table)
        return cls(
            topic,
            table,
            committed=decode_offsets(summary[OFFSETS_PROP]),
            last_commit_id=summary.get(COMMIT_ID_PROP),
            last_commit_ms=committed_ms,
        )

    def carrying(self, previous: TableState | None) -> TableState:
        """This recovered state with what ``previous`` (the state before the failed round
        that caused the recovery) counted in this process: rounds, skipped and lost
        records, the last error, and the last commit's details when it is still the
        table's newest. Offsets always stay the table's."""
        if previous is None:
            return self
        same = previous.last_commit_id == self.last_commit_id
        return replace(
            self,
            last_commit_ms=previous.last_commit_ms if same else self.last_commit_ms,
            last_duration_s=previous.last_duration_s if same else None,
            last_rows=previous.last_rows if same else 0,
            last_files=previous.last_files if same else 0,
            skipped_total=previous.skipped_total,
            lost_total=previous.lost_total,
            rounds=previous.rounds,
            rows_total=previous.rows_total,
            files_total=previous.files_total,
            failed_rounds=previous.failed_rounds,
            last_error=previous.last_error,
        )

    def start_of(self, partition: PartitionId) -> Offset:
        """Where the next range of ``partition`` starts (0 when nothing is committed)."""
        return self.committed.get(partition, Offset(0))

    def plan(self, ends: Mapping[PartitionId, Offset]) -> tuple[PartitionRange, ...]:
        """The ranges of the next round: per partition ``[committed end, ends[p])``,
        only where that is not empty. ``ends`` are the partitions' last stable offsets.
        """
        return tuple(
            PartitionRange(p, self.start_of(p), ends[p])
            for p in sorted(ends)
            if ends[p] > self.start_of(p)
        )

    def skip_deleted(self, partition: PartitionId, log_start: Offset) -> TableState:
        """Move ``partition``'s committed end up to ``log_start``: the records between
        were deleted (retention, DeleteRecords) before they reached the table.

        Raises:
            StateError: ``log_start`` is not beyond the committed end.
        """
        start = self.start_of(partition)
        if log_start <= start:
            raise StateError(f"partition {partition}: {log_start} is not beyond {start}")
        committed = {**self.committed, partition: log_start}
        return replace(self, committed=committed, lost_total=self.lost_total + log_start - start)

    def next_offsets(self, ranges: tuple[PartitionRange, ...]) -> dict[PartitionId, Offset]:
        """The committed ends after ``ranges`` commit (every partition, for the summary).

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
        """The state after a round over ``ranges`` committed.

        Raises:
            StateError: see :meth:`next_offsets`; or an empty round (nothing to commit).
        """
        if not ranges:
            raise StateError("a round without ranges commits nothing")
        return replace(
            self,
            committed=self.next_offsets(ranges),
            last_commit_id=result.commit_id,
            last_commit_ms=result.committed_ms,
            last_duration_s=result.duration_s,
            last_rows=result.rows,
            last_files=result.files,
            skipped_total=self.skipped_total + result.skipped,
            rounds=self.rounds + 1,
            rows_total=self.rows_total + result.rows,
            files_total=self.files_total + result.files,
            last_error=None,
        )

    def with_error(self, error: str, *, stopped: bool = False) -> TableState:
        """The state after a failed round (nothing committed, offsets unchanged);
        ``stopped``: the coordinator runs no more rounds."""
        return replace(
            self, last_error=error, stopped=stopped, failed_rounds=self.failed_rounds + 1
        )
