"""The embedded metadata store: one SQLite file (single-node default, and the reference
implementation the contract tests hold the cluster backends to). Its clock is this
host's; several processes may share the file (``BEGIN IMMEDIATE`` serializes writers).

Sessions: a named lease the registered broker's store takes for it records the
registration's ``token`` in ``leases.session`` and the registration's expiry. Every
change of a session's expiry (keepalive, renew of one of its leases, register again,
unregister) writes the broker row and the session's live lease rows in one transaction,
so they expire together; a lease row with no session has its own expiry. A file made
before sessions gains the column when a store opens it, and one made before manifest
pointers its ``manifests`` table (every table is created if absent).
"""

from __future__ import annotations

import secrets
import sqlite3
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

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
from floe.types import PartitionId, TopicName

_SCHEMA = """
CREATE TABLE IF NOT EXISTS brokers (
    broker_id INTEGER PRIMARY KEY, host TEXT NOT NULL, port INTEGER NOT NULL, rack TEXT,
    token TEXT NOT NULL, ttl_s REAL NOT NULL, expires_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS owners (
    topic TEXT NOT NULL, partition INTEGER NOT NULL, owner INTEGER NOT NULL,
    epoch INTEGER NOT NULL, PRIMARY KEY (topic, partition));
CREATE TABLE IF NOT EXISTS assignments (
    topic TEXT NOT NULL, partition INTEGER NOT NULL, broker INTEGER NOT NULL,
    PRIMARY KEY (topic, partition));
CREATE TABLE IF NOT EXISTS committed (
    topic TEXT NOT NULL, partition INTEGER NOT NULL, end_offset INTEGER NOT NULL,
    PRIMARY KEY (topic, partition));
CREATE TABLE IF NOT EXISTS epoch_ends (
    topic TEXT NOT NULL, partition INTEGER NOT NULL, epoch INTEGER NOT NULL,
    end_offset INTEGER NOT NULL, PRIMARY KEY (topic, partition, epoch));
CREATE TABLE IF NOT EXISTS manifests (
    topic TEXT NOT NULL, partition INTEGER NOT NULL, key TEXT NOT NULL,
    PRIMARY KEY (topic, partition));
CREATE TABLE IF NOT EXISTS loads (broker INTEGER PRIMARY KEY, report TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS leases (
    name TEXT PRIMARY KEY, holder INTEGER NOT NULL, epoch INTEGER NOT NULL,
    expires_at REAL NOT NULL, session TEXT);
"""


class SqliteMetadataStore:
    """See the module docstring and :class:`~floe.cluster.interface.MetadataStore`.
    Used by one thread at a time (its owner; not necessarily the one that opened it)."""

    def __init__(self, path: Path, timeout_s: float = 10.0) -> None:
        try:
            self._db = sqlite3.connect(
                path, timeout=timeout_s, isolation_level=None, check_same_thread=False
            )
            self._db.executescript(_SCHEMA)
            self._add_sessions()
        except sqlite3.Error as exc:
            raise MetadataUnavailableError(f"cannot open the metadata store {path}: {exc}") from exc
        self._me: tuple[int, str] | None = None  # (broker id, session token) registered
        # registered as, until unregister (also once its registration lapsed): the named
        # leases this store takes for it are in its session
        self._registered_as: int | None = None

    def _add_sessions(self) -> None:
        """Add ``leases.session`` to a file made before sessions (once, whoever opens
        it first: the check is repeated inside the write transaction)."""
        if self._has_sessions():
            return
        self._write()
        try:
            if not self._has_sessions():
                self._db.execute("ALTER TABLE leases ADD COLUMN session TEXT")
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise

    def _has_sessions(self) -> bool:
        return any(row[1] == "session" for row in self._db.execute("PRAGMA table_info(leases)"))

    def _write(self) -> sqlite3.Cursor:
        try:
            return self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise MetadataUnavailableError(f"metadata store busy: {exc}") from exc

    # -- brokers ---------------------------------------------------------------------

    def register(self, broker: BrokerInfo, ttl_s: float) -> None:
        now = time.time()
        self._write()
        try:
            row = self._db.execute(
                "SELECT token, expires_at FROM brokers WHERE broker_id = ?", (broker.broker_id,)
            ).fetchone()
            mine = self._me is not None and self._me == (broker.broker_id, row[0] if row else "")
            if row is not None and row[1] > now and not mine:
                raise BrokerIdTakenError(f"broker id {broker.broker_id} is registered and alive")
            # registering again while registered (a new address) keeps the session
            token = row[0] if mine and row[1] > now else secrets.token_hex(8)
            self._db.execute(
                "INSERT OR REPLACE INTO brokers VALUES (?, ?, ?, ?, ?, ?, ?)",
                (broker.broker_id, broker.host, broker.port, broker.rack, token, ttl_s,
                 now + ttl_s),
            )  # fmt: skip
            self._extend_leases(token, now, now + ttl_s)
            if not mine:  # a new run: its previous run's load report is not its own
                self._db.execute("DELETE FROM loads WHERE broker = ?", (broker.broker_id,))
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._me = (broker.broker_id, token)
        self._registered_as = broker.broker_id

    def keepalive(self) -> None:
        if self._me is None:
            raise LeaseLostError("not registered")
        if not self._extend_session(*self._me):
            self._me = None
            raise LeaseLostError("the registration lease expired")

    def unregister(self) -> None:
        if self._me is not None:
            self._write()
            try:
                broker_id, token = self._me
                self._db.execute(
                    "DELETE FROM brokers WHERE broker_id = ? AND token = ?", (broker_id, token)
                )
                self._db.execute("UPDATE leases SET expires_at = 0 WHERE session = ?", (token,))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._me = None
        self._registered_as = None

    def _extend_session(self, broker_id: int, token: str, lease: Lease | None = None) -> bool:
        """Renew session ``token`` of ``broker_id`` by its TTL: its broker row and its
        live lease rows, in one transaction; False (nothing written) when it expired, or
        when ``lease`` is given and is not held in it any more."""
        now = time.time()
        self._write()
        try:
            row = self._db.execute(
                "SELECT ttl_s FROM brokers WHERE broker_id = ? AND token = ? AND expires_at > ?",
                (broker_id, token, now),
            ).fetchone()
            held = (
                lease is None
                or self._db.execute(
                    "SELECT 1 FROM leases WHERE name = ? AND holder = ? AND epoch = ? "
                    "AND session = ? AND expires_at > ?",
                    (lease.name, lease.holder, lease.epoch, token, now),
                ).fetchone()
            )
            if row is None or not held:
                self._db.execute("ROLLBACK")
                return False
            self._db.execute(
                "UPDATE brokers SET expires_at = ? WHERE broker_id = ?", (now + row[0], broker_id)
            )
            self._extend_leases(token, now, now + row[0])
            self._db.execute("COMMIT")
        except BaseException:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            raise
        return True

    def _extend_leases(self, token: str, now: float, until: float) -> None:
        """Within a write transaction: session ``token``'s live leases expire ``until``."""
        self._db.execute(
            "UPDATE leases SET expires_at = ? WHERE session = ? AND expires_at > ?",
            (until, token, now),
        )

    def live_brokers(self) -> list[BrokerInfo]:
        rows = self._db.execute(
            "SELECT broker_id, host, port, rack FROM brokers WHERE expires_at > ? "
            "ORDER BY broker_id",
            (time.time(),),
        ).fetchall()
        return [BrokerInfo(*row) for row in rows]

    # -- partition ownership ---------------------------------------------------------

    def owners(self) -> dict[tuple[TopicName, PartitionId], Ownership]:
        rows = self._db.execute("SELECT topic, partition, owner, epoch FROM owners").fetchall()
        return {(TopicName(t), PartitionId(p)): Ownership(o, e) for t, p, o, e in rows}

    def claim(
        self,
        topic: TopicName,
        partition: PartitionId,
        owner: int,
        expected: Ownership | None,
    ) -> Ownership | None:
        self._write()
        try:
            row = self._db.execute(
                "SELECT owner, epoch FROM owners WHERE topic = ? AND partition = ?",
                (topic, partition),
            ).fetchone()
            current = Ownership(*row) if row is not None else None
            if current != expected:
                self._db.execute("ROLLBACK")
                return None
            claimed = Ownership(owner, 1 if current is None else current.epoch + 1)
            self._db.execute(
                "INSERT OR REPLACE INTO owners VALUES (?, ?, ?, ?)",
                (topic, partition, claimed.owner, claimed.epoch),
            )
            if current is not None:
                self._db.execute(
                    "INSERT OR REPLACE INTO epoch_ends SELECT ?, ?, ?, COALESCE("
                    "(SELECT end_offset FROM committed WHERE topic = ? AND partition = ?), 0)",
                    (topic, partition, current.epoch, topic, partition),
                )
                self._db.execute(
                    "DELETE FROM epoch_ends WHERE topic = ? AND partition = ? AND epoch <= ?",
                    (topic, partition, current.epoch - EPOCH_ENDS_KEPT),
                )
            self._db.execute("COMMIT")
        except BaseException:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            raise
        return claimed

    def commit(self, owner: int, commits: Sequence[LogCommit]) -> list[LogCommit]:
        refused: list[LogCommit] = []
        self._write()
        try:
            for c in commits:
                row = self._db.execute(
                    "SELECT o.owner, o.epoch, c.end_offset FROM owners o LEFT JOIN committed c "
                    "ON c.topic = o.topic AND c.partition = o.partition "
                    "WHERE o.topic = ? AND o.partition = ?",
                    (c.topic, c.partition),
                ).fetchone()
                if row is None or (row[0], row[1], row[2]) != (owner, c.epoch, c.expected):
                    refused.append(c)
                    continue
                self._db.execute(
                    "INSERT OR REPLACE INTO committed VALUES (?, ?, ?)",
                    (c.topic, c.partition, c.end),
                )
            self._db.execute("COMMIT")
        except BaseException:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            raise
        return refused

    def committed(self) -> dict[tuple[TopicName, PartitionId], int]:
        rows = self._db.execute("SELECT topic, partition, end_offset FROM committed").fetchall()
        return {(TopicName(t), PartitionId(p)): e for t, p, e in rows}

    def epoch_end(self, topic: TopicName, partition: PartitionId, epoch: int) -> int | None:
        row = self._db.execute(
            "SELECT end_offset FROM epoch_ends WHERE topic = ? AND partition = ? AND epoch = ?",
            (topic, partition, epoch),
        ).fetchone()
        return None if row is None else int(row[0])

    def set_manifests(
        self, owner: int, manifests: Sequence[ManifestCommit]
    ) -> list[ManifestCommit]:
        refused: list[ManifestCommit] = []
        self._write()
        try:
            for m in manifests:
                row = self._db.execute(
                    "SELECT owner, epoch FROM owners WHERE topic = ? AND partition = ?",
                    (m.topic, m.partition),
                ).fetchone()
                if row is None or (row[0], row[1]) != (owner, m.epoch):
                    refused.append(m)
                    continue
                self._db.execute(
                    "INSERT OR REPLACE INTO manifests VALUES (?, ?, ?)",
                    (m.topic, m.partition, m.key),
                )
            self._db.execute("COMMIT")
        except BaseException:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            raise
        return refused

    def manifests(self) -> dict[tuple[TopicName, PartitionId], str]:
        rows = self._db.execute("SELECT topic, partition, key FROM manifests").fetchall()
        return {(TopicName(t), PartitionId(p)): k for t, p, k in rows}

    def forget(self, topic: TopicName) -> None:
        self._db.execute("DELETE FROM owners WHERE topic = ?", (topic,))
        self._db.execute("DELETE FROM epoch_ends WHERE topic = ?", (topic,))
        self._db.execute("DELETE FROM committed WHERE topic = ?", (topic,))
        self._db.execute("DELETE FROM manifests WHERE topic = ?", (topic,))
        self._db.execute("DELETE FROM assignments WHERE topic = ?", (topic,))

    def assignments(self) -> dict[tuple[TopicName, PartitionId], int]:
        rows = self._db.execute("SELECT topic, partition, broker FROM assignments").fetchall()
        return {(TopicName(t), PartitionId(p)): b for t, p, b in rows}

    def assign(self, topic: TopicName, partition: PartitionId, broker: int) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO assignments VALUES (?, ?, ?)", (topic, partition, broker)
        )

    def report_load(self, broker: int, load: Mapping[tuple[TopicName, PartitionId], float]) -> None:
        self._db.execute("INSERT OR REPLACE INTO loads VALUES (?, ?)", (broker, encode_load(load)))

    def loads(self) -> dict[int, dict[tuple[TopicName, PartitionId], float]]:
        rows = self._db.execute("SELECT broker, report FROM loads").fetchall()
        return {b: decode_load(report) for b, report in rows}

    # -- named leases ----------------------------------------------------------------

    def acquire(self, name: str, holder: int, ttl_s: float) -> Lease | None:
        now = time.time()
        session = None  # the registered broker's lease goes into its session
        if holder == self._registered_as:
            if self._me is None:
                raise RegistrationLapsedError(f"broker {holder}'s registration lapsed")
            session = self._me[1]
        self._write()
        try:
            expires_at = now + ttl_s
            if session is not None:
                alive = self._db.execute(
                    "SELECT expires_at FROM brokers WHERE broker_id = ? AND token = ? "
                    "AND expires_at > ?",
                    (holder, session, now),
                ).fetchone()
                if alive is None:
                    raise RegistrationLapsedError(f"broker {holder}'s registration lapsed")
                expires_at = alive[0]
            row = self._db.execute(
                "SELECT holder, epoch, expires_at FROM leases WHERE name = ?", (name,)
            ).fetchone()
            if row is not None and row[2] > now and row[0] != holder:
                self._db.execute("ROLLBACK")
                return None
            if row is None:
                epoch = 1
            elif row[2] > now:
                epoch = row[1]  # its holder renews it
            else:
                epoch = row[1] + 1  # a new holder, or the same after it expired
            self._db.execute(
                "INSERT OR REPLACE INTO leases (name, holder, epoch, expires_at, session) "
                "VALUES (?, ?, ?, ?, ?)",
                (name, holder, epoch, expires_at, session),
            )
            self._db.execute("COMMIT")
        except BaseException:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            raise
        return Lease(name, holder, epoch)

    def holder(self, name: str) -> Lease | None:
        row = self._db.execute(
            "SELECT holder, epoch FROM leases WHERE name = ? AND expires_at > ?",
            (name, time.time()),
        ).fetchone()
        return None if row is None else Lease(name, row[0], row[1])

    def renew(self, lease: Lease, ttl_s: float) -> bool:
        row = self._db.execute(
            "SELECT session FROM leases WHERE name = ? AND holder = ? AND epoch = ?",
            (lease.name, lease.holder, lease.epoch),
        ).fetchone()
        if row is not None and row[0] is not None:  # a session's: renew the session
            return self._extend_session(lease.holder, row[0], lease)
        now = time.time()
        updated = self._db.execute(
            "UPDATE leases SET expires_at = ? WHERE name = ? AND holder = ? AND epoch = ? "
            "AND session IS NULL AND expires_at > ?",
            (now + ttl_s, lease.name, lease.holder, lease.epoch, now),
        ).rowcount
        return bool(updated)

    def release(self, lease: Lease) -> None:
        self._db.execute(
            "UPDATE leases SET expires_at = 0 WHERE name = ? AND holder = ? AND epoch = ?",
            (lease.name, lease.holder, lease.epoch),
        )

    def close(self) -> None:
        self._db.close()
