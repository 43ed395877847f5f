"""The embedded metadata store: one SQLite file (single-node default, and the reference
implementation the contract tests hold the cluster backends to). Its clock is this
host's; several processes may share the file (``BEGIN IMMEDIATE`` serializes writers)."""

from __future__ import annotations

import secrets
import sqlite3
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from floe.cluster.interface import (
    BrokerIdTakenError,
    BrokerInfo,
    Lease,
    LeaseLostError,
    LogCommit,
    MetadataUnavailableError,
    Ownership,
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
CREATE TABLE IF NOT EXISTS loads (broker INTEGER PRIMARY KEY, report TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS leases (
    name TEXT PRIMARY KEY, holder INTEGER NOT NULL, epoch INTEGER NOT NULL,
    expires_at REAL NOT NULL);
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
        except sqlite3.Error as exc:
            raise MetadataUnavailableError(f"cannot open the metadata store {path}: {exc}") from exc
        self._me: tuple[int, str] | None = None
        self._ttl_s = 0.0

    def _write(self) -> sqlite3.Cursor:
        try:
            return self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise MetadataUnavailableError(f"metadata store busy: {exc}") from exc

    # -- brokers ---------------------------------------------------------------------

    def register(self, broker: BrokerInfo, ttl_s: float) -> None:
        now = time.time()
        token = secrets.token_hex(8)
        self._write()
        try:
            row = self._db.execute(
                "SELECT token, expires_at FROM brokers WHERE broker_id = ?", (broker.broker_id,)
            ).fetchone()
            mine = self._me is not None and self._me == (broker.broker_id, row[0] if row else "")
            if row is not None and row[1] > now and not mine:
                raise BrokerIdTakenError(f"broker id {broker.broker_id} is registered and alive")
            self._db.execute(
                "INSERT OR REPLACE INTO brokers VALUES (?, ?, ?, ?, ?, ?, ?)",
                (broker.broker_id, broker.host, broker.port, broker.rack, token, ttl_s,
                 now + ttl_s),
            )  # fmt: skip
            if not mine:  # a new run: its previous run's load report is not its own
                self._db.execute("DELETE FROM loads WHERE broker = ?", (broker.broker_id,))
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._me = (broker.broker_id, token)
        self._ttl_s = ttl_s

    def keepalive(self) -> None:
        if self._me is None:
            raise LeaseLostError("not registered")
        now = time.time()
        updated = self._db.execute(
            "UPDATE brokers SET expires_at = ? WHERE broker_id = ? AND token = ? "
            "AND expires_at > ?",
            (now + self._ttl_s, *self._me, now),
        ).rowcount
        if not updated:
            self._me = None
            raise LeaseLostError("the registration lease expired")

    def unregister(self) -> None:
        if self._me is not None:
            self._db.execute("DELETE FROM brokers WHERE broker_id = ? AND token = ?", self._me)
            self._me = None

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

    def forget(self, topic: TopicName) -> None:
        self._db.execute("DELETE FROM owners WHERE topic = ?", (topic,))
        self._db.execute("DELETE FROM committed WHERE topic = ?", (topic,))
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
        self._write()
        try:
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
                "INSERT OR REPLACE INTO leases VALUES (?, ?, ?, ?)",
                (name, holder, epoch, now + ttl_s),
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
        now = time.time()
        updated = self._db.execute(
            "UPDATE leases SET expires_at = ? WHERE name = ? AND holder = ? AND epoch = ? "
            "AND expires_at > ?",
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
