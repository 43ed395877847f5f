"""The partitions a broker is opening (a takeover's or a handover's restore from the
bucket), for the requests that wait for them.

The cluster names a partition's new owner as soon as it claims it, while its store still
restores the partition's tail (0.3-3.4 s under load). A produce request that arrives
meanwhile waits for the open (:mod:`floe.broker.produce`) instead of being refused
NOT_LEADER_OR_FOLLOWER, after which clients back off and ask for metadata again. The
requests must still be appended in the order they were read: an :class:`Opening` stays
listed until every request waiting on it has run, so that a request read after the open
but before an earlier one resumed waits behind it (they resume in the order they
started waiting). Owned by the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from floe.types import PartitionId, TopicName

Name = tuple[TopicName, int]


class Opening:
    """One partition being opened: :attr:`opened` is set once it is open (or its open
    failed); :attr:`waiters` counts the requests waiting on it that have not run."""

    def __init__(self) -> None:
        self.opened = asyncio.Event()
        self.waiters = 0


class Openings:
    """The partitions being opened, by name."""

    def __init__(self) -> None:
        self._opening: dict[Name, Opening] = {}

    def start(self, names: Iterable[Name]) -> None:
        for name in names:
            self._opening.setdefault(name, Opening())

    def get(self, topic: TopicName, partition: PartitionId) -> Opening | None:
        """The partition's opening, while it is opened or requests that waited for it
        have not run yet."""
        return self._opening.get((topic, int(partition)))

    def done(self, names: Iterable[Name]) -> None:
        """The partitions are open, or their open failed: their waiters run."""
        for name in names:
            opening = self._opening.get(name)
            if opening is not None:
                opening.opened.set()
                self._drop_if_idle(name, opening)

    def join(self, topic: TopicName, partition: PartitionId) -> Opening | None:
        """A request starts waiting on the partition's opening (None: not opening)."""
        opening = self.get(topic, partition)
        if opening is not None:
            opening.waiters += 1
        return opening

    def leave(self, topic: TopicName, partition: PartitionId) -> None:
        """A request that waited (:meth:`join`) ran."""
        name = (topic, int(partition))
        opening = self._opening.get(name)
        if opening is not None:
            opening.waiters -= 1
            self._drop_if_idle(name, opening)

    def _drop_if_idle(self, name: Name, opening: Opening) -> None:
        if opening.opened.is_set() and opening.waiters <= 0:
            del self._opening[name]
