"""SQLite metadata stores for the cluster contract tests (one file, several clients)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from floe.cluster.interface import MetadataStore
from floe.cluster.sqlite import SqliteMetadataStore


@contextmanager
def sqlite_stores(tmp_path: Path) -> Iterator[Callable[[], MetadataStore]]:
    """A factory of clients of one SQLite file; closes them all at exit."""
    made: list[SqliteMetadataStore] = []

    def make() -> MetadataStore:
        made.append(SqliteMetadataStore(tmp_path / "cluster.db"))
        return made[-1]

    try:
        yield make
    finally:
        for store in made:
            store.close()
