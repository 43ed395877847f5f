"""A member fenced while it waits for the writer lease leaves and rejoins; it does not
exit. The membership records the fence first, then gives up its registration and
refreshes its view (calls to the store), and tells the broker last (``on_fenced``):
the wait for the lease, which polls, may end in that gap with "this broker was
fenced". The chaos suite saw the broker exit then (a member cut from etcd past its
session). A real SQLite metadata store shared by two brokers; the member's session is
ended in the store itself, as its expiry would, and the writer takes its partition."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

from floe.cluster.interface import BrokerInfo
from floe.cluster.membership import WRITER_LEASE, Membership
from floe.cluster.sqlite import SqliteMetadataStore
from floe.types import PartitionId, TopicName
from floe.waiting import wait_for_writer_lease

TTL_S = 3.0
KEY = (TopicName("t"), PartitionId(0))


async def _wait_fenced(db: Path) -> tuple[bool, Membership]:
    loop = asyncio.get_running_loop()
    stop, fenced = asyncio.Event(), asyncio.Event()
    member = Membership(
        SqliteMetadataStore(db), BrokerInfo(2, "127.0.0.1", 9002), TTL_S, "db", share=True
    )

    def on_fenced() -> None:  # a store slow to answer the fenced broker's last calls
        time.sleep(TTL_S)
        loop.call_soon_threadsafe(fenced.set)

    member.on_fenced = on_fenced
    member.join()
    assert member.claim([KEY]) == [KEY]
    writer = SqliteMetadataStore(db)
    writer.register(BrokerInfo(1, "127.0.0.1", 9001), TTL_S)
    assert writer.acquire(WRITER_LEASE, 1, TTL_S) is not None
    waiting = asyncio.ensure_future(wait_for_writer_lease(member, stop, fenced))
    await asyncio.sleep(member.interval_s)
    with sqlite3.connect(db) as conn:  # the member's session expires (a network cut)
        conn.execute("UPDATE brokers SET expires_at = 0 WHERE broker_id = 2")
        conn.execute("UPDATE leases SET expires_at = 0 WHERE holder = 2")
    current = writer.owners()[KEY]
    assert writer.claim(KEY[0], KEY[1], 1, current) is not None  # the writer takes it over
    try:
        return await asyncio.wait_for(waiting, TTL_S * 4), member
    finally:
        member.leave()
        writer.unregister()
        writer.close()


def test_a_member_fenced_while_waiting_for_the_writer_lease_stops_to_rejoin(
    tmp_path: Path,
) -> None:
    got, member = asyncio.run(_wait_fenced(tmp_path / "cluster.db"))
    assert member.fenced is not None and "t-0" in member.fenced
    assert got is False  # leave and rejoin, rather than raise (and exit)
