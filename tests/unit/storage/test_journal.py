"""Journals: appended records replay in order, survive reopen and compaction."""

from __future__ import annotations

import asyncio

from localstore_helpers import NOW, StoreFactory

from floe.storage.journal import Journal
from floe.types import TopicName

J = TopicName("__state")


def test_append_replay_reopen(open_store: StoreFactory) -> None:
    store = open_store()
    journal = Journal(store, J)
    assert store.topic(J) is not None and store.topic(J).internal  # type: ignore[union-attr]
    assert list(journal.replay()) == []
    assert journal.append([(b"a", b"1"), (b"b", b"2")]) == 1
    assert journal.append([(b"a", None)]) == 2
    asyncio.run(journal.durable())
    assert [(r.offset, r.key, r.value) for r in journal.replay()] == [
        (0, b"a", b"1"),
        (1, b"b", b"2"),
        (2, b"a", None),
    ]
    store.close()
    again = Journal(open_store(), J)
    assert [(r.key, r.value) for r in again.replay()] == [(b"a", b"1"), (b"b", b"2"), (b"a", None)]


def test_replay_after_compaction_keeps_latest_per_key(open_store: StoreFactory) -> None:
    store = open_store(log_segment_bytes=200)
    journal = Journal(store, J, configs={"cleanup.policy": "compact", "segment.bytes": "200"})
    for i in range(30):
        journal.append([(b"k%d" % (i % 3), b"v%d" % i)])
    store.run_maintenance(NOW * 2)
    latest = {}
    for record in journal.replay():
        latest[record.key] = record.value
    assert latest == {b"k0": b"v27", b"k1": b"v28", b"k2": b"v29"}
    assert len(list(journal.replay())) < 30
