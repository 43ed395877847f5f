"""Fixtures of the registry unit tests: a Registry on a real LocalStore in tmp_path."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from floe.config.loader import load_config
from floe.registry.core.service import Registry
from floe.storage.journal import Journal
from floe.storage.local import LocalStore
from floe.types import TopicName

RegistryFactory = Callable[[], Registry]


@pytest.fixture
def open_registry(tmp_path: Path) -> Iterator[RegistryFactory]:
    """Open (and reopen) a Registry on one data dir; each call closes the previous store,
    so a second call is a restart that replays ``_schemas``."""
    stores: list[LocalStore] = []
    toml = tmp_path / "floe.toml"
    toml.touch()

    def make() -> Registry:
        if stores:
            stores[-1].close()
        store = LocalStore(tmp_path / "data", load_config(toml, {}, {}))
        stores.append(store)
        registry = Registry(Journal(store, TopicName("_schemas")))
        registry.open()
        return registry

    try:
        yield make
    finally:
        stores[-1].close() if stores else None
