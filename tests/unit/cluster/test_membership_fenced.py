"""A writer fenced out of its cluster (its session lapsed, another broker took the writer
lease) never names itself as the writer once it knows: when it tells the broker to stop
(``on_fenced``) its view already names the new writer, so that a client asking it
FindCoordinator or Metadata in that moment is sent to the new writer, not back to the
fenced one (a CI failure of test_cluster_membership's frozen writer under load: the view
was refreshed only after the fence). A real SQLite metadata store shared by two brokers;
the first one's session is ended in the store itself, as its expiry would."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from floe.cluster.interface import BrokerInfo
from floe.cluster.membership import WRITER_LEASE, Membership
from floe.cluster.sqlite import SqliteMetadataStore

TTL_S = 3.0


def test_a_fenced_writers_view_names_the_new_writer_when_it_is_told(tmp_path: Path) -> None:
    db = tmp_path / "cluster.db"
    old = Membership(SqliteMetadataStore(db), BrokerInfo(1, "127.0.0.1", 9001), TTL_S, "db")
    seen: list[int | None] = []
    told = threading.Event()

    def on_fenced() -> None:
        seen.append(old.view.controller)
        told.set()

    old.on_fenced = on_fenced
    other = SqliteMetadataStore(db)
    try:
        old.acquire()
        assert old.view.controller == 1
        with sqlite3.connect(db) as conn:  # broker 1's session expires (a long pause)
            conn.execute("UPDATE brokers SET expires_at = 0 WHERE broker_id = 1")
            conn.execute("UPDATE leases SET expires_at = 0 WHERE holder = 1")
        other.register(BrokerInfo(2, "127.0.0.1", 9002), TTL_S)
        assert other.acquire(WRITER_LEASE, 2, TTL_S) is not None
        assert told.wait(TTL_S * 3), "the old writer was not fenced"
        assert old.fenced is not None
        assert seen == [2]
    finally:
        old.leave()
        other.unregister()
        other.close()
