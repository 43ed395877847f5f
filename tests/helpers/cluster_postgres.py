"""PostgreSQL metadata stores for the cluster contract tests: one throwaway server
(:func:`helpers.postgres.postgres_server`), several clients of its database."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from floe.cluster.interface import MetadataStore
from floe.cluster.postgres import PostgresMetadataStore
from helpers.postgres import PostgresServer, postgres_server


def dsn(server: PostgresServer) -> str:
    """A libpq URI for ``server``'s database."""
    return (
        f"postgresql://{server.user}:{server.password}@{server.host}:{server.port}"
        f"/{server.database}"
    )


@contextmanager
def postgres_stores(tmp_path: Path) -> Iterator[Callable[[], MetadataStore]]:
    """A factory of clients of one fresh server's database; closes them all and stops
    the server at exit. (The server keeps its files in its own temp directory, which
    the postgres OS user can reach: ``tmp_path`` is unused.)"""
    del tmp_path
    made: list[PostgresMetadataStore] = []

    def make() -> MetadataStore:
        made.append(PostgresMetadataStore(dsn(server), timeout_s=5.0))
        return made[-1]

    with postgres_server() as server:
        try:
            yield make
        finally:
            for store in made:
                store.close()
