"""A metadata store that counts the requests a broker makes of it, by operation
(``floe_cluster_store_requests_total{operation}``): what each broker costs the store,
the measure behind the load model in docs/architecture.md ("What a cluster costs its
metadata store").

Each operation of :class:`~floe.cluster.interface.MetadataStore` is one request to the
store as the broker asks it: one etcd RPC (a range read, a transaction, a lease call)
or one PostgreSQL or SQLite transaction; the few that take more (a commit split above
etcd's operation limit, a refused claim read again) count once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from floe.cluster.interface import (
    BrokerInfo,
    Lease,
    LogCommit,
    ManifestCommit,
    MetadataStore,
    Ownership,
)
from floe.types import PartitionId, TopicName

Key = tuple[TopicName, PartitionId]


class CountingStore:
    """Wraps a :class:`MetadataStore` (which it owns: :meth:`close` closes it) and
    counts each call in :attr:`requests`. Called from the membership's thread only
    (:class:`~floe.cluster.session.Session`); read from the event loop at scrape time
    (a Counter's reads are safe against its one writer)."""

    def __init__(self, store: MetadataStore) -> None:
        self._store = store
        self.requests: Counter[str] = Counter()

    def register(self, broker: BrokerInfo, ttl_s: float) -> None:
        self.requests["register"] += 1
        self._store.register(broker, ttl_s)

    def keepalive(self) -> None:
        self.requests["keepalive"] += 1
        self._store.keepalive()

    def unregister(self) -> None:
        self.requests["unregister"] += 1
        self._store.unregister()

    def live_brokers(self) -> list[BrokerInfo]:
        self.requests["live_brokers"] += 1
        return self._store.live_brokers()

    def owners(self) -> dict[Key, Ownership]:
        self.requests["owners"] += 1
        return self._store.owners()

    def claim(
        self, topic: TopicName, partition: PartitionId, owner: int, expected: Ownership | None
    ) -> Ownership | None:
        self.requests["claim"] += 1
        return self._store.claim(topic, partition, owner, expected)

    def forget(self, topic: TopicName) -> None:
        self.requests["forget"] += 1
        self._store.forget(topic)

    def commit(self, owner: int, commits: Sequence[LogCommit]) -> list[LogCommit]:
        self.requests["commit"] += 1
        return self._store.commit(owner, commits)

    def committed(self) -> dict[Key, int]:
        self.requests["committed"] += 1
        return self._store.committed()

    def epoch_end(self, topic: TopicName, partition: PartitionId, epoch: int) -> int | None:
        self.requests["epoch_end"] += 1
        return self._store.epoch_end(topic, partition, epoch)

    def set_manifests(
        self, owner: int, manifests: Sequence[ManifestCommit]
    ) -> list[ManifestCommit]:
        self.requests["set_manifests"] += 1
        return self._store.set_manifests(owner, manifests)

    def manifests(self) -> dict[Key, str]:
        self.requests["manifests"] += 1
        return self._store.manifests()

    def assignments(self) -> dict[Key, int]:
        self.requests["assignments"] += 1
        return self._store.assignments()

    def assign(self, topic: TopicName, partition: PartitionId, broker: int) -> None:
        self.requests["assign"] += 1
        self._store.assign(topic, partition, broker)

    def report_load(self, broker: int, load: Mapping[Key, float]) -> None:
        self.requests["report_load"] += 1
        self._store.report_load(broker, load)

    def loads(self) -> dict[int, dict[Key, float]]:
        self.requests["loads"] += 1
        return self._store.loads()

    def acquire(self, name: str, holder: int, ttl_s: float) -> Lease | None:
        self.requests["acquire"] += 1
        return self._store.acquire(name, holder, ttl_s)

    def holder(self, name: str) -> Lease | None:
        self.requests["holder"] += 1
        return self._store.holder(name)

    def renew(self, lease: Lease, ttl_s: float) -> bool:
        self.requests["renew"] += 1
        return self._store.renew(lease, ttl_s)

    def release(self, lease: Lease) -> None:
        self.requests["release"] += 1
        self._store.release(lease)

    def close(self) -> None:
        self._store.close()
