"""The PostgreSQL metadata store: its tables (``brokers``, ``owners``, ``committed``,
``epoch_ends``, ``manifests``, ``leases``, ...) in one schema of an existing database,
shared by every broker of the cluster.

Invariants:

* Times are the server's ``now()`` (the start of the one-statement transaction each
  change is), never the client's clock, so brokers with skewed clocks agree. A lock
  wait only makes that time earlier, which is the safe side: nobody takes over a lease
  before it has expired.
* Every change is one statement whose WHERE clause checks the state the caller expects
  (``UPDATE ... WHERE``, ``INSERT ... ON CONFLICT DO UPDATE ... WHERE``). PostgreSQL
  evaluates that clause again on the newest row version after waiting for a concurrent
  writer, so of racing clients exactly one wins, at READ COMMITTED and without retries.
  Three changes are a transaction instead: a commit and a setting of manifest pointers
  (the owners rows locked FOR SHARE, then the committed ends or the pointers), and a
  claim that ends an epoch (the owners row moved, then where the epoch ended read and
  recorded), so that a claim and either of the others never miss each other.
* A lease row is expired, never deleted: its epoch survives, so every new holder gets a
  larger one. Ownership rows are deleted only by :meth:`forget` (a deleted topic).
* Sessions: a named lease the registered broker's store takes for it records the broker
  row's ``token`` in ``leases.session`` and takes the row's ``expires_at``. Every
  statement that moves a session's expiry (register again, keepalive, renew of one of
  its leases, unregister) writes the broker row and the session's live lease rows
  together (data-modifying ``WITH`` clauses: still one statement), and none extends a
  row that has expired; so a session's leases expire with its broker row, and a lease
  whose broker row expired or is gone has expired too (for ``holder``, ``acquire`` and
  ``renew`` alike). The lease rows keep their own ``expires_at`` rather than joining the
  broker row, so that every statement deciding about a lease locks that lease's row and
  the WHERE-clause invariant above holds for them. A row without a session is a lease of
  its own. The token is the store object's, so a store that registers again after its
  registration lapsed has the same token: its old session's rows stay expired all the
  same (nothing extends an expired row), and it takes its leases again at new epochs.
* Upgrades: ``leases.session`` is added to a schema made before sessions (``ALTER TABLE
  ... ADD COLUMN IF NOT EXISTS``; once, by the tables' owner), and a table missing from
  an older schema (``epoch_ends``, ``manifests``) is created. A schema that has every
  column needs no DDL privilege at all.
* Every call is bounded: ``statement_timeout`` on the server, ``connect_timeout`` on
  connecting, and a client-side deadline (:class:`_Deadline`) for a server that accepts
  bytes but never answers. A call that has to reconnect may take up to twice
  ``timeout_s``. After any error the connection is dropped and the next call opens a
  new one; the error itself is :class:`MetadataUnavailableError` (a write that timed
  out may or may not have been applied: read before deciding again).

psycopg is imported when a store is made: importing this module costs nothing.
"""

from __future__ import annotations

import math
import os
import re
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Final, LiteralString, TypeVar

from floe.cluster.interface import (
    EPOCH_ENDS_KEPT,
    BrokerIdTakenError,
    BrokerInfo,
    Lease,
    LeaseLostError,
    LogCommit,
    ManifestCommit,
    MetadataUnavailableError,
    Ownership,
    RegistrationLapsedError,
    decode_load,
    encode_load,
)
from floe.errors import ConfigError
from floe.types import PartitionId, TopicName

if TYPE_CHECKING:
    import psycopg

    Connection = psycopg.Connection[tuple[Any, ...]]
    Cursor = psycopg.Cursor[tuple[Any, ...]]

R = TypeVar("R")

_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_DDL_LOCK = 0x666C_6F65_6D65_7461
"""The advisory lock key ("floemeta") that serializes table creation in a database:
concurrent ``CREATE ... IF NOT EXISTS`` can otherwise fail on a catalog unique index."""

_TABLES = """
CREATE TABLE IF NOT EXISTS brokers (
    broker_id integer PRIMARY KEY, host text NOT NULL, port integer NOT NULL, rack text,
    token text NOT NULL, ttl interval NOT NULL, expires_at timestamptz NOT NULL);
CREATE TABLE IF NOT EXISTS owners (
    topic text NOT NULL, partition integer NOT NULL, owner integer NOT NULL,
    epoch bigint NOT NULL, PRIMARY KEY (topic, partition));
CREATE TABLE IF NOT EXISTS assignments (
    topic text NOT NULL, partition integer NOT NULL, broker integer NOT NULL,
    PRIMARY KEY (topic, partition));
CREATE TABLE IF NOT EXISTS committed (
    topic text NOT NULL, partition integer NOT NULL, end_offset bigint NOT NULL,
    PRIMARY KEY (topic, partition));
CREATE TABLE IF NOT EXISTS epoch_ends (
    topic text NOT NULL, partition integer NOT NULL, epoch bigint NOT NULL,
    end_offset bigint NOT NULL, PRIMARY KEY (topic, partition, epoch));
CREATE TABLE IF NOT EXISTS manifests (
    topic text NOT NULL, partition integer NOT NULL, key text NOT NULL,
    PRIMARY KEY (topic, partition));
CREATE TABLE IF NOT EXISTS loads (broker integer PRIMARY KEY, report text NOT NULL);
CREATE TABLE IF NOT EXISTS leases (
    name text PRIMARY KEY, holder integer NOT NULL, epoch bigint NOT NULL,
    expires_at timestamptz NOT NULL);
ALTER TABLE leases ADD COLUMN IF NOT EXISTS session text;
"""
_COLUMNS = (("brokers", "token"), ("owners", "epoch"), ("committed", "end_offset"),
            ("epoch_ends", "end_offset"), ("manifests", "key"),
            ("leases", "session"))  # fmt: skip
"""A column each table must have (``leases.session`` came with sessions, ``epoch_ends``
after them, ``manifests`` after that): when all are there the schema is complete, with
nothing to create (no DDL privilege needed)."""

_SESSION_LEASES: Final = (
    "session_leases AS (UPDATE leases l SET expires_at = r.expires_at FROM registration r "
    "WHERE l.session = r.token AND l.holder = r.broker_id AND l.expires_at > now()) "
)
"""The clause that gives a session's live lease rows the expiry of its broker row, as
renewed by the statement's ``registration`` clause (``broker_id, token, expires_at``)."""

_ACQUIRED: Final = (
    "ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, "
    "epoch = CASE WHEN l.expires_at > now() THEN l.epoch ELSE l.epoch + 1 END, "
    "expires_at = excluded.expires_at, session = excluded.session "
    "WHERE l.holder = excluded.holder OR l.expires_at <= now() RETURNING epoch"
)
"""How acquire takes a lease row: its live holder renews it (same epoch); anyone takes it
once it has expired (a new epoch, also for the same holder: it may have acted on the
lapse); the new values say whose session it is in, if any."""


class PostgresMetadataStore:
    """See the module docstring and :class:`~floe.cluster.interface.MetadataStore`.

    Owns one connection (autocommit; opened at construction, reopened on the call after
    a failure) and one watchdog thread; both belong to the thread that uses the store
    (one at a time) and end with :meth:`close`. The tables live in ``schema`` (a plain
    lowercase identifier), reached through the session's ``search_path``.
    """

    def __init__(self, dsn: str, schema: str = "floe", timeout_s: float = 10.0) -> None:
        """Connect and create the schema and tables if absent (``CREATE`` privileges
        are needed only then).

        Raises:
            ConfigError: psycopg is not installed, ``dsn`` is not a libpq connection
                string or URI, ``schema`` is not a plain lowercase identifier, or
                ``timeout_s`` is not positive.
            MetadataUnavailableError: the server cannot be reached or refused us.
        """
        try:
            import psycopg
            from psycopg.conninfo import conninfo_to_dict
        except ImportError:
            raise ConfigError(
                "the PostgreSQL metadata store needs psycopg: pip install 'floe[cluster]'"
            ) from None
        if not timeout_s > 0:
            raise ConfigError(f"metadata store timeout {timeout_s} s is not positive")
        if not _SCHEMA_NAME.fullmatch(schema):
            raise ConfigError(f"metadata store schema {schema!r} is not a lowercase identifier")
        try:
            params = conninfo_to_dict(dsn)
        except psycopg.ProgrammingError:
            # libpq's message quotes the text it choked on, which may be the password
            raise ConfigError(
                "the metadata store DSN is not a libpq connection string or URI"
            ) from None
        self._dsn = dsn
        self._schema = schema
        self._timeout_s = timeout_s
        self._where = f"{params.get('host') or 'localhost'}:{params.get('port') or 5432}"
        self._password = str(params.get("password") or "")
        ms = max(1, math.ceil(timeout_s * 1000))
        self._connect_args: dict[str, Any] = {
            "autocommit": True,
            "connect_timeout": max(2, math.ceil(timeout_s)),  # libpq: whole seconds, >= 2
            "options": f"{params.get('options') or ''} -c search_path={schema}"
            f" -c statement_timeout={ms} -c idle_in_transaction_session_timeout={ms}".strip(),
            "application_name": params.get("application_name") or "floe-cluster",
        }
        self._error: type[psycopg.Error] = psycopg.Error
        self._conn: Connection | None = None
        self._deadline = _Deadline(timeout_s)
        # a token per store, not per registration: a register whose answer was lost
        # (applied or not) can be retried without finding its own row in the way
        self._token = secrets.token_hex(8)
        self._broker_id: int | None = None  # registered as, until the lease is lost
        # registered as, until unregister (also once its registration lapsed): the named
        # leases this store takes for it are in its session
        self._registered_as: int | None = None
        try:
            self._call(self._create_tables)
        except BaseException:
            self.close()
            raise

    # -- brokers ---------------------------------------------------------------------

    def register(self, broker: BrokerInfo, ttl_s: float) -> None:
        ttl = timedelta(seconds=ttl_s)
        # registering again while registered (a new address) renews the session too
        row = self._execute(
            "WITH registration AS ("
            "INSERT INTO brokers AS b (broker_id, host, port, rack, token, ttl, expires_at) "
            "VALUES (%s, %s, %s, %s, %s, %s, now() + %s) "
            "ON CONFLICT (broker_id) DO UPDATE SET host = excluded.host, "
            "port = excluded.port, rack = excluded.rack, token = excluded.token, "
            "ttl = excluded.ttl, expires_at = excluded.expires_at "
            "WHERE b.expires_at <= now() OR b.token = excluded.token "
            "RETURNING broker_id, token, expires_at), "
            + _SESSION_LEASES
            + "SELECT broker_id FROM registration",
            (broker.broker_id, broker.host, broker.port, broker.rack, self._token, ttl, ttl),
        ).fetchone()
        if row is None:
            raise BrokerIdTakenError(f"broker id {broker.broker_id} is registered and alive")
        if self._broker_id is None:  # a new run: its previous run's load report is not its own
            self._execute("DELETE FROM loads WHERE broker = %s", (broker.broker_id,))
        self._broker_id = self._registered_as = broker.broker_id

    def keepalive(self) -> None:
        if self._broker_id is None:
            raise LeaseLostError("not registered")
        renewed = self._execute(
            "WITH registration AS (UPDATE brokers SET expires_at = now() + ttl "
            "WHERE broker_id = %s AND token = %s AND expires_at > now() "
            "RETURNING broker_id, token, expires_at), "
            + _SESSION_LEASES
            + "SELECT count(*) FROM registration",
            (self._broker_id, self._token),
        ).fetchone()
        if renewed is None or not renewed[0]:
            self._broker_id = None
            raise LeaseLostError("the registration lease expired")

    def unregister(self) -> None:
        if self._broker_id is not None:
            self._execute(
                "WITH gone AS (DELETE FROM brokers WHERE broker_id = %(id)s AND token = %(token)s) "
                "UPDATE leases SET expires_at = '-infinity' "
                "WHERE session = %(token)s AND holder = %(id)s AND expires_at > now()",
                {"id": self._broker_id, "token": self._token},
            )
            self._broker_id = None
        self._registered_as = None

    def live_brokers(self) -> list[BrokerInfo]:
        rows = self._execute(
            "SELECT broker_id, host, port, rack FROM brokers WHERE expires_at > now() "
            "ORDER BY broker_id"
        ).fetchall()
        return [BrokerInfo(*row) for row in rows]

    # -- partition ownership ---------------------------------------------------------

    def owners(self) -> dict[tuple[TopicName, PartitionId], Ownership]:
        rows = self._execute("SELECT topic, partition, owner, epoch FROM owners").fetchall()
        return {(TopicName(t), PartitionId(p)): Ownership(o, e) for t, p, o, e in rows}

    def claim(
        self,
        topic: TopicName,
        partition: PartitionId,
        owner: int,
        expected: Ownership | None,
    ) -> Ownership | None:
        if expected is not None:
            return self._call(lambda conn: self._take(conn, topic, partition, owner, expected))
        row = self._execute(
            "INSERT INTO owners (topic, partition, owner, epoch) VALUES (%s, %s, %s, 1) "
            "ON CONFLICT DO NOTHING RETURNING owner, epoch",
            (topic, partition, owner),
        ).fetchone()
        return None if row is None else Ownership(*row)

    @staticmethod
    def _take(
        conn: Connection,
        topic: TopicName,
        partition: PartitionId,
        owner: int,
        expected: Ownership,
    ) -> Ownership | None:
        """Move an ownership to ``owner`` and record where ``expected``'s epoch ended, in
        one transaction. The committed end is read after the owners row is locked by the
        move (a statement of its own, with a snapshot of its own): a commit at the old
        epoch that held the row (FOR SHARE) has ended by then and is seen, and none can
        follow (it would wait for this lock, then find the new epoch)."""
        with conn.transaction():
            row = conn.execute(
                "UPDATE owners SET owner = %s, epoch = epoch + 1 "
                "WHERE topic = %s AND partition = %s AND owner = %s AND epoch = %s "
                "RETURNING owner, epoch",
                (owner, topic, partition, expected.owner, expected.epoch),
            ).fetchone()
            if row is None:
                return None
            conn.execute(
                "INSERT INTO epoch_ends (topic, partition, epoch, end_offset) "
                "SELECT %s, %s, %s, COALESCE((SELECT end_offset FROM committed "
                "WHERE topic = %s AND partition = %s), 0) ON CONFLICT DO NOTHING",
                (topic, partition, expected.epoch, topic, partition),
            )
            conn.execute(
                "DELETE FROM epoch_ends WHERE topic = %s AND partition = %s AND epoch <= %s",
                (topic, partition, expected.epoch - EPOCH_ENDS_KEPT),
            )
        return Ownership(*row)

    def commit(self, owner: int, commits: Sequence[LogCommit]) -> list[LogCommit]:
        if not commits:
            return []

        def work(conn: Connection) -> list[LogCommit]:
            # the owners' rows are locked (FOR SHARE) until the end: a claim moving one
            # waits for this commit, or this commit sees the claim's new epoch
            with conn.transaction():
                rows = conn.execute(
                    "SELECT o.topic, o.partition, o.owner, o.epoch, c.end_offset "
                    "FROM owners o LEFT JOIN committed c "
                    "ON c.topic = o.topic AND c.partition = o.partition "
                    "WHERE (o.topic, o.partition) IN "
                    "(SELECT * FROM unnest(%s::text[], %s::integer[])) FOR SHARE OF o",
                    ([c.topic for c in commits], [int(c.partition) for c in commits]),
                ).fetchall()
                now = {(t, p): (o, e, end) for t, p, o, e, end in rows}
                refused = []
                for c in commits:
                    if now.get((c.topic, int(c.partition))) != (owner, c.epoch, c.expected):
                        refused.append(c)
                        continue
                    conn.execute(
                        "INSERT INTO committed VALUES (%s, %s, %s) ON CONFLICT "
                        "(topic, partition) DO UPDATE SET end_offset = excluded.end_offset",
                        (c.topic, c.partition, c.end),
                    )
                return refused

        return self._call(work)

    def committed(self) -> dict[tuple[TopicName, PartitionId], int]:
        rows = self._execute("SELECT topic, partition, end_offset FROM committed").fetchall()
        return {(TopicName(t), PartitionId(p)): e for t, p, e in rows}

    def epoch_end(self, topic: TopicName, partition: PartitionId, epoch: int) -> int | None:
        row = self._execute(
            "SELECT end_offset FROM epoch_ends WHERE topic = %s AND partition = %s AND epoch = %s",
            (topic, partition, epoch),
        ).fetchone()
        return None if row is None else int(row[0])

    def set_manifests(
        self, owner: int, manifests: Sequence[ManifestCommit]
    ) -> list[ManifestCommit]:
        if not manifests:
            return []

        def work(conn: Connection) -> list[ManifestCommit]:
            # the owners' rows are locked (FOR SHARE) until the end: a claim moving one
            # waits for these pointers, or they see the claim's new epoch
            with conn.transaction():
                rows = conn.execute(
                    "SELECT topic, partition, owner, epoch FROM owners "
                    "WHERE (topic, partition) IN "
                    "(SELECT * FROM unnest(%s::text[], %s::integer[])) FOR SHARE",
                    ([m.topic for m in manifests], [int(m.partition) for m in manifests]),
                ).fetchall()
                now = {(t, p): (o, e) for t, p, o, e in rows}
                refused = []
                for m in manifests:
                    if now.get((m.topic, int(m.partition))) != (owner, m.epoch):
                        refused.append(m)
                        continue
                    conn.execute(
                        "INSERT INTO manifests VALUES (%s, %s, %s) ON CONFLICT "
                        "(topic, partition) DO UPDATE SET key = excluded.key",
                        (m.topic, m.partition, m.key),
                    )
                return refused

        return self._call(work)

    def manifests(self) -> dict[tuple[TopicName, PartitionId], str]:
        rows = self._execute("SELECT topic, partition, key FROM manifests").fetchall()
        return {(TopicName(t), PartitionId(p)): k for t, p, k in rows}

    def forget(self, topic: TopicName) -> None:
        self._execute("DELETE FROM owners WHERE topic = %s", (topic,))
        self._execute("DELETE FROM epoch_ends WHERE topic = %s", (topic,))
        self._execute("DELETE FROM committed WHERE topic = %s", (topic,))
        self._execute("DELETE FROM manifests WHERE topic = %s", (topic,))
        self._execute("DELETE FROM assignments WHERE topic = %s", (topic,))

    def assignments(self) -> dict[tuple[TopicName, PartitionId], int]:
        rows = self._execute("SELECT topic, partition, broker FROM assignments").fetchall()
        return {(TopicName(t), PartitionId(p)): b for t, p, b in rows}

    def assign(self, topic: TopicName, partition: PartitionId, broker: int) -> None:
        self._execute(
            "INSERT INTO assignments VALUES (%s, %s, %s) "
            "ON CONFLICT (topic, partition) DO UPDATE SET broker = excluded.broker",
            (topic, partition, broker),
        )

    def report_load(self, broker: int, load: Mapping[tuple[TopicName, PartitionId], float]) -> None:
        self._execute(
            "INSERT INTO loads VALUES (%s, %s) "
            "ON CONFLICT (broker) DO UPDATE SET report = excluded.report",
            (broker, encode_load(load)),
        )

    def loads(self) -> dict[int, dict[tuple[TopicName, PartitionId], float]]:
        rows = self._execute("SELECT broker, report FROM loads").fetchall()
        return {b: decode_load(report) for b, report in rows}

    # -- named leases ----------------------------------------------------------------

    def acquire(self, name: str, holder: int, ttl_s: float) -> Lease | None:
        if holder != self._registered_as:  # a lease of its own
            row = self._execute(
                "INSERT INTO leases AS l (name, holder, epoch, expires_at, session) "
                "VALUES (%s, %s, 1, now() + %s, NULL) " + _ACQUIRED,
                (name, holder, timedelta(seconds=ttl_s)),
            ).fetchone()
            return None if row is None else Lease(name, holder, row[0])
        # the registered broker's: into its session, with its broker row's expiry
        if self._broker_id is None:
            raise RegistrationLapsedError(f"broker {holder}'s registration lapsed")
        alive, epoch = self._execute(
            "WITH registration AS (SELECT token, expires_at FROM brokers "
            "WHERE broker_id = %(holder)s AND token = %(token)s AND expires_at > now()), "
            "taken AS (INSERT INTO leases AS l (name, holder, epoch, expires_at, session) "
            "SELECT %(name)s, %(holder)s, 1, expires_at, token FROM registration "
            + _ACQUIRED
            + ") SELECT EXISTS (SELECT FROM registration), (SELECT epoch FROM taken)",
            {"name": name, "holder": holder, "token": self._token},
        ).fetchone() or (False, None)
        if not alive:
            raise RegistrationLapsedError(f"broker {holder}'s registration lapsed")
        return None if epoch is None else Lease(name, holder, epoch)

    def holder(self, name: str) -> Lease | None:
        row = self._execute(
            "SELECT holder, epoch FROM leases WHERE name = %s AND expires_at > now()", (name,)
        ).fetchone()
        return None if row is None else Lease(name, row[0], row[1])

    def renew(self, lease: Lease, ttl_s: float) -> bool:
        # a session's lease renews its session (broker row and every lease of it); a
        # lease of its own is renewed alone
        row = self._execute(
            "WITH held AS (SELECT session FROM leases WHERE name = %(name)s "
            "AND holder = %(holder)s AND epoch = %(epoch)s AND expires_at > now()), "
            "registration AS (UPDATE brokers SET expires_at = now() + ttl "
            "WHERE broker_id = %(holder)s AND token IN (SELECT session FROM held) "
            "AND expires_at > now() RETURNING broker_id, token, expires_at), "
            + _SESSION_LEASES
            + ", own AS (UPDATE leases SET expires_at = now() + %(ttl)s "
            "WHERE name = %(name)s AND holder = %(holder)s AND epoch = %(epoch)s "
            "AND session IS NULL AND expires_at > now() RETURNING 1) "
            "SELECT EXISTS (SELECT FROM registration) OR EXISTS (SELECT FROM own)",
            {"name": lease.name, "holder": lease.holder, "epoch": lease.epoch,
             "ttl": timedelta(seconds=ttl_s)},
        ).fetchone()  # fmt: skip
        return row is not None and bool(row[0])

    def release(self, lease: Lease) -> None:
        # expired whatever the clock says; the row (and its epoch) stays
        self._execute(
            "UPDATE leases SET expires_at = '-infinity' "
            "WHERE name = %s AND holder = %s AND epoch = %s",
            (lease.name, lease.holder, lease.epoch),
        )

    def close(self) -> None:
        self._deadline.stop()
        self._drop()

    # -- the connection --------------------------------------------------------------

    def _execute(
        self, query: LiteralString, params: Sequence[object] | Mapping[str, object] = ()
    ) -> Cursor:
        """One statement (its own transaction: autocommit); the cursor holds the whole
        result, so reading it does no I/O.

        Raises:
            MetadataUnavailableError: see :meth:`_call`.
        """
        return self._call(lambda conn: conn.execute(query, params))

    def _call(self, work: Callable[[Connection], R]) -> R:
        """Run ``work`` on the connection (opened first if needed) within the deadline.

        Raises:
            MetadataUnavailableError: any psycopg error, in one line; the connection is
                dropped and the next call reconnects.
        """
        conn = self._conn if self._conn is not None else self._open()
        try:
            with self._deadline.watch(conn.pgconn.socket):
                result = work(conn)
        except self._error as exc:
            self._drop()
            if self._deadline.expired:
                raise self._unavailable(f"no answer within {self._timeout_s:g} s") from exc
            raise self._unavailable(str(exc)) from exc
        if self._deadline.expired:  # it fired as the answer came in: the socket is shut
            self._drop()
        return result

    def _open(self) -> Connection:
        import psycopg

        try:
            self._conn = psycopg.connect(self._dsn, **self._connect_args)
        except psycopg.Error as exc:
            raise self._unavailable(str(exc)) from exc
        return self._conn

    def _unavailable(self, reason: str) -> MetadataUnavailableError:
        """One line: libpq spreads hints and multi-host failures over several; the
        password is masked should it ever appear."""
        lines = [line.strip() for line in reason.splitlines() if line.strip()] or ["?"]
        text = " ".join(lines) if lines[0].endswith(":") else lines[0]
        if self._password:
            text = text.replace(self._password, "***")
        return MetadataUnavailableError(
            f"PostgreSQL metadata store {self._where} unavailable: {text}"
        )

    def _create_tables(self, conn: Connection) -> None:
        from psycopg import sql

        present = conn.execute(
            "SELECT count(*) FROM information_schema.columns WHERE table_schema = %s "
            "AND (table_name, column_name) IN (SELECT * FROM unnest(%s::text[], %s::text[]))",
            (self._schema, [t for t, _ in _COLUMNS], [c for _, c in _COLUMNS]),
        ).fetchone()
        if present is not None and present[0] == len(_COLUMNS):
            return  # nothing to create: no CREATE privilege needed
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_DDL_LOCK,))
            conn.execute(
                sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self._schema))
            )
            conn.execute(_TABLES)

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()  # never raises, even on a broken connection


class _Deadline:
    """A client-side bound on each call: a frozen server (or a peer whose kernel still
    acknowledges our bytes) never answers, and neither ``statement_timeout`` nor TCP
    keepalives end the wait. A daemon thread shuts the connection's socket down when a
    watched call overruns ``timeout_s``; the blocked call then fails as a lost
    connection, and :attr:`expired` tells why. Arming does not wake the thread (that
    cost a GIL hand-off per call): it looks every ``timeout_s / 2``, so it always sees a
    deadline before it passes, then sleeps until that deadline exactly.

    Owned by one store: :meth:`watch` is called from its thread, the watchdog thread
    only reads the armed (deadline, socket) under the condition's lock and never
    touches a socket once the watch has ended (so never a closed, reused descriptor).
    :meth:`stop` ends the thread.
    """

    def __init__(self, timeout_s: float) -> None:
        self._timeout_s = timeout_s
        self._cond = threading.Condition()
        self._armed: tuple[float, int] | None = None  # (monotonic deadline, socket fd)
        self._stopped = False
        self.expired = False
        """Whether the last watched call ran out of time."""
        self._thread = threading.Thread(target=self._run, name="floe-pg-deadline", daemon=True)
        self._thread.start()

    @contextmanager
    def watch(self, fd: int) -> Iterator[None]:
        with self._cond:
            self.expired = False
            self._armed = (time.monotonic() + self._timeout_s, fd)
        try:
            yield
        finally:
            with self._cond:
                self._armed = None

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        self._thread.join()

    def _run(self) -> None:
        with self._cond:
            while not self._stopped:
                if self._armed is None:
                    self._cond.wait(self._timeout_s / 2)
                    continue
                deadline, fd = self._armed
                left = deadline - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue
                self._armed = None
                self.expired = True
                try:
                    with socket.socket(fileno=os.dup(fd)) as sock:
                        sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass  # already closed
