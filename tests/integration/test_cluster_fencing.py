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
from floe.cluster.membership import STREAM_LEASE, WRITER_LEASE, Membership
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


def test_a_broker_waiting_for_the_writer_lease_rides_out_a_metadata_store_restart(
    tmp_path: Path,
) -> None:
    """A member waits for the writer lease while etcd restarts: it keeps waiting (it
    exited with "etcd at ...: connection reset by peer", found by the chaos suite) and
    takes the lease once the writer gives it up."""
    from floe.cluster.etcd import EtcdMetadataStore
    from helpers.cluster_etcd import etcd_server

    (tmp_path / "etcd").mkdir()
    with etcd_server(tmp_path / "etcd") as etcd:
        holder = EtcdMetadataStore(etcd.endpoint, timeout_s=2.0)
        holder.register(BrokerInfo(1, "127.0.0.1", 9001), SESSION_S)
        lease = holder.acquire(WRITER_LEASE, 1, SESSION_S)
        assert lease is not None
        waiting = Membership(
            EtcdMetadataStore(etcd.endpoint, timeout_s=2.0),
            BrokerInfo(2, "127.0.0.1", 9002),
            SESSION_S,
            "etcd",
            share=True,
        )
        got: list[object] = []
        thread = threading.Thread(target=lambda: got.append(_acquire(waiting)))
        thread.start()
        stop = threading.Event()

        def keep() -> None:  # the writer renews while it can
            while not stop.wait(SESSION_S / 4):
                try:
                    holder.keepalive()
                    holder.renew(lease, SESSION_S)
                except Exception:  # etcd is away: renewed again once it is back
                    pass

        keeper = threading.Thread(target=keep)
        keeper.start()
        time.sleep(1.0)
        etcd.stop()
        time.sleep(1.5)
        etcd.start()
        time.sleep(1.0)
        assert thread.is_alive(), f"stopped waiting: {got}"
        stop.set()
        keeper.join()
        holder.release(lease)
        thread.join(timeout=15)
        assert got and isinstance(got[0], int), got
        waiting.leave()
        holder.close()


def _acquire(membership: Membership) -> object:
    try:
        return membership.acquire()
    except Exception as exc:
        return exc
