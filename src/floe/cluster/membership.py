"""This broker as a member of the cluster: the partitions it owns, on top of its session
in the metadata store (:mod:`floe.cluster.session`: the registration, the leases, the
renewal thread and the fence), and the takeover of dead brokers' WAL streams.

Each partition has one owner in the store, at an ownership epoch that every claim
raises; its records become part of its log only when its owner commits them at that
epoch (:meth:`Membership.commit`), so a former owner is refused and fenced. Every call
into the store still runs on the session's thread (or, before it starts, in the thread
that opens the broker): the event loop queues claims, releases and commits without
waiting, and a worker thread waits for those it needs the answer of.
:attr:`Membership.owned` is changed by that thread only.
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
from collections.abc import Callable, Collection, Iterable, Mapping

from floe.cluster.commits import commit_ends, final_ends
from floe.cluster.interface import (
    BrokerInfo,
    ManifestCommit,
    MetadataStore,
    MetadataUnavailableError,
    Ownership,
)
from floe.cluster.session import (
    LISTED_MARGIN_S,
    MARGIN_FRACTION,
    STREAM_LEASE,
    WRITER_LEASE,
    WRITER_POLL_S,
    ClusterView,
    Key,
    Session,
)
from floe.types import PartitionId, TopicName

# re-exported: callers import the session's names with Membership, from here
__all__ = [
    "LISTED_MARGIN_S",
    "MARGIN_FRACTION",
    "STREAM_LEASE",
    "WRITER_LEASE",
    "WRITER_POLL_S",
    "ClusterView",
    "Membership",
]

log = logging.getLogger(__name__)


class Membership(Session):
    """See the module docstring. Implements :class:`floe.storage.interface.WriteGuard`
    (the session answers :meth:`~floe.cluster.session.Session.check`, the lease and the
    fence; this class the partitions).

    Attributes:
        owned: the partitions this broker owns, with the epoch it claimed them at
            (changed on the store's thread only).
    """

    def __init__(
        self,
        store: MetadataStore,
        me: BrokerInfo,
        session_timeout_s: float,
        where: str,
        *,
        share: bool = False,
    ) -> None:
        super().__init__(store, me, session_timeout_s, where, share=share)
        self.owned: dict[Key, Ownership] = {}
        self.commits = 0
        """Commits run in the metadata store (:meth:`commit`)."""
        self.commit_seconds = 0.0
        """Time those commits took in the store, all together (on the store's thread: their
        transactions, and the reads after a refused one)."""
        self.writer_only: Callable[[TopicName], bool] = lambda _topic: False
        """Whether a topic's partitions are the writer's alone (internal and table topics:
        their coordinators run on the writer): a member never claims them (:meth:`claim`).
        Set by the broker, which knows the topics; called in the caller's thread."""
        self.refusing: Callable[[], frozenset[int]] = frozenset
        """The other live brokers whose Kafka port refuses connections
        (:class:`floe.cluster.reach.Reach`): Metadata names them leader of nothing. Set
        by the composition root; called on the event loop."""

    # -- WriteGuard --------------------------------------------------------------------

    def fence_streams(self, streams: Iterable[str]) -> dict[str, int]:
        future = self._submit(lambda: self._fence_streams(list(streams)))
        result: dict[str, int] = future.result()
        return result

    def _fence_streams(self, streams: list[str]) -> dict[str, int]:
        """When members share partitions, a live broker's stream is its own to write
        (it fenced its former runs' objects when it opened its store): it is left out.
        Another broker's stream lease is a broker's that died (or a former writer's):
        it lapses within one session timeout, is waited for, then taken for a moment
        (its epoch is the fence). A broker that registers again meanwhile (killed and
        restarted at once) is live: its stream is left to it. The wait runs on the
        thread that renews this broker's own leases, so it renews them as it goes.

        Raises:
            MetadataUnavailableError: a stream lease was still renewed after a session
                timeout by a broker that did not register.
        """
        own = str(self.me.broker_id)
        out: dict[str, int] = {}
        for stream in streams:
            if stream == own:
                out[stream] = self._held_stream().epoch
            elif not stream:  # the unnamed stream of older buckets: writer epochs
                out[stream] = self._held().epoch
            elif (epoch := self._take_dead_stream(stream)) is not None:
                out[stream] = epoch
        return out

    def _take_dead_stream(self, stream: str) -> int | None:
        """The epoch of stream lease ``stream`` taken for a moment once it lapsed; None
        when its broker is live (or registers again while this waits).

        Raises:
            MetadataUnavailableError: it was still renewed after a session timeout.
        """
        name = STREAM_LEASE.format(stream)
        deadline = time.monotonic() + self._ttl_s + 1.0
        renew_at = time.monotonic() + self._interval_s
        while True:
            live = self._sharing(b.broker_id for b in self._store.live_brokers())
            if stream in {str(b) for b in live}:
                return None
            lease = self._store.acquire(name, self.me.broker_id, self._ttl_s)
            if lease is not None:
                self._store.release(lease)
                return lease.epoch
            if time.monotonic() >= deadline:
                raise MetadataUnavailableError(f"lease {name} is still being renewed")
            if time.monotonic() >= renew_at:
                self._renew()
                renew_at = time.monotonic() + self._interval_s
            time.sleep(min(0.25, self._ttl_s / 4))

    def _sharing(self, live: Iterable[int]) -> set[int]:
        """The other live brokers that write their own stream and own partitions: every
        other live one when members share partitions, else none (standbys write nothing;
        the writer takes every partition and fences every other stream)."""
        return set(live) - {self.me.broker_id} if self.share else set()

    def owner(self, topic: TopicName, partition: PartitionId) -> int | None:
        ownership = self.view.owners.get((topic, partition))
        return None if ownership is None else ownership.owner

    def ownership(self, topic: TopicName, partition: PartitionId) -> tuple[int, int] | None:
        ownership = self.view.owners.get((topic, partition))
        return None if ownership is None else (ownership.owner, ownership.epoch)

    def adopt(self, partitions: Iterable[Key]) -> None:
        wanted = list(partitions)
        self._submit(lambda: self._claim(wanted))

    def claim(self, partitions: Iterable[Key]) -> list[Key]:
        """Own ``partitions`` now, at a new ownership epoch (blocking: call it from a
        worker thread); returns those this broker owns then (another live member's
        stay its own when members share partitions, and a member never claims the
        writer's: :attr:`writer_only`).

        Raises:
            MetadataUnavailableError: the store did not answer.
        """
        wanted = [k for k in partitions if self._writer is not None or not self.writer_only(k[0])]
        self._submit(lambda: self._claim(wanted)).result()
        return [k for k in wanted if k in self.owned]

    def assign(self, owners: Mapping[Key, int]) -> None:
        wanted = dict(owners)

        def record() -> None:
            current = self._store.owners()
            for (topic, partition), owner in wanted.items():
                if self._store.claim(topic, partition, owner, current.get((topic, partition))):
                    continue
                log.warning(
                    "cluster.assign_lost broker=%d partition=%s-%d owner=%d (its ownership "
                    "changed meanwhile)",
                    self.me.broker_id, topic, partition, owner,
                )  # fmt: skip
            self._refresh()

        self._submit(record)

    def assigned(self, topic: TopicName, partition: PartitionId) -> int | None:
        return self.view.assignments.get((topic, partition))

    def plan(self, moves: Mapping[Key, int]) -> concurrent.futures.Future[None]:
        """Assign each partition to its broker (the owners hand them over); done once
        the assignments are recorded and :attr:`view` shows them."""
        wanted = dict(moves)

        def record() -> None:
            for (topic, partition), broker in wanted.items():
                self._store.assign(topic, partition, broker)
            self._refresh()

        return self._submit(record)

    def report_load(self, load: Mapping[Key, float]) -> None:
        report = dict(load)
        self._submit(lambda: self._store.report_load(self.me.broker_id, report))

    def loads(self) -> tuple[dict[Key, float], set[int]]:
        def read() -> tuple[dict[Key, float], set[int]]:
            owners = self._store.owners()
            live = {b.broker_id for b in self._store.live_brokers()}
            reports = {b: report for b, report in self._store.loads().items() if b in live}
            rates = {
                key: rate
                for broker, report in reports.items()
                for key, rate in report.items()
                if (owner := owners.get(key)) is not None and owner.owner == broker
            }
            return rates, set(reports)

        found: tuple[dict[Key, float], set[int]] = self._submit(read).result()
        return found

    def hand_over(self, key: Key, to: int) -> bool:
        """Make ``to`` the owner of a partition this broker owns (blocking: call it from
        a worker thread, once the partition is released; or one the store says this
        broker owns that this run never claimed: a member gives the writer its
        partitions); False when this broker did not own it any more.

        Raises:
            MetadataUnavailableError: the store did not answer (the ownership may or may
                not have moved: the next renewal's check tells).
        """

        def move() -> bool:
            mine = self.owned.get(key) or self._store.owners().get(key)
            if mine is None or mine.owner != self.me.broker_id:
                return False
            won = self._store.claim(key[0], key[1], to, mine)
            if won is not None:
                self.owned.pop(key, None)
            self._refresh()
            return won is not None

        done: bool = self._submit(move).result()
        return done

    def forget(self, topic: TopicName) -> None:
        def drop() -> None:
            self._store.forget(topic)
            for key in [k for k in self.owned if k[0] == topic]:
                del self.owned[key]

        self._submit(drop)

    # -- the commit point --------------------------------------------------------------

    def epochs(self, partitions: Iterable[Key]) -> concurrent.futures.Future[dict[Key, int]]:
        """The ownership epoch of each of ``partitions`` this broker owns, read by the
        store's thread after every claim queued before (what a WAL object records for
        each partition it holds)."""
        wanted = list(partitions)
        return self._submit(lambda: {k: self.owned[k].epoch for k in wanted if k in self.owned})

    def commit(
        self, ends: Mapping[Key, tuple[int | None, int]]
    ) -> concurrent.futures.Future[dict[Key, int | None]]:
        """Commit each partition's records up to its new end, from the committed end
        this broker last saw (``{key: (expected, end)}``), at the epoch it owns the
        partition at (:meth:`MetadataStore.commit`). The future's result: for each
        partition committed, its new committed end; for each refused (this broker does
        not own it at that epoch any more: another broker took it over, and this one is
        fenced), where its epoch ended, or None when the store does not know: its
        records beyond that are not part of the log. Once fenced, nothing is committed:
        the result is what the log holds (:func:`~floe.cluster.commits.final_ends`).

        A commit whose answer was lost (the store went away) may have been applied: the
        next one, from the same expected end, finds the end moved by this broker's own
        commit (no one else can commit at this epoch) and goes on from there.
        """
        wanted = dict(ends)
        return self._submit(lambda: self._commit(wanted))

    def _commit(self, wanted: dict[Key, tuple[int | None, int]]) -> dict[Key, int | None]:
        if self.fenced is not None:  # nothing more is committed: what is, for the waiters
            mine = {k: self.owned[k].epoch for k in wanted if k in self.owned}
            ends = final_ends(self._store, self.me.broker_id, mine)
            return {k: ends.get(k) for k in wanted}
        started = time.monotonic()
        try:
            done, taken = commit_ends(self._store, self.me.broker_id, self.owned, wanted)
        finally:
            self.commits += 1
            self.commit_seconds += time.monotonic() - started
        for key in taken:
            log.error(
                "cluster.commit_refused broker=%d partition=%s-%d (another broker took it "
                "over: its records beyond the committed end are not part of the log)",
                self.me.broker_id, key[0], key[1],
            )  # fmt: skip
        if taken:
            self._fence(f"partition {taken[0][0]}-{taken[0][1]} was taken over (commit refused)")
        return done

    def committed(self) -> dict[Key, int]:
        """Every partition's committed end offset (blocking: a restore, once the
        partitions it restores are claimed, so that no former owner commits after).

        Raises:
            MetadataUnavailableError: the store did not answer.
        """
        ends: dict[Key, int] = self._submit(self._store.committed).result()
        return ends

    def epoch_ends(self, epochs: Mapping[Key, Collection[int]]) -> dict[Key, dict[int, int]]:
        """See :meth:`WriteGuard.epoch_ends` (one store read per partition and epoch;
        a restore asks only for the epochs its WAL entries were written at)."""
        wanted = {key: sorted(set(asked)) for key, asked in epochs.items()}

        def read() -> dict[Key, dict[int, int]]:
            ends: dict[Key, dict[int, int]] = {}
            for (topic, partition), asked in wanted.items():
                for epoch in asked:
                    end = self._store.epoch_end(topic, partition, epoch)
                    if end is not None:
                        ends.setdefault((topic, partition), {})[epoch] = end
            return ends

        found: dict[Key, dict[int, int]] = self._submit(read).result()
        return found

    # -- manifest pointers --------------------------------------------------------------

    def set_manifests(
        self, manifests: Mapping[Key, str]
    ) -> concurrent.futures.Future[dict[Key, bool]]:
        """Record each partition's manifest key (``{partition: bucket key}``) at the
        epoch this broker owns it at (:meth:`MetadataStore.set_manifests`), on the
        store's thread. The future's result maps each partition to True (recorded) or
        False: not owned by this broker (the store is not asked), refused by the store
        (another broker owns it now: logged), or any partition once this broker is
        fenced (nothing is sent). A refusal does not fence this broker: the commit point
        does (:meth:`commit`). The future raises :class:`MetadataUnavailableError` when
        the store did not answer (the pointers may or may not have been recorded)."""
        wanted = dict(manifests)
        return self._submit(lambda: self._set_manifests(wanted))

    def _set_manifests(self, wanted: dict[Key, str]) -> dict[Key, bool]:
        if self.fenced is not None:  # nothing more is written for the cluster
            return dict.fromkeys(wanted, False)
        sent = [
            ManifestCommit(topic, partition, self.owned[(topic, partition)].epoch, key)
            for (topic, partition), key in wanted.items()
            if (topic, partition) in self.owned
        ]
        refused = self._store.set_manifests(self.me.broker_id, sent)
        for m in refused:
            log.warning(
                "cluster.manifest_refused broker=%d partition=%s-%d epoch=%d (another broker "
                "owns it now, or its topic was deleted: its manifest pointer is unchanged)",
                self.me.broker_id, m.topic, m.partition, m.epoch,
            )  # fmt: skip
        done = {(m.topic, m.partition) for m in sent} - {(m.topic, m.partition) for m in refused}
        return {key: key in done for key in wanted}

    def manifests(self) -> dict[Key, str]:
        """Every partition's manifest key (blocking).

        Raises:
            MetadataUnavailableError: the store did not answer.
        """
        found: dict[Key, str] = self._submit(self._store.manifests).result()
        return found

    # -- on the store's thread ----------------------------------------------------------

    def _claim(self, partitions: list[Key]) -> None:
        """Own ``partitions``, at a new ownership epoch, unless another live broker
        owns them (a dead one's are the claimer's to take: it fenced its stream)."""
        owners = dict(self.view.owners)
        live = self._sharing(b.broker_id for b in self.view.brokers)
        for key in partitions:
            for _ in range(3):  # a lost compare-and-set: read again and claim again
                current = owners.get(key)
                if key in self.owned or (current is not None and current.owner in live):
                    break
                won = self._store.claim(key[0], key[1], self.me.broker_id, current)
                if won is not None:
                    self.owned[key] = won
                    break
                owners = self._store.owners()
            else:
                raise MetadataUnavailableError(f"could not claim {key[0]}-{key[1]}: contended")
        self._refresh()  # Metadata names this broker the leader at once

    def _check_owned(self) -> None:
        """A partition of ours whose ownership changed behind our back fences us."""
        owners = dict(self.view.owners)
        for key, mine in self.owned.items():
            now = owners.get(key)
            if now is not None and now != mine:
                self._fence(
                    f"partition {key[0]}-{key[1]} was claimed by broker {now.owner} "
                    f"(epoch {now.epoch}, ours {mine.epoch})"
                )
                return

    def _reclaim(self) -> int | None:
        """See :meth:`Session._reclaim`."""
        owners = self._store.owners()
        moved = [k for k, mine in self.owned.items() if owners.get(k) != mine]
        if moved:
            self._fence(f"partition {moved[0][0]}-{moved[0][1]} changed owner meanwhile")
            return None
        mine = list(self.owned)
        self.owned.clear()
        self._claim(mine)
        return len(self.owned)
