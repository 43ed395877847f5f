"""What the PostgreSQL metadata store adds to the contract (test_cluster_metadata.py):
it fails fast and in one line when the server is down, frozen or refuses us; several
brokers starting at once all create the tables without error; and a store object
outlives a server restart (it reconnects on the next call).

One server for the module; tests that stop or freeze it always bring it back.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from pathlib import Path
from threading import Barrier

import psycopg
import pytest

from floe.cluster.interface import BrokerInfo, MetadataUnavailableError, Ownership
from floe.cluster.postgres import PostgresMetadataStore
from floe.errors import ConfigError
from floe.types import PartitionId, TopicName
from helpers.cluster_postgres import dsn
from helpers.postgres import PostgresServer, _as_postgres, find_bin_dir, postgres_server

TIMEOUT_S = 1.0
SLACK_S = 0.5
"""How late past its timeout a failing call may return (thread wake-ups, a loaded box)."""
T = TopicName("orders")


class Postmaster:
    """The module server's postmaster, found through a backend's parent, so tests can
    stop, start, freeze and thaw it (its command line is kept to start it again)."""

    def __init__(self, server: PostgresServer) -> None:
        self.server = server
        with psycopg.connect(dsn(server)) as conn:  # its backend lives as long as it
            row = conn.execute("SELECT pg_backend_pid()").fetchone()
            assert row is not None
            self.pid = _parent(row[0])
        self.argv = Path(f"/proc/{self.pid}/cmdline").read_text().split("\0")[:-1]
        assert self.argv[1] == "-D", self.argv
        self.data = Path(self.argv[2])

    def superuser(self) -> psycopg.Connection[tuple[object, ...]]:
        """The ``postgres`` superuser over the server's Unix socket (trusted)."""
        sock = self.argv[self.argv.index("-k") + 1]
        return psycopg.connect(
            host=sock, port=self.server.port, user="postgres", dbname=self.server.database,
            autocommit=True,
        )  # fmt: skip

    def stop(self) -> None:
        _as_postgres(find_bin_dir() / "pg_ctl", "stop", "-m", "fast", "-D", self.data)

    def start(self) -> None:
        pg_ctl = find_bin_dir() / "pg_ctl"
        log = self.data.parent / "log"
        opts = " ".join(self.argv[3:])
        _as_postgres(pg_ctl, "start", "-w", "-t", "30", "-D", self.data, "-l", log, "-o", opts)
        self.pid = int((self.data / "postmaster.pid").read_text().split()[0])

    @contextmanager
    def frozen(self) -> Iterator[None]:
        """SIGSTOP the postmaster and its backends: the kernel still accepts and
        acknowledges our bytes, nobody answers."""
        pids = [self.pid, *self._children()]
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            yield
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)

    def _children(self) -> list[int]:
        found = []
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                if _parent(int(proc.name)) == self.pid:
                    found.append(int(proc.name))
            except OSError:
                continue  # it exited
        return found


def _parent(pid: int) -> int:
    """``pid``'s parent, from /proc (the field after the parenthesized command name)."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    with postgres_server() as running:
        yield running


@pytest.fixture
def postmaster(server: PostgresServer) -> Postmaster:
    return Postmaster(server)


@pytest.fixture
def stores(
    server: PostgresServer, request: pytest.FixtureRequest
) -> Iterator[Callable[..., PostgresMetadataStore]]:
    """Clients in a schema of the test's own (by default), closed at its end."""
    made: list[PostgresMetadataStore] = []
    own = request.node.name.removeprefix("test_")[:63]

    def make(schema: str = own, timeout_s: float = TIMEOUT_S) -> PostgresMetadataStore:
        made.append(PostgresMetadataStore(dsn(server), schema, timeout_s))
        return made[-1]

    yield make
    for store in made:
        store.close()


def timed_failure(call: Callable[[], object]) -> tuple[float, str]:
    started = time.monotonic()
    with pytest.raises(MetadataUnavailableError) as caught:
        call()
    return time.monotonic() - started, str(caught.value)


def assert_one_line(message: str, server: PostgresServer) -> None:
    assert "\n" not in message, message
    assert f"{server.host}:{server.port}" in message, message
    assert server.password not in message, message


def test_a_stopped_server_fails_fast_in_one_line(
    stores: Callable[..., PostgresMetadataStore], postmaster: Postmaster
) -> None:
    store = stores()
    store.register(BrokerInfo(1, "127.0.0.1", 9001), 30.0)
    postmaster.stop()
    try:
        # the dead connection, then a refused reconnect: both well within the timeout
        for _ in range(2):
            took, message = timed_failure(store.live_brokers)
            assert took < TIMEOUT_S + SLACK_S, message
            assert_one_line(message, postmaster.server)
        with pytest.raises(MetadataUnavailableError) as caught:
            PostgresMetadataStore(dsn(postmaster.server), timeout_s=TIMEOUT_S)
        assert_one_line(str(caught.value), postmaster.server)
        assert "refused" in str(caught.value)
    finally:
        postmaster.start()


def test_a_frozen_server_fails_within_the_timeout(
    stores: Callable[..., PostgresMetadataStore], postmaster: Postmaster
) -> None:
    store = stores()
    assert store.claim(T, PartitionId(0), 1, None) == Ownership(1, 1)
    with postmaster.frozen():
        took, message = timed_failure(store.owners)
    assert TIMEOUT_S - 0.1 <= took < TIMEOUT_S + SLACK_S, message
    assert_one_line(message, postmaster.server)
    assert f"no answer within {TIMEOUT_S:g} s" in message
    assert store.owners() == {(T, PartitionId(0)): Ownership(1, 1)}  # reconnected
    store.forget(T)


def test_the_same_store_works_again_after_a_restart(
    stores: Callable[..., PostgresMetadataStore], postmaster: Postmaster
) -> None:
    store = stores()
    me = BrokerInfo(2, "127.0.0.1", 9002)
    store.register(me, 30.0)
    held = store.acquire("group:g", 2, 30.0)
    assert held is not None
    postmaster.stop()
    try:
        with pytest.raises(MetadataUnavailableError):
            store.keepalive()
    finally:
        postmaster.start()
    # the failed call dropped the connection: the next one opens a new one
    store.keepalive()
    assert store.live_brokers() == [me]
    assert store.renew(held, 30.0)
    # a restart between two calls: its first call may fail (the old connection is
    # dead, and a write must not be retried blindly), the next works
    postmaster.stop()
    postmaster.start()
    with suppress(MetadataUnavailableError):
        store.live_brokers()
    assert store.live_brokers() == [me]
    store.release(held)
    store.unregister()


def test_brokers_starting_together_all_create_the_tables(
    stores: Callable[..., PostgresMetadataStore],
) -> None:
    n = 8
    for round_ in range(4):
        schema = f"race_{round_}"
        barrier = Barrier(n)

        def start(_: int, schema: str = schema, barrier: Barrier = barrier) -> object:
            barrier.wait()
            return stores(schema, 10.0)

        with ThreadPoolExecutor(n) as pool:
            started = list(pool.map(start, range(n)))
        assert len(started) == n
        a, b = started[0], started[-1]
        assert a.claim(T, PartitionId(0), 1, None) == Ownership(1, 1)
        assert b.owners() == {(T, PartitionId(0)): Ownership(1, 1)}


def test_an_existing_schema_needs_no_create_privilege(
    stores: Callable[..., PostgresMetadataStore], postmaster: Postmaster
) -> None:
    server = postmaster.server
    stores("shared")  # created by the database owner
    with postmaster.superuser() as admin:
        admin.execute("CREATE ROLE app LOGIN PASSWORD 'app-secret'")
        admin.execute("GRANT USAGE ON SCHEMA shared TO app")
        admin.execute("GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA shared TO app")
    app = f"postgresql://app:app-secret@{server.host}:{server.port}/{server.database}"
    store = PostgresMetadataStore(app, "shared", TIMEOUT_S)
    try:
        assert store.acquire("table:orders", 1, 5.0) is not None
    finally:
        store.close()
    with pytest.raises(MetadataUnavailableError) as caught:
        PostgresMetadataStore(app, "elsewhere", TIMEOUT_S)
    assert "permission denied" in str(caught.value)
    assert_one_line(str(caught.value), server)


def test_refusals_are_one_line_and_hide_the_password(server: PostgresServer) -> None:
    wrong = f"postgresql://{server.user}:not-{server.password}@{server.host}:{server.port}/x"
    with pytest.raises(MetadataUnavailableError) as caught:
        PostgresMetadataStore(wrong, timeout_s=TIMEOUT_S)
    message = str(caught.value)
    assert "password authentication failed" in message, message
    assert "\n" not in message and f"not-{server.password}" not in message
    with pytest.raises(ConfigError) as bad:
        PostgresMetadataStore("host=h pass word=hunter2")
    assert "hunter2" not in str(bad.value)
    with pytest.raises(ConfigError):
        PostgresMetadataStore(dsn(server), schema='x"; DROP TABLE y')
    with pytest.raises(ConfigError):
        PostgresMetadataStore(dsn(server), timeout_s=0)
