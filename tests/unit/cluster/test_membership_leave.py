"""A broker that leaves while its store thread is still busy (a slow store, a slow
``on_fenced``) gives the store up cleanly: the thread touches the store no more once
``leave()`` began, so it never calls a store that ``leave()`` closed. A CI run failed
with ``sqlite3.ProgrammingError: Cannot operate on a closed database`` in the thread
(test_member_fenced_waiting under load): the thread ran a job that fenced, and then a
renewal, after ``leave()`` had given up waiting for it and closed the store. A real
SQLite metadata store shared by two brokers; the member's partition is taken over in
the store itself, so that its next commit is refused and fences it."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from floe.cluster.interface import BrokerInfo
from floe.cluster.membership import Membership
from floe.cluster.sqlite import SqliteMetadataStore
from floe.types import PartitionId, TopicName

TTL_S = 1.0
KEY = (TopicName("t"), PartitionId(0))


def test_leaving_while_the_store_thread_is_busy_never_calls_a_closed_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "cluster.db"
    failures: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: failures.append(args.exc_value))
    member = Membership(
        SqliteMetadataStore(db), BrokerInfo(2, "127.0.0.1", 9002), TTL_S, "db", share=True
    )
    told = threading.Event()

    def on_fenced() -> None:  # busy for longer than leave() waits for the thread
        told.set()
        time.sleep(TTL_S * 2)

    member.on_fenced = on_fenced
    writer = SqliteMetadataStore(db)
    others = set(threading.enumerate())
    try:
        member.join()
        assert member.claim([KEY]) == [KEY]
        writer.register(BrokerInfo(1, "127.0.0.1", 9001), TTL_S)
        assert writer.claim(KEY[0], KEY[1], 1, writer.owners()[KEY]) is not None
        committing: Any = member.commit({KEY: (0, 10)})  # refused: it fences the member
        assert told.wait(TTL_S * 3), "the member was not fenced"
        (thread,) = [t for t in set(threading.enumerate()) - others if t.name == "floe-cluster"]
        member.leave()
        assert committing.result(TTL_S * 4) == {KEY: 0}
        thread.join(TTL_S * 4)
        assert not thread.is_alive()
        assert failures == []
    finally:
        writer.unregister()
        writer.close()
