"""Fencing that does not depend on the fenced (real SQLite metadata store; each broker's
real :class:`Membership` in this process, the other broker a plain client of the store).

A member killed and restarted within a second takes its WAL stream lease again while
the writer waits for that lease to lapse, to fence the stream of what it took for a
dead broker. The wait must neither outlive the writer's own lease (the writer renews
on the thread that waits) nor go on once the member is back: a live broker's stream is
its own to write.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from floe.cluster.interface import BrokerInfo
from floe.cluster.membership import STREAM_LEASE, Membership
from floe.cluster.sqlite import SqliteMetadataStore

SESSION_S = 2.0


def test_a_writer_fencing_a_member_that_came_back_keeps_its_own_lease(tmp_path: Path) -> None:
    db = tmp_path / "cluster.db"
    writer = Membership(
        SqliteMetadataStore(db), BrokerInfo(1, "127.0.0.1", 9001), SESSION_S, "sqlite", share=True
    )
    writer.acquire()
    # broker 2 restarts: it holds its stream lease again (renewing it) and registers a
    # moment after the writer decided it was dead
    member = SqliteMetadataStore(db)
    stream = member.acquire(STREAM_LEASE.format(2), 2, SESSION_S)
    assert stream is not None
    stop = threading.Event()

    def restarted_member() -> None:
        time.sleep(0.3)
        member.register(BrokerInfo(2, "127.0.0.1", 9002), SESSION_S)
        while not stop.wait(SESSION_S / 4):
            member.keepalive()
            member.renew(stream, SESSION_S)

    thread = threading.Thread(target=restarted_member)
    thread.start()
    lowest = SESSION_S
    watching = True

    def watch() -> None:
        nonlocal lowest
        while watching:
            lowest = min(lowest, writer.valid_for_s())
            time.sleep(0.02)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        fenced = writer.fence_streams(["2"])
    finally:
        watching = False
        watcher.join()
        stop.set()
        thread.join()
        member.close()
    assert "2" not in fenced  # live again: its stream is its own
    assert writer.lease_losses == 0 and writer.fenced is None
    assert lowest > 0, "the writer's own lease ran out while it waited"
    writer.check()
    writer.leave()
