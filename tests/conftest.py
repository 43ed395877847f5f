"""Fixtures shared by every test tier: real ``floe up`` brokers, always cleaned up."""

from __future__ import annotations

import asyncio
import itertools
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import hypothesis  # noqa: F401  (first: floe.cli hides it from whoever imports it later)
import pytest

from helpers import jvm
from helpers.admin import admin
from helpers.broker import Broker
from helpers.closing_loops import ClosingEventLoopPolicy

# every JVM a test starts runs with the test options (tests/helpers/jvm.py)
os.environ.setdefault("JDK_JAVA_OPTIONS", jvm.OPTIONS)
# every event loop of the test process lets its client sockets finish closing before it
# closes (tests/helpers/closing_loops.py)
asyncio.set_event_loop_policy(ClosingEventLoopPolicy())

# Shared brokers run with auto-create off so a test only sees topics it created itself.
SHARED_SETTINGS = {"auto.create.topics.enable": "false"}
ENGINES = ["local", "s3"]
"""The storage engines the engine_* fixtures run a test on."""
S3_BUCKET = "floe-tests"
_live: list[Broker] = []
_nodes = itertools.count()

if TYPE_CHECKING:
    from helpers.chaos_proxy import ProxyHub
    from helpers.cluster_etcd import EtcdServer
    from helpers.seaweed import SeaweedServer
    from helpers.tables import Lake, Node


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """One broker for every test that only creates its own topics (never restarted)."""
    b = Broker(tmp_path_factory.mktemp("shared") / "data", SHARED_SETTINGS)
    _live.append(b)
    try:
        yield b.start()
        admin.cache_clear()  # drop cached AdminClients before their broker goes away
        b.stop()
    finally:
        b.close()
        _live.remove(b)


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[Callable[..., Broker]]:
    """Start private brokers (for restart and crash tests); all are killed at teardown."""
    made: list[Broker] = []

    def make(settings: dict[str, str] | None = None, wait: bool = True) -> Broker:
        b = Broker(tmp_path / f"broker{len(made)}", {**SHARED_SETTINGS, **(settings or {})})
        made.append(b)
        _live.append(b)
        return b.start(wait)

    try:
        yield make
    finally:
        admin.cache_clear()
        for b in made:
            b.close()
            _live.remove(b)


@pytest.fixture(scope="session")
def s3_server() -> Iterator[SeaweedServer]:
    """One S3 server (SeaweedFS) for the session, started on first use; each broker on
    it gets its own key prefix."""
    from helpers.seaweed import seaweed_server

    with seaweed_server(S3_BUCKET) as server:
        yield server


@pytest.fixture(scope="module")
def s3(request: pytest.FixtureRequest) -> Iterator[SeaweedServer]:
    """A SeaweedFS server of one test module, holding the bucket its ``BUCKET`` names
    (a module that defines its own ``s3`` fixture uses that one)."""
    from helpers.seaweed import seaweed_server

    with seaweed_server(request.module.BUCKET) as server:
        yield server


@pytest.fixture
def hub() -> Iterator[ProxyHub]:
    """TCP proxies a test cuts and heals (:mod:`helpers.chaos_proxy`), closed after it."""
    from helpers.chaos_proxy import ProxyHub

    made = ProxyHub()
    try:
        yield made
    finally:
        made.close()


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    """An etcd server of one test module: its cluster's metadata store."""
    from helpers.cluster_etcd import etcd_server

    with etcd_server(tmp_path_factory.mktemp("etcd")) as server:
        yield server


def s3_settings(server: SeaweedServer, prefix: str) -> dict[str, str]:
    """The settings of a broker whose log is under ``prefix`` in the session bucket."""
    return server.log_settings(S3_BUCKET, prefix)


@pytest.fixture(params=ENGINES)
def engine_broker_factory(
    request: pytest.FixtureRequest, broker_factory: Callable[..., Broker]
) -> Callable[..., Broker]:
    """``broker_factory`` once per storage engine: local disk, and object storage (the
    session's S3 server, a fresh prefix per broker) with a cache of no bytes: every
    segment leaves ``data.dir`` once in the bucket (checked every second), so reads go
    to the bucket and a lost disk restores from a producer-state snapshot."""
    if request.param == "local":
        return broker_factory
    server: SeaweedServer = request.getfixturevalue("s3_server")

    def make(settings: dict[str, str] | None = None) -> Broker:
        prefix = f"b-{uuid.uuid4().hex[:10]}"
        bounded = {"storage.s3.cache.max.bytes": "0", "log.retention.check.interval.ms": "1000"}
        return broker_factory({**s3_settings(server, prefix), **bounded, **(settings or {})})

    return make


@pytest.fixture(scope="session")
def s3_broker(
    tmp_path_factory: pytest.TempPathFactory, s3_server: SeaweedServer
) -> Iterator[Broker]:
    """The shared broker's twin on object storage (never restarted)."""
    settings = {**SHARED_SETTINGS, **s3_settings(s3_server, "shared")}
    b = Broker(tmp_path_factory.mktemp("shared-s3") / "data", settings)
    _live.append(b)
    try:
        yield b.start()
        admin.cache_clear()
        b.stop()
    finally:
        b.close()
        _live.remove(b)


@pytest.fixture(params=ENGINES)
def engine_broker(request: pytest.FixtureRequest) -> Broker:
    """The shared broker of each storage engine, in turn."""
    name = "broker" if request.param == "local" else "s3_broker"
    found: Broker = request.getfixturevalue(name)
    return found


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lake]:
    """Table topics in the test process: one catalog, warehouse and Spark session for
    the module (see helpers/tables.py)."""
    from helpers.tables import lake_at

    with lake_at(tmp_path_factory.mktemp("lake")) as made:
        yield made


@pytest.fixture
def node(lake: Lake) -> Iterator[Node]:
    """One broker's worth of table topics on the module's lake (its own data dir)."""
    made = lake.node(f"node{next(_nodes)}")
    try:
        yield made
    finally:
        made.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> object:
    """Attach the stderr tail of every live broker to a failed test's report."""
    report = yield
    if report.failed:
        for b in _live:
            report.sections.append((f"floe stderr ({b.data_dir})", b.stderr_tail(60)))
    return report
