"""The last minutes of the broker's numbers, for the console's charts: sampled in
memory every ``admin.history.interval.ms``, nothing stored, no external service.

Per topic: bytes in and out and records in per second (deltas of the Kafka path's
counters, :class:`~floe.broker.stats.BrokerStats`); per consumer group: its total lag;
per table topic: its lag in records, its freshness (seconds since its last commit) and
how long its last round took. A series keeps :data:`WINDOW_S` of points; a topic, group
or table that is gone stops getting points and ages out.

Ownership: one :class:`History` per admin server, created and started by the
composition root with it and stopped before the store closes; it runs on the broker's
event loop and reads the facade (cheap: the table status is read once per sample).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from floe.tasks import cancel_and_wait

if TYPE_CHECKING:
    from floe.admin import Admin

log = logging.getLogger("floe.admin.history")

WINDOW_S = 15 * 60
"""How far back a chart looks."""

Point = tuple[int, float]
"""(epoch ms, value)."""


@dataclass(frozen=True)
class HistoryView:
    """Every series, by kind then name then metric: ``topics[t]["bytes_in"]`` is a list
    of ``[epoch ms, bytes per second]`` points, oldest first."""

    interval_ms: int
    window_s: int
    topics: dict[str, dict[str, list[Point]]]
    groups: dict[str, dict[str, list[Point]]]
    tables: dict[str, dict[str, list[Point]]]


class History:
    """Samples ``admin`` every ``interval_s`` (module docstring)."""

    def __init__(self, admin: Admin, interval_s: float) -> None:
        self.admin = admin
        self.interval_s = interval_s
        size = max(2, int(WINDOW_S / interval_s))
        self._size = size
        self._series: dict[tuple[str, str, str], deque[Point]] = {}
        self._last: dict[str, tuple[float, int, int, int]] = {}
        """Per topic: (monotonic time, bytes in, bytes out, records in) at the last sample."""
        self._sampled_at: float | None = None
        """When the last sample was taken (the counters start at zero with the broker,
        before the first sample: a topic first seen later counts from zero then)."""
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="admin-history")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    async def _run(self) -> None:
        while True:
            try:
                await self.sample()
            except Exception:  # a chart is not worth a dead loop: log, try again
                log.exception("admin.history_sample_failed")
            await asyncio.sleep(self.interval_s)

    def _add(self, kind: str, name: str, metric: str, at_ms: int, value: float) -> None:
        key = (kind, name, metric)
        points = self._series.get(key)
        if points is None:
            points = self._series[key] = deque(maxlen=self._size)
        points.append((at_ms, value))

    async def sample(self) -> None:
        """Take one sample of every topic, group and table topic."""
        now, at_ms = time.monotonic(), int(time.time() * 1000)
        for topic, traffic in list(self.admin.broker.stats.topics.items()):
            counters = (traffic.bytes_in, traffic.bytes_out, traffic.messages_in)
            last = self._last.get(topic)
            if last is None and self._sampled_at is not None:
                last = (self._sampled_at, 0, 0, 0)
            self._last[topic] = (now, *counters)
            if last is None or now <= last[0]:
                continue
            seconds = now - last[0]
            for metric, value, before in zip(
                ("bytes_in", "bytes_out", "records_in"), counters, last[1:], strict=True
            ):
                self._add("topics", topic, metric, at_ms, max(0, value - before) / seconds)
        await self.admin.groups.refreshed()
        for group in self.admin.groups.all():
            self._add("groups", group.group, "lag", at_ms, group.lag)
        for table in await self.admin.tables.status():
            lags = [p.lag_records for p in table.partitions if p.lag_records is not None]
            if lags and len(lags) == len(table.partitions):
                self._add("tables", table.topic, "lag_records", at_ms, sum(lags))
            if table.last_commit_ms:
                fresh = max(0.0, (at_ms - table.last_commit_ms) / 1000)
                self._add("tables", table.topic, "freshness_s", at_ms, fresh)
            if table.last_commit_duration_s is not None:
                self._add("tables", table.topic, "round_s", at_ms, table.last_commit_duration_s)
        self._sampled_at = now
        oldest = at_ms - WINDOW_S * 1000
        for key, points in list(self._series.items()):
            if not points or points[-1][0] < oldest:
                del self._series[key]

    def view(self, visible: Callable[[str, str], bool]) -> HistoryView:
        """The series ``visible(kind, name)`` keeps (``kind``: ``topics``, ``groups``,
        ``tables``)."""
        out: dict[str, dict[str, dict[str, list[Point]]]] = {
            "topics": {}, "groups": {}, "tables": {}
        }  # fmt: skip
        for (kind, name, metric), points in self._series.items():
            if not visible(kind, name):
                continue
            out[kind].setdefault(name, {})[metric] = list(points)
        return HistoryView(
            round(self.interval_s * 1000), WINDOW_S, out["topics"], out["groups"], out["tables"]
        )
