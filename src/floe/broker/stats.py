"""Traffic and request counters the Kafka path updates: plain ints, read at scrape time.

The broker produces hundreds of MB/s, so nothing here allocates per record or takes a
lock: a handler adds to per-topic ints once per partition of a request, the connection
adds one request's latency to a fixed-bucket histogram once per request, and
:mod:`floe.observability` turns them into Prometheus metrics when ``/metrics`` is read.

Ownership: one :class:`BrokerStats` per :class:`~floe.broker.core.Broker`, updated and
read on the broker's event loop only (so plain ``+=`` is safe). Counters only grow
while the process runs; a restart starts them at zero (Prometheus' ``rate()`` handles
counter resets).
"""

from __future__ import annotations

import dataclasses
import typing
from bisect import bisect_left
from collections.abc import Iterator
from typing import Any

from floe.types import TopicName

LATENCY_BUCKETS_S = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)
"""Upper bounds (seconds) of the request latency buckets; a last ``+Inf`` one follows."""


class Histogram:
    """Fixed buckets: ``counts[i]`` counts observations ``<= bounds[i]`` and above the
    bound before (not cumulative; the exporter sums them); the last one is ``+Inf``."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...] = LATENCY_BUCKETS_S) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[float, int]]:
        """``(upper bound, observations <= it)`` per bucket, ``+Inf`` last."""
        out = []
        total = 0
        for bound, n in zip((*self.bounds, float("inf")), self.counts, strict=True):
            total += n
            out.append((bound, total))
        return out


class TopicTraffic:
    """Bytes and records appended by Produce and returned by Fetch, for one topic."""

    __slots__ = ("bytes_in", "bytes_out", "messages_in", "messages_out")

    def __init__(self) -> None:
        self.bytes_in = 0
        self.messages_in = 0
        self.bytes_out = 0
        self.messages_out = 0


class BrokerStats:
    """The Kafka path's counters (module docstring).

    Attributes:
        topics: per topic, produce and fetch traffic (topics are never removed: a
            counter of a deleted topic keeps its last value until the restart).
        latency: per API key, the latency of every answered request (its count is the
            request count), from the frame read to the response written.
        errors: per ``(API key, error code)``, the error codes in responses, one per
            failed item (partition, topic, group...) as Kafka counts them.
        connections: Kafka connections open now.
    """

    def __init__(self) -> None:
        self.topics: dict[TopicName, TopicTraffic] = {}
        self.latency: dict[int, Histogram] = {}
        self.errors: dict[tuple[int, int], int] = {}
        self.connections = 0

    def traffic(self, topic: TopicName) -> TopicTraffic:
        found = self.topics.get(topic)
        if found is None:
            found = self.topics[topic] = TopicTraffic()
        return found

    def request(self, api_key: int, seconds: float, response: Any) -> None:
        """Count one answered request: its latency and the error codes in ``response``
        (a kio entity, or ``None`` for a request answered with nothing)."""
        hist = self.latency.get(api_key)
        if hist is None:
            hist = self.latency[api_key] = Histogram()
        hist.observe(seconds)
        if response is not None:
            for code in error_codes(response):
                if code:
                    self.error(api_key, code)

    def error(self, api_key: int, code: int) -> None:
        key = (api_key, code)
        self.errors[key] = self.errors.get(key, 0) + 1


_PLANS: dict[type, tuple[tuple[str, bool], ...]] = {}


def _walk_plan(cls: type) -> tuple[tuple[str, bool], ...]:
    """The fields of kio entity ``cls`` worth visiting: ``(name, is_error_code)`` for
    ``error_code`` and for fields holding nested entities (alone or in a tuple);
    computed once per class."""
    plan = _PLANS.get(cls)
    if plan is None:
        hints = typing.get_type_hints(cls)
        plan = _PLANS[cls] = tuple(
            (f.name, f.name == "error_code")
            for f in dataclasses.fields(cls)
            if f.name == "error_code" or _holds_entity(hints[f.name])
        )
    return plan


def _holds_entity(annotation: Any) -> bool:
    if dataclasses.is_dataclass(annotation) and isinstance(annotation, type):
        return True
    return any(_holds_entity(arg) for arg in typing.get_args(annotation))


def error_codes(entity: Any) -> Iterator[int]:
    """Every ``error_code`` in a kio response entity and its nested entities."""
    for name, is_code in _walk_plan(type(entity)):
        value = getattr(entity, name)
        if is_code:
            yield int(value)
        elif isinstance(value, tuple):
            for item in value:
                yield from error_codes(item)
        elif value is not None:
            yield from error_codes(value)
