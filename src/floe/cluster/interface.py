"""The cluster metadata store every backend implements: etcd or PostgreSQL for a
cluster, SQLite for one embedded node. Never home-made consensus: liveness, ownership
and leases are what the store itself guarantees (etcd leases and transactions,
PostgreSQL row locks and its clock).

Three things live there:

* **Brokers**: each live broker is registered under a lease (its id, host, port); a
  broker that stops renewing it for ``ttl_s`` is gone, and its id is free again.
* **Ownership** of each partition: the broker that leads it and an ``epoch`` that grows
  with every change of owner. Changes are compare-and-set against the ownership the
  caller last saw, so two brokers can never both believe they took a partition; the
  epoch fences a former owner's writes (it goes into what it writes to the bucket).
* **Assignments**: where the writer wants each partition led; the owner hands a
  partition over (its ownership moves by compare-and-set) when it names another broker.
* **Committed log ends** (the commit point): per partition, the offset its log is
  committed up to. Records become part of a partition's log (acknowledged for acks=all,
  below the high watermark for every reader) only by :meth:`MetadataStore.commit`, which
  succeeds only while the committing broker owns the partition at the epoch it names
  and the committed end is still the one it last saw. A broker paused past its lease, a
  former owner's upload landing late: their commits are refused, so what they wrote to
  the bucket is never part of the log.
* **Manifest pointers**: per partition, the bucket key of its manifest (the object
  listing the partition's objects), set by :meth:`MetadataStore.set_manifests` only
  while the setting broker owns the partition at the epoch it names, so a broker that
  lost a partition can never point it elsewhere.
* **Loads**: each broker's last report of the bytes per second (in and out) of the
  partitions it leads, which the writer balances by.
* **Named leases** (the table-topic coordinator of a topic, the group and transaction
  coordinators): one holder at a time, with a fencing epoch that grows with every new
  holder.

**One session per broker.** A registered broker's registration and the named leases its
store object takes for it (``acquire`` with ``holder`` = the broker id it registered)
are one session: one etcd lease, one PostgreSQL broker row. They are renewed together
(``keepalive`` renews the leases, ``renew`` of one of them renews the registration and
the others) and lapse together, so a broker never holds the writer lease without being
registered, nor loses it a renewal before its registration. ``unregister`` ends them all
at once; ``release`` ends one lease and leaves the rest; ``register`` again while the
registration lives (a new address) keeps the session, and after it lapsed starts a new
one (the old one's leases lapsed with it). A holder that is not registered through the
store object (tools, tests, a broker taking a lease for another holder) gets a lease of
its own, of its own ``ttl_s``, as before. Epochs grow across all of it.

Times are the store's (etcd's lease clock, PostgreSQL's ``now()``), never the callers',
so brokers with skewed clocks agree. Every method blocks (network round trips): the
broker calls them from one worker thread, the owner of the store object; an object is
not thread-safe. Every method may raise :class:`MetadataUnavailableError` when the store
cannot be reached within ``timeout_s``; a write that raised it may or may not have been
applied, so the caller reads the state again (``owners()``, ``acquire``) before it
decides anything, instead of retrying blindly.

Lease TTLs are the store's too: etcd rounds them up to whole seconds (about 2 s at
least) and renews a lease for the TTL it was granted with, whatever ``ttl_s`` a renewal
passes; brokers use one TTL throughout.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from floe.errors import FloeError
from floe.types import PartitionId, TopicName


class MetadataUnavailableError(FloeError):
    """The metadata store did not answer (down, unreachable, timed out)."""


class BrokerIdTakenError(FloeError):
    """Another live broker is registered with this id."""


class LeaseLostError(FloeError):
    """This broker's registration lease expired (or was revoked): it is not a member
    any more and must stop acting for the cluster until it registers again."""


class RegistrationLapsedError(LeaseLostError, MetadataUnavailableError):
    """``acquire`` for the broker a store object registered, after that registration
    lapsed (no keepalive said so yet): nothing was taken. It is also a
    :class:`MetadataUnavailableError` so that callers which wait out an unavailable
    store (a standby asking for the writer lease) wait on; their next ``keepalive``
    raises :class:`LeaseLostError`, and they register again."""


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """A broker as clients reach it (what Metadata lists)."""

    broker_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class Ownership:
    """Who leads a partition; ``epoch`` starts at 1 and grows with every change of
    owner (a fencing token)."""

    owner: int
    epoch: int


@dataclass(frozen=True, slots=True)
class Lease:
    """A named lease held by ``holder`` with fencing ``epoch`` (starts at 1, grows with
    every new holder)."""

    name: str
    holder: int
    epoch: int


@dataclass(frozen=True, slots=True)
class LogCommit:
    """Make a partition's records up to ``end`` part of its log: applied only while the
    committing broker owns the partition at ``epoch`` and its committed end is still
    ``expected`` (None: nothing was committed yet)."""

    topic: TopicName
    partition: PartitionId
    epoch: int
    expected: int | None
    end: int


@dataclass(frozen=True, slots=True)
class ManifestCommit:
    """Point a partition at its manifest ``key`` (a bucket key): applied only while the
    committing broker owns the partition at ``epoch``."""

    topic: TopicName
    partition: PartitionId
    epoch: int
    key: str


EPOCH_ENDS_KEPT = 32
"""How many of a partition's last ended epochs :meth:`MetadataStore.epoch_end` answers
for (a claim drops older ones in its transaction)."""

COMMITS_PER_TXN = 64
"""Partitions per etcd transaction of a commit (two compares each: etcd refuses more
than ``--max-txn-ops``, 128 by default, in one transaction), and of a
:meth:`~MetadataStore.set_manifests` (one compare and one put each)."""


class MetadataStore(Protocol):
    """See the module docstring."""

    # -- brokers ---------------------------------------------------------------------

    def register(self, broker: BrokerInfo, ttl_s: float) -> None:
        """Register this broker under a new lease of ``ttl_s`` seconds: a new session.
        Registering again while this store's registration lives replaces its host and
        port and renews it, in the same session (its named leases go on).

        Raises:
            BrokerIdTakenError: another live broker holds ``broker.broker_id``.
        """
        ...

    def keepalive(self) -> None:
        """Renew this broker's session for another ``ttl_s``: its registration and the
        named leases it holds in it.

        Raises:
            LeaseLostError: it expired (or was never granted): register again.
        """
        ...

    def unregister(self) -> None:
        """Leave the cluster now (end the session): the others see it at once, and the
        session's named leases are free at once (``release`` of them after it is a
        harmless no-op)."""
        ...

    def live_brokers(self) -> list[BrokerInfo]:
        """Every broker whose lease is alive, by id."""
        ...

    # -- partition ownership ---------------------------------------------------------

    def owners(self) -> dict[tuple[TopicName, PartitionId], Ownership]:
        """The ownership of every partition that has one."""
        ...

    def claim(
        self,
        topic: TopicName,
        partition: PartitionId,
        owner: int,
        expected: Ownership | None,
    ) -> Ownership | None:
        """Make ``owner`` the owner of the partition if its ownership is still
        ``expected`` (None: it has none); returns the new ownership (epoch + 1, or 1),
        or None when it changed meanwhile (nothing written: read and decide again).
        The ended epoch's committed end is recorded with it (:meth:`epoch_end`)."""
        ...

    def forget(self, topic: TopicName) -> None:
        """Drop the ownership, assignment, committed end, epoch ends and manifest pointer
        of every partition of ``topic`` (a deleted topic)."""
        ...

    def commit(self, owner: int, commits: Sequence[LogCommit]) -> list[LogCommit]:
        """The commit point: apply every commit whose partition ``owner`` owns at the
        commit's epoch and whose committed end is the commit's ``expected``; return
        those refused (nothing written for them). Each partition is independent."""
        ...

    def committed(self) -> dict[tuple[TopicName, PartitionId], int]:
        """Every partition's committed end offset (partitions never committed are
        absent)."""
        ...

    def epoch_end(self, topic: TopicName, partition: PartitionId, epoch: int) -> int | None:
        """The committed end at which the partition's ownership ``epoch`` ended: its
        committed end when the next epoch was claimed (0: nothing committed), recorded
        by :meth:`claim` in the same transaction as the new ownership, as Kafka's leader
        epoch cache records where each leader epoch starts. None while ``epoch`` is the
        current one, or once it is too old to be kept (:data:`EPOCH_ENDS_KEPT`).

        A broker whose commit's answer was lost learns from it whether that commit was
        applied, after another broker took the partition over."""
        ...

    def set_manifests(
        self, owner: int, manifests: Sequence[ManifestCommit]
    ) -> list[ManifestCommit]:
        """Point partitions at their manifests: apply every one whose partition ``owner``
        owns at its ``epoch`` (the ownership is exactly ``(owner, epoch)``); return
        those refused (nothing written for them). Each partition is independent."""
        ...

    def manifests(self) -> dict[tuple[TopicName, PartitionId], str]:
        """Every partition's manifest key (partitions without one are absent)."""
        ...

    def assignments(self) -> dict[tuple[TopicName, PartitionId], int]:
        """Where the writer wants each partition led (its balancing): an owner hands a
        partition over when this names another live broker."""
        ...

    def assign(self, topic: TopicName, partition: PartitionId, broker: int) -> None:
        """Record that ``broker`` should lead the partition (replacing what was)."""
        ...

    def report_load(self, broker: int, load: Mapping[tuple[TopicName, PartitionId], float]) -> None:
        """Record ``broker``'s bytes per second (in and out) of each partition it leads,
        replacing its previous report."""
        ...

    def loads(self) -> dict[int, dict[tuple[TopicName, PartitionId], float]]:
        """Each broker's last load report (a dead broker's may linger: callers keep the
        live brokers' reports; a broker that registers anew has none until it reports)."""
        ...

    # -- named leases ----------------------------------------------------------------

    def acquire(self, name: str, holder: int, ttl_s: float) -> Lease | None:
        """Take lease ``name`` for ``holder`` when nobody holds it or its holder let it
        expire (a new epoch); when ``holder`` holds it already, renew it (same epoch).
        None: another holder has it.

        When ``holder`` is the broker this store object registered, the lease is taken
        into its session (``ttl_s`` unused: the session's TTL counts); otherwise it is a
        lease of its own for ``ttl_s``.

        Raises:
            RegistrationLapsedError: ``holder`` is this store's registered broker and its
                registration lapsed: register again.
        """
        ...

    def holder(self, name: str) -> Lease | None:
        """Who holds lease ``name`` now (None: nobody, or its holder let it expire)."""
        ...

    def renew(self, lease: Lease, ttl_s: float) -> bool:
        """Extend ``lease`` by ``ttl_s`` (a session's lease: renew its whole session,
        registration included); False when it is not ``lease`` any more (it expired,
        with its session or alone, and someone else, or a new epoch, took it)."""
        ...

    def release(self, lease: Lease) -> None:
        """Give ``lease`` up now, if it is still held as ``lease`` (a session's lease:
        that lease only; the registration and the other leases stay)."""
        ...

    def close(self) -> None:
        """Release the connection (not the registration: call unregister first)."""
        ...


def encode_load(load: Mapping[tuple[TopicName, PartitionId], float]) -> str:
    """A load report as the backends store it (JSON)."""
    return json.dumps([[topic, partition, rate] for (topic, partition), rate in load.items()])


def decode_load(text: str | bytes) -> dict[tuple[TopicName, PartitionId], float]:
    return {
        (TopicName(topic), PartitionId(partition)): float(rate)
        for topic, partition, rate in json.loads(text)
    }
