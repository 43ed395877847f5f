"""Fixtures shared by every test tier: real ``floe up`` brokers, always cleaned up."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from helpers.admin import admin
from helpers.broker import Broker

# Shared brokers run with auto-create off so a test only sees topics it created itself.
SHARED_SETTINGS = {"auto.create.topics.enable": "false"}
_live: list[Broker] = []
_nodes = itertools.count()

if TYPE_CHECKING:
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

    def make(settings: dict[str, str] | None = None) -> Broker:
        b = Broker(tmp_path / f"broker{len(made)}", {**SHARED_SETTINGS, **(settings or {})})
        made.append(b)
        _live.append(b)
        return b.start()

    try:
        yield make
    finally:
        admin.cache_clear()
        for b in made:
            b.close()
            _live.remove(b)


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
