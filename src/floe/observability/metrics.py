"""One scrape of ``/metrics``, and the Schema Registry's HTTP request metrics.

:class:`Metrics` is created by the composition root with what it reads (the broker's
counters, the store, the group coordinator, the table-topic manager and the admin
facade's table status) and owned by the broker's event loop: a scrape reads the store
and the coordinators on the loop, between requests, and the table status the admin API
serves (its catalog reads run in worker threads). It holds one ``prometheus_client``
registry for the collectors and for the registry HTTP metrics, which
:class:`HttpMetrics` (an ASGI middleware inside the registry's app) updates once per
request: that path is not hot, so plain ``prometheus_client`` metrics serve.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.core import Metric
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from floe.admin import TableStatusService
from floe.broker.apis import APIS
from floe.broker.core import Broker
from floe.coordinator.group import GroupCoordinator
from floe.observability.collectors import (
    GroupOffset,
    broker_families,
    bucket_families,
    cluster_families,
    group_families,
    partition_families,
    table_families,
)
from floe.storage.interface import NotOwnerError, PartitionLog, UnknownTopicOrPartitionError
from floe.storage.object.bucket import Bucket
from floe.storage.object.wal import WalWriter
from floe.tabletopic.manager import TableTopicManager
from floe.types import PartitionId, TopicName

UNMATCHED_ROUTE = "unmatched"
"""The ``route`` label of a registry request that matched no route (a 404)."""


class _Families:
    """A collector yielding families computed before the scrape (``generate_latest``
    takes anything with ``collect()``)."""

    def __init__(self, registry: CollectorRegistry, families: Iterable[Metric]) -> None:
        self._registry = registry
        self._families = families

    def collect(self) -> Iterator[Metric]:
        yield from self._registry.collect()
        yield from self._families


class Metrics:
    """Everything ``/metrics`` reports (module docstring)."""

    def __init__(self, broker: Broker, groups: GroupCoordinator | None) -> None:
        """``groups``: this broker's group coordinator (None on a standby: none runs
        there); each broker reports the groups it coordinates."""
        self.broker = broker
        self.groups = groups
        self._tables: TableTopicManager | None = None
        self._status: TableStatusService | None = None
        self.registry = CollectorRegistry(auto_describe=False)
        self.http_requests = Counter(
            "floe_registry_http_requests",
            "Schema Registry HTTP requests, per method, route template and status.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.http_latency = Histogram(
            "floe_registry_http_request_duration_seconds",
            "Schema Registry HTTP request duration, per method and route template.",
            ["method", "route"],
            registry=self.registry,
        )

    def watch_tables(self, manager: TableTopicManager) -> None:
        """Report ``manager``'s table topics: their status through the admin facade's
        :class:`TableStatusService` (so lag means what ``floe table status`` says) and
        their coordinators' counters."""
        self._tables = manager
        self._status = TableStatusService(self.broker.store, self.broker.config, manager)

    def mount(self, app: ASGIApp) -> None:
        """Serve ``GET /metrics`` from ``app`` (the admin API's Starlette app)."""
        if not isinstance(app, Starlette):
            raise TypeError(f"cannot add /metrics to a {type(app).__name__}")
        app.add_route("/metrics", self.endpoint, methods=["GET"], include_in_schema=False)

    def _partitions(self) -> Iterator[PartitionLog]:
        store = self.broker.store
        for name, meta in sorted(store.topics().items()):
            for p in range(meta.partitions):
                try:
                    yield store.partition(name, PartitionId(p))
                except NotOwnerError:  # another broker leads it, and exports it
                    continue

    def _high_watermark(self, topic: str, partition: int) -> int | None:
        try:
            return int(
                self.broker.store.partition(TopicName(topic), PartitionId(partition)).high_watermark
            )
        except (UnknownTopicOrPartitionError, NotOwnerError):
            return None

    def _group_offsets(self) -> Iterator[GroupOffset]:
        if self.groups is None:
            return
        for group, data in sorted(self.groups.persisted_groups()):
            for (topic, partition), value in sorted(data.offsets.items()):
                yield GroupOffset(group, topic, partition, value.offset)

    async def exposition(self) -> bytes:
        """The Prometheus text exposition of every metric, read now."""
        statuses = await self._status.status(coordinated=True) if self._status else []
        coordinators = self._tables.coordinators if self._tables is not None else {}
        states = {t: c.state for t, c in coordinators.items()}
        api_names = {key: api.name for key, api in APIS.items()}
        families = [
            *broker_families(self.broker.stats, api_names),
            *partition_families(self._partitions()),
            *group_families(self._group_offsets(), self._high_watermark),
            *table_families(statuses, states),
        ]
        bucket = getattr(self.broker.store, "bucket", None)
        if isinstance(bucket, Bucket):
            wal = getattr(self.broker.store, "wal", None)
            families += bucket_families(
                bucket.stats, self._partitions(), wal if isinstance(wal, WalWriter) else None
            )
        if self.broker.membership is not None:
            families += cluster_families(self.broker.membership)
        return generate_latest(_Families(self.registry, families))

    async def endpoint(self, request: Request) -> Response:
        """``GET /metrics``."""
        return Response(await self.exposition(), media_type=CONTENT_TYPE_LATEST)


class HttpMetrics:
    """ASGI middleware counting and timing each HTTP request by route template (the
    ``route`` Starlette's router put in the scope, ``unmatched`` when none did). Goes
    inside the app's router stack, where that scope is the router's own."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def tracking(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, tracking)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", UNMATCHED_ROUTE)
            method = scope["method"]
            self.metrics.http_requests.labels(method, template, str(status)).inc()
            self.metrics.http_latency.labels(method, template).observe(
                time.perf_counter() - started
            )
