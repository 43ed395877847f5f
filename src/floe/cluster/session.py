"""This broker's session in the cluster's metadata store: its registration, the writer
lease and its WAL stream lease, the thread that keeps them alive, and the fence that
stops it writing when any of them is in doubt. The partitions it owns on top of the
session, and the takeover of dead brokers' WAL streams, are
:mod:`floe.cluster.membership`'s.

One thread owns the :class:`~floe.cluster.interface.MetadataStore` (its objects are not
thread-safe and block on the network) and runs every call
(:class:`~floe.cluster.worker.StoreThread`): a renewal every third of
``cluster.session.timeout.ms``, with a fresh view of the live brokers and of partition
ownership, plus the claims and releases the event loop queues (:meth:`Session._submit`),
and the last calls when the broker leaves (:meth:`Session.leave`). Before that thread
starts (:meth:`Session.join`) the thread that opens the broker makes the calls
(:meth:`Session.announce`, :meth:`Session.look`, :meth:`Session.acquire`). The event
loop never waits for the store, except once at start (:meth:`Session.acquire`).

The fence is time-based on this side and store-based on the other: the lease is valid
here until ``session timeout - margin`` after the *start* of the last successful renewal,
which is before the store can expire it (the store counts from when the renewal arrived,
later). Another broker claims a partition only once the store says the owner is gone, so
by then the owner has stopped acknowledging. ``check()`` is what the object store calls
before every append, before every bucket write and after every WAL PUT, before the
acknowledgement: a write whose PUT outlived the lease is not acknowledged.
"""

from __future__ import annotations

import abc
import concurrent.futures
import functools
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from floe.cluster.counting import CountingStore
from floe.cluster.interface import (
    BrokerIdTakenError,
    BrokerInfo,
    Lease,
    LeaseLostError,
    MetadataStore,
    MetadataUnavailableError,
    Ownership,
)
from floe.cluster.worker import StoreThread
from floe.storage.interface import NotOwnerError
from floe.types import PartitionId, TopicName

# the logger of every cluster.* event of a member, whichever of its modules logs it
log = logging.getLogger("floe.cluster.membership")

Key = tuple[TopicName, PartitionId]
_T = TypeVar("_T")

WRITER_LEASE = "storage-writer"
"""The named lease whose holder writes the bucket prefix; the other brokers of the
cluster wait as standbys until it is free."""
STREAM_LEASE = "wal-stream-{}"
"""The named lease of a broker's WAL stream (``wal/<node.id>/``): its holder writes the
stream, at the lease's epoch. A broker that takes over from a dead one takes the dead
one's stream lease for a moment, to record the takeover of the stream at an epoch above
every epoch the stream was written at."""
WRITER_POLL_S = 0.1
"""How often a broker waiting for the writer lease reads who holds it (one read; it
asks for the lease only when no one does): a writer that died is replaced within this
of its lease lapsing, and the other standbys name the new one as soon."""
LOOK_S = 0.5
"""How often a broker waiting for the writer lease reads the whole view (brokers,
owners) when the writer did not change: what its Metadata answers name."""
MARGIN_FRACTION = 0.2
"""Part of the session timeout by which this broker's own view of its lease ends
before the store's (network delay, clock rate differences)."""
LISTED_MARGIN_S = 0.5
"""Time another broker's view refresh may take beyond its renewal interval (a loaded
machine, a slow store): see :meth:`Session.listed_in`."""


@dataclass(frozen=True, slots=True)
class ClusterView:
    """What the last renewal saw (immutable; replaced whole, read from any thread)."""

    brokers: tuple[BrokerInfo, ...] = ()
    owners: Mapping[Key, Ownership] = field(default_factory=dict)
    seen_at: float = 0.0
    """``time.time()`` of the renewal that saw it (0: never)."""
    controller: int | None = None
    """The broker holding the storage writer lease (None: none)."""
    assignments: Mapping[Key, int] = field(default_factory=dict)
    """Where the writer wants partitions led (its balancing)."""


class Session(abc.ABC):
    """See the module docstring: whether this broker may write at all (:meth:`check`),
    the part of :class:`floe.storage.interface.WriteGuard` that is not about partitions.
    :class:`~floe.cluster.membership.Membership` adds the partitions it owns, and the
    two checks a renewal makes of them on the store's thread (:meth:`_check_owned`,
    :meth:`_reclaim`).

    The store, the leases and the registration belong to the thread that opens the
    broker until :meth:`join` starts the renewal thread, then to that thread alone (the
    event loop queues its calls: :meth:`_submit`), which also gives them up and closes
    the store when :meth:`leave` stops it (the caller of :meth:`leave` does, when it
    never joined). :attr:`view` is replaced whole and read from any thread.

    Attributes:
        me: this broker as registered (host and port as clients reach it).
        view: the brokers and ownership seen by the last successful renewal.
        lease_losses: how many times the lease lapsed since start.
        fenced: why this broker may not write at all any more (a partition it owned
            was claimed by another broker), or None.
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
        self._store = CountingStore(store)
        self.share = share
        self.me = me
        self._ttl_s = session_timeout_s
        self._interval_s = session_timeout_s / 3
        self.where = where
        self.view = ClusterView()
        self.lease_losses = 0
        self.fenced: str | None = None
        self._valid_until = 0.0  # time.monotonic()
        self._unavailable = False  # the store did not answer the last call (log once)
        self._worker = StoreThread(
            me.broker_id, self._interval_s, self._renew, self._note_unavailable, self._part
        )
        self._writer: Lease | None = None
        self._stream: Lease | None = None
        self._registered: float | None = None  # when this run first registered (monotonic)
        self._next_look = 0.0  # a waiting broker's next whole view (monotonic)
        self._next_keepalive = 0.0  # an unjoined standby's next keepalive (monotonic)
        self.on_fenced: Callable[[], None] | None = None
        """Called once, on the store's thread, when this broker is fenced (the broker
        stops and rejoins through a clean open)."""

    # -- WriteGuard --------------------------------------------------------------------

    def join(self) -> int:
        """Register, take this broker's WAL stream lease at an epoch no run of it wrote
        at, and keep both alive in the background: a member of the cluster, which may
        write its own stream. Returns the stream lease's epoch (what the store writes
        into its WAL keys). Joining twice returns the same epoch.

        Raises:
            BrokerIdTakenError: another live broker is registered under this node.id.
            MetadataUnavailableError: the store did not answer.
        """
        if self._stream is not None:
            return self._stream.epoch
        sent = self._register_waiting()
        self._stream = self._take_stream()
        self._valid_until = sent + self._ttl_s * (1 - MARGIN_FRACTION)
        self._refresh()
        log.info(
            "cluster.joined broker=%d store=%s brokers=%s stream_epoch=%d session_timeout_ms=%d",
            self.me.broker_id, self.where, ",".join(str(b.broker_id) for b in self.view.brokers),
            self._stream.epoch, self._ttl_s * 1000,
        )  # fmt: skip
        self._worker.start()
        return self._stream.epoch

    def acquire(self) -> int:
        """Wait until this broker holds the storage writer lease (as a standby while
        another live broker holds it), joined (:meth:`join`). Returns the stream
        lease's epoch.

        A member that shares partitions joins first and waits as a member; otherwise
        the standby joins only once it is the writer, so that a broker whose stream
        lease is held is the writer or was one until it died.

        Raises:
            BrokerIdTakenError: another live broker is registered under this node.id.
            MetadataUnavailableError: the store did not answer.
        """
        if self._writer is not None and self._stream is not None:
            return self._stream.epoch  # held already (a member that became the writer)
        if self.share:
            epoch = self.join()
            take = self._take_writer_joined
        else:
            self._register_waiting()
            take = self._take_writer_unjoined
        waited = False
        while (writer := self._ask(take)) is None:
            if not waited:
                waited = True
                log.info(
                    "cluster.standby broker=%d writer=%s (serving nothing until the writer "
                    "stops or its lease lapses: within %.0f s of its death)",
                    self.me.broker_id, self.view.controller, self._ttl_s,
                )  # fmt: skip
            if self._worker.wait_stopped(WRITER_POLL_S):
                raise MetadataUnavailableError("this broker left the cluster while it waited")
        if not self.share:
            epoch = self.join()
        log.info(
            "cluster.writer broker=%d writer_epoch=%d stream_epoch=%d",
            self.me.broker_id, writer.epoch, epoch,
        )  # fmt: skip
        return epoch

    def _ask(self, take: Callable[[], Lease | None]) -> Lease | None:
        """``take()``, or None when the store did not answer (a store restarting: the
        wait goes on, logged once as ``cluster.store_unavailable``).

        Raises:
            MetadataUnavailableError: this broker left the cluster, or was fenced.
        """
        if self.fenced is not None:
            raise MetadataUnavailableError(f"this broker was fenced: {self.fenced}")
        try:
            return take()
        except MetadataUnavailableError as exc:
            if self._worker.stopped:
                raise
            self._note_unavailable(exc)
            return None

    def _take_writer_joined(self) -> Lease | None:
        """The writer lease, taken by the renewal thread (the owner of the store).

        Raises:
            MetadataUnavailableError: the store did not answer, or this broker left.
        """
        lease: Lease | None = self._submit(self._take_writer).result()
        return lease

    def _take_writer_unjoined(self) -> Lease | None:
        """The writer lease, before the renewal thread runs (this thread owns the
        store); the registration is kept alive meanwhile, every renewal interval."""
        if time.monotonic() >= self._next_keepalive:
            self._next_keepalive = time.monotonic() + self._interval_s
            try:
                self._store.keepalive()
            except LeaseLostError:  # a long wait as a standby outlived a missed renewal
                self._store.register(self.me, self._ttl_s)
        return self._take_writer()

    def _take_writer(self) -> Lease | None:
        """The writer lease if no one else holds it; the view refreshed (a standby's
        Metadata names the writer) when the holder changed, and every :data:`LOOK_S`."""
        held = self._store.holder(WRITER_LEASE)
        writer = None
        if held is None or held.holder == self.me.broker_id:  # free, or ours: acquire renews
            writer = self._store.acquire(WRITER_LEASE, self.me.broker_id, self._ttl_s)
            if writer is not None:
                self._writer = writer
        holder = None if held is None else held.holder
        if (
            writer is not None
            or holder != self.view.controller
            or time.monotonic() >= self._next_look
        ):
            self._next_look = time.monotonic() + LOOK_S
            self._refresh()
        return writer

    def _take_stream(self) -> Lease:
        """This broker's WAL stream lease at a new epoch: its run before a kill -9 may
        still hold it (the same holder renews it at the same epoch), so it is given up
        and taken again, above every epoch that run wrote at."""
        name = STREAM_LEASE.format(self.me.broker_id)
        attempt = functools.partial(self._store.acquire, name, self.me.broker_id, self._ttl_s)
        failure = f"lease {name} is held by another broker"
        self._store.release(self._wait_for(attempt, failure))
        return self._wait_for(attempt, failure)

    def _wait_for(self, attempt: Callable[[], _T | None], failure: str) -> _T:
        """Call ``attempt`` until it returns something, for up to one session timeout
        (plus a second): what it waits for is a lease a crashed broker no longer renews.

        Raises:
            MetadataUnavailableError: ``failure``, when it never did.
        """
        deadline = time.monotonic() + self._ttl_s + 1.0
        while (got := attempt()) is None:
            if time.monotonic() >= deadline:
                raise MetadataUnavailableError(failure)
            time.sleep(min(0.25, self._ttl_s / 4))
        return got

    def _register_waiting(self) -> float:
        """Register; a registration under this id still alive is given one session
        timeout to expire (this broker's own, left by a kill -9 just before), then it
        is another broker's. Returns when the successful attempt was sent."""
        deadline = time.monotonic() + self._ttl_s + 1.0
        waited = False
        while True:
            sent = time.monotonic()
            try:
                self._store.register(self.me, self._ttl_s)
                if self._registered is None:
                    self._registered = sent
                return sent
            except BrokerIdTakenError:
                if sent >= deadline:
                    raise
                if not waited:
                    waited = True
                    log.info(
                        "cluster.waiting_for_registration broker=%d (a live broker has "
                        "this id; a crashed one's lease expires within %.0f s)",
                        self.me.broker_id, self._ttl_s,
                    )  # fmt: skip
                time.sleep(min(1.0, self._ttl_s / 4))

    def refresh(self) -> None:
        self._submit(self._refresh).result()

    def announce(self) -> float:
        """Register now, in the calling thread, before this broker answers any client
        (a standby, before :meth:`acquire`); returns :meth:`listed_in`.

        Raises:
            BrokerIdTakenError: another live broker is registered under this node.id.
            MetadataUnavailableError: the store did not answer.
        """
        assert not self._worker.started, "announce() is for a broker that has not joined"
        self._register_waiting()
        return self.listed_in()

    def listed_in(self) -> float:
        """Seconds until every live broker lists this one in its Metadata answers: each
        reads the registrations once per renewal interval, so one interval (and
        :data:`LISTED_MARGIN_S` for that read) after this run first registered; 0 once
        past. A broker answering before then is left out of the others' answers, and
        librdkafka forgets a broker an answer leaves out, with the requests in flight to
        it (a consumer then waited for its topic's metadata forever)."""
        if self._registered is None:
            return 0.0
        listed = self._registered + self._interval_s + LISTED_MARGIN_S
        return max(0.0, listed - time.monotonic())

    def look(self) -> None:
        """Read the cluster's view now, in the calling thread, before this broker joined
        or waits for the writer lease: a standby about to answer Metadata names the
        writer and the live brokers from its first answer (librdkafka forgets the
        brokers an answer leaves out).

        Raises:
            MetadataUnavailableError: the store did not answer.
        """
        assert not self._worker.started, "look() is for a broker that has not joined"
        self._refresh()

    @property
    def store_requests(self) -> Mapping[str, int]:
        """The requests made of the metadata store so far, by operation."""
        return self._store.requests

    def live(self) -> list[int]:
        ids = {b.broker_id for b in self.view.brokers} | {self.me.broker_id}
        return sorted(ids)

    def check(self) -> None:
        if self.fenced is not None:
            raise NotOwnerError(f"not a writer of this cluster's storage: {self.fenced}")
        if time.monotonic() >= self._valid_until:
            raise NotOwnerError(
                f"broker {self.me.broker_id}'s lease in the metadata store is not renewed"
            )

    def writer_epoch(self) -> int:
        """The epoch of the writer lease this broker holds (0: none): its transaction
        coordinator's epoch, written into every marker."""
        return 0 if self._writer is None else self._writer.epoch

    # -- the rest of the broker ----------------------------------------------------------

    @property
    def session_timeout_s(self) -> float:
        """How long the store keeps a broker's registration and leases unrenewed."""
        return self._ttl_s

    @property
    def interval_s(self) -> float:
        """How often the lease is renewed and the view refreshed."""
        return self._interval_s

    def valid_for_s(self) -> float:
        """Seconds this broker may still write without another renewal (<= 0: none)."""
        return self._valid_until - time.monotonic()

    def update_address(self, host: str, port: int) -> None:
        """Register the address clients reach this broker at (once the listener is
        bound to a port picked at start), without waiting."""
        self.me = BrokerInfo(self.me.broker_id, host, port, self.me.rack)
        self._submit(lambda: self._store.register(self.me, self._ttl_s))

    def leave(self) -> None:
        """Stop renewing, give the leases up and leave the cluster now (a standby takes
        over at once), close: the store's thread does it as its last work
        (:meth:`_part`); this waits for it up to a session timeout."""
        self._valid_until = 0.0
        if not self._worker.stop(self._ttl_s):
            log.warning(
                "cluster.leave_slow broker=%d (the store's thread is still in a call: it "
                "leaves the cluster when the call returns, or its registration lapses "
                "within %.0f s)",
                self.me.broker_id, self._ttl_s,
            )  # fmt: skip

    def _part(self) -> None:
        """Give the registration and the leases up, close the store."""
        try:
            # gone first, then the leases: a broker that takes the writer lease the
            # moment it is free must find this one dead, or it leaves this broker's
            # stream unfenced and its partitions (internal topics' too) unclaimed
            self._store.unregister()
            if self.fenced is None:
                for lease in (self._writer, self._stream):
                    if lease is not None:
                        self._store.release(lease)
            log.info("cluster.left broker=%d", self.me.broker_id)
        except Exception as exc:  # expires by itself within the session timeout
            log.warning("cluster.leave_failed broker=%d error=%s", self.me.broker_id, exc)
        finally:
            self._store.close()

    # -- on the store's thread -----------------------------------------------------------

    def _submit(self, job: Callable[[], Any]) -> concurrent.futures.Future[Any]:
        """Queue ``job`` for the store's thread (see :class:`StoreThread`)."""
        return self._worker.submit(job)

    def _renew(self) -> None:
        sent = time.monotonic()
        try:
            if self.fenced is not None:  # gone from the cluster: the view only
                self._refresh()
                return
            try:
                self._store.keepalive()
                held = (
                    self.fenced is None
                    and self._store.renew(self._held_stream(), self._ttl_s)
                    and (self._writer is None or self._store.renew(self._writer, self._ttl_s))
                )
            except LeaseLostError:
                held = False
            if held:
                self._valid_until = sent + self._ttl_s * (1 - MARGIN_FRACTION)
            elif self.fenced is None:
                self._rejoin()
            self._refresh()
            self._check_owned()
            if self._unavailable:
                self._unavailable = False
                log.info(
                    "cluster.store_available broker=%d store=%s", self.me.broker_id, self.where
                )
        except MetadataUnavailableError as exc:
            self._note_unavailable(exc)

    def _rejoin(self) -> None:
        """A lease lapsed (the store saw no renewal for a session timeout): this broker
        did not write meanwhile. It writes again only if nobody else wrote in its
        place: its stream lease comes back at the same or the next epoch, the writer's
        (if it held it) at the next epoch, and none of its partitions changed owner;
        otherwise another broker may have written the bucket, and this one is fenced
        until a restart reads it again."""
        self.lease_losses += 1
        self._valid_until = 0.0
        log.error(
            "cluster.lease_lost broker=%d store=%s (writes refused until it rejoins)",
            self.me.broker_id, self.where,
        )  # fmt: skip
        sent = time.monotonic()
        try:
            self._store.keepalive()
        except LeaseLostError:
            try:
                self._store.register(self.me, self._ttl_s)
            except BrokerIdTakenError:
                self._fence(f"another broker registered as node.id {self.me.broker_id}")
                return
        if self._writer is not None:
            writer = self._store.acquire(WRITER_LEASE, self.me.broker_id, self._ttl_s)
            if writer is None or writer.epoch != self._writer.epoch + 1:
                if writer is not None:
                    self._store.release(writer)
                self._fence(
                    "another broker held the writer lease meanwhile"
                    if writer is not None
                    else "another broker holds the writer lease"
                )
                return
            self._writer = writer
        stream = self._store.acquire(
            STREAM_LEASE.format(self.me.broker_id), self.me.broker_id, self._ttl_s
        )
        if stream is None or stream.epoch not in (
            self._held_stream().epoch,
            self._held_stream().epoch + 1,
        ):
            self._fence("another broker took this broker's WAL stream over meanwhile")
            return
        self._stream = stream
        partitions = self._reclaim()
        if partitions is None:
            return
        self._valid_until = sent + self._ttl_s * (1 - MARGIN_FRACTION)
        log.info(
            "cluster.rejoined broker=%d writer_epoch=%s partitions=%d",
            self.me.broker_id, self._writer.epoch if self._writer else "-", partitions,
        )  # fmt: skip

    def _held(self) -> Lease:
        """The writer lease (the thread runs only once :meth:`acquire` got it)."""
        assert self._writer is not None, "renewing before acquire()"
        return self._writer

    def _held_stream(self) -> Lease:
        """This broker's WAL stream lease (taken by :meth:`acquire`)."""
        assert self._stream is not None, "renewing before acquire()"
        return self._stream

    def _refresh(self) -> None:
        brokers = tuple(self._store.live_brokers())
        writer = self._store.holder(WRITER_LEASE)
        controller = None if writer is None else writer.holder
        owners, assignments = self._store.owners(), self._store.assignments()
        self.view = ClusterView(brokers, owners, time.time(), controller, assignments)

    def _fence(self, reason: str) -> None:
        """Stop acting for the cluster for good (this run): writes are refused at once,
        the registration is given up so that the writer takes this broker's partitions
        over (a fenced broker that stayed registered kept them, unavailable, and was
        sent more), and :attr:`on_fenced` tells the broker to rejoin through a clean
        open. Runs on the store's thread."""
        if self.fenced is not None:
            return
        self.fenced = reason
        self._valid_until = 0.0
        log.error(
            "cluster.fenced broker=%d reason=%s (leaving the cluster to rejoin it)",
            self.me.broker_id, reason,
        )  # fmt: skip
        try:
            self._store.unregister()
            # before the broker hears of it: answering as a passive broker from now on,
            # it must name the new writer, not itself (the view of before the fence)
            self._refresh()
        except MetadataUnavailableError as exc:  # it lapses by itself: no more renewals
            log.warning("cluster.leave_failed broker=%d error=%s", self.me.broker_id, exc)
        if self.on_fenced is not None:
            self.on_fenced()

    def _note_unavailable(self, exc: Exception) -> None:
        if not self._unavailable:
            self._unavailable = True
            log.error(
                "cluster.store_unavailable broker=%d store=%s error=%s "
                "(writes refused once the lease runs out: %.1f s)",
                self.me.broker_id, self.where, exc, max(0.0, self.valid_for_s()),
            )  # fmt: skip

    # -- what the partitions add (on the store's thread) --------------------------------

    @abc.abstractmethod
    def _check_owned(self) -> None:
        """After every renewal's refresh of :attr:`view`: fence this broker
        (:meth:`_fence`) if a partition it owns changed owner behind its back."""

    @abc.abstractmethod
    def _reclaim(self) -> int | None:
        """After a lapsed lease came back at an epoch nobody wrote at meanwhile: own
        this broker's partitions again, at new ownership epochs; returns how many it
        owns, or None when it was fenced instead (one changed owner meanwhile).

        Raises:
            MetadataUnavailableError: the store did not answer.
        """
