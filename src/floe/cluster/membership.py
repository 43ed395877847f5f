"""This broker as a member of the cluster: its registration lease in the metadata store,
the partitions it owns, and the fence that stops it writing when either is in doubt.

One thread owns the :class:`~floe.cluster.interface.MetadataStore` (its objects are not
thread-safe and block on the network) and runs every call: a renewal every third of
``cluster.session.timeout.ms``, with a fresh view of the live brokers and of partition
ownership, plus the claims and releases the event loop queues. The event loop never
waits for the store, except once at start (:meth:`Membership.acquire`).

The fence is time-based on this side and store-based on the other: the lease is valid
here until ``session timeout - margin`` after the *start* of the last successful renewal,
which is before the store can expire it (the store counts from when the renewal arrived,
later). Another broker claims a partition only once the store says the owner is gone, so
by then the owner has stopped acknowledging. ``check()`` is what the object store calls
before every append, before every bucket write and after every WAL PUT, before the
acknowledgement: a write whose PUT outlived the lease is not acknowledged.
"""

from __future__ import annotations

import concurrent.futures
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from floe.cluster.interface import (
    BrokerIdTakenError,
    BrokerInfo,
    Lease,
    LeaseLostError,
    MetadataStore,
    MetadataUnavailableError,
    Ownership,
)
from floe.storage.interface import NotOwnerError
from floe.types import PartitionId, TopicName

log = logging.getLogger(__name__)

Key = tuple[TopicName, PartitionId]

WRITER_LEASE = "storage-writer"
"""The named lease whose holder writes the bucket prefix; the other brokers of the
cluster wait as standbys until it is free."""
STREAM_LEASE = "wal-stream-{}"
"""The named lease of a broker's WAL stream (``wal/<node.id>/``): its holder writes the
stream, at the lease's epoch. A broker that takes over from a dead one takes the dead
one's stream lease for a moment, to record the takeover of the stream at an epoch above
every epoch the stream was written at."""
MARGIN_FRACTION = 0.2
"""Part of the session timeout by which this broker's own view of its lease ends
before the store's (network delay, clock rate differences)."""


@dataclass(frozen=True, slots=True)
class ClusterView:
    """What the last renewal saw (immutable; replaced whole, read from any thread)."""

    brokers: tuple[BrokerInfo, ...] = ()
    owners: Mapping[Key, Ownership] = field(default_factory=dict)
    seen_at: float = 0.0
    """``time.time()`` of the renewal that saw it (0: never)."""


class Membership:
    """See the module docstring. Implements :class:`floe.storage.interface.WriteGuard`.

    Attributes:
        me: this broker as registered (host and port as clients reach it).
        view: the brokers and ownership seen by the last successful renewal.
        owned: the partitions this broker owns, with the epoch it claimed them at.
        lease_losses: how many times the lease lapsed since start.
        fenced: why this broker may not write at all any more (a partition it owned
            was claimed by another broker), or None.
    """

    def __init__(
        self, store: MetadataStore, me: BrokerInfo, session_timeout_s: float, where: str
    ) -> None:
        self._store = store
        self.me = me
        self._ttl_s = session_timeout_s
        self._interval_s = session_timeout_s / 3
        self.where = where
        self.view = ClusterView()
        self.owned: dict[Key, Ownership] = {}
        self.lease_losses = 0
        self.fenced: str | None = None
        self._valid_until = 0.0  # time.monotonic()
        self._unavailable = False  # the store did not answer the last call (log once)
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], concurrent.futures.Future[Any]]]
        self._jobs = queue.SimpleQueue()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._writer: Lease | None = None
        self._stream: Lease | None = None

    # -- WriteGuard --------------------------------------------------------------------

    def acquire(self) -> int:
        """Register, then wait until this broker holds the storage writer lease (as a
        standby while another live broker holds it), then its WAL stream's lease, and
        keep them alive in the background. Returns the stream lease's epoch (what the
        store writes into its WAL keys).

        Raises:
            BrokerIdTakenError: another live broker is registered under this node.id.
            MetadataUnavailableError: the store did not answer.
        """
        self._register_waiting()
        waited = False
        while True:
            sent = time.monotonic()
            try:
                self._store.keepalive()
            except LeaseLostError:  # a long wait as a standby outlived a missed renewal
                self._store.register(self.me, self._ttl_s)
            writer = self._store.acquire(WRITER_LEASE, self.me.broker_id, self._ttl_s)
            if writer is not None:
                break
            self._refresh()  # what this standby's Metadata answers
            if not waited:
                waited = True
                holder = self._writer_holder()
                log.info(
                    "cluster.standby broker=%d writer=%s (serving nothing until the writer "
                    "stops or its lease lapses: within %.0f s of its death)",
                    self.me.broker_id, holder, self._ttl_s,
                )  # fmt: skip
            time.sleep(self._interval_s)
        self._writer = writer
        self._stream = self._take_stream()
        self._valid_until = sent + self._ttl_s * (1 - MARGIN_FRACTION)
        self._refresh()
        log.info(
            "cluster.joined broker=%d store=%s brokers=%s writer_epoch=%d stream_epoch=%d "
            "session_timeout_ms=%d",
            self.me.broker_id, self.where, ",".join(str(b.broker_id) for b in self.view.brokers),
            writer.epoch, self._stream.epoch, self._ttl_s * 1000,
        )  # fmt: skip
        self._thread = threading.Thread(target=self._run, name="floe-cluster", daemon=True)
        self._thread.start()
        return self._stream.epoch

    def _take_stream(self) -> Lease:
        """This broker's WAL stream lease; its run before a kill -9 may hold it for up to
        one session timeout more (the writer lease came free sooner only if that run
        released it, and then it released this one too)."""
        deadline = time.monotonic() + self._ttl_s + 1.0
        name = STREAM_LEASE.format(self.me.broker_id)
        while (lease := self._store.acquire(name, self.me.broker_id, self._ttl_s)) is None:
            if time.monotonic() >= deadline:
                raise MetadataUnavailableError(f"lease {name} is held by another broker")
            time.sleep(min(1.0, self._ttl_s / 4))
        return lease

    def fence_streams(self, streams: Iterable[str]) -> dict[str, int]:
        future = self._submit(lambda: self._fence_streams(list(streams)))
        result: dict[str, int] = future.result()
        return result

    def _fence_streams(self, streams: list[str]) -> dict[str, int]:
        """Until partitions move between live brokers only the writer writes, so a stream
        lease another broker holds is a former writer's: it stopped renewing it with its
        writer lease (which this broker holds now), and it lapses within one session
        timeout. Each is waited for, then taken for a moment (its epoch is the fence).

        Raises:
            MetadataUnavailableError: a stream lease was still renewed after a session
                timeout.
        """
        own = str(self.me.broker_id)
        deadline = time.monotonic() + self._ttl_s + 1.0
        out: dict[str, int] = {}
        for stream in streams:
            if stream == own:
                out[stream] = self._held_stream().epoch
            elif not stream:  # the unnamed stream of older buckets: writer epochs
                out[stream] = self._held().epoch
            else:
                name = STREAM_LEASE.format(stream)
                while (lease := self._store.acquire(name, self.me.broker_id, self._ttl_s)) is None:
                    if time.monotonic() >= deadline:
                        raise MetadataUnavailableError(f"lease {name} is still being renewed")
                    time.sleep(0.1)
                out[stream] = lease.epoch
                self._store.release(lease)
        return out

    def owner(self, topic: TopicName, partition: PartitionId) -> int | None:
        ownership = self.view.owners.get((topic, partition))
        return None if ownership is None else ownership.owner

    def _writer_holder(self) -> str:
        """Who holds the writer lease, as far as ownership tells (for the standby's log)."""
        owners = {o.owner for o in self.view.owners.values()}
        return ",".join(str(o) for o in sorted(owners)) or "unknown"

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

    def adopt(self, partitions: Iterable[Key]) -> None:
        wanted = list(partitions)
        self._submit(lambda: self._claim(wanted))

    def forget(self, topic: TopicName) -> None:
        def drop() -> None:
            self._store.forget(topic)
            for key in [k for k in self.owned if k[0] == topic]:
                del self.owned[key]

        self._submit(drop)

    def check(self) -> None:
        if self.fenced is not None:
            raise NotOwnerError(f"not a writer of this cluster's storage: {self.fenced}")
        if time.monotonic() >= self._valid_until:
            raise NotOwnerError(
                f"broker {self.me.broker_id}'s lease in the metadata store is not renewed"
            )

    # -- the rest of the broker ----------------------------------------------------------

    def valid_for_s(self) -> float:
        """Seconds this broker may still write without another renewal (<= 0: none)."""
        return self._valid_until - time.monotonic()

    def update_address(self, host: str, port: int) -> None:
        """Register the address clients reach this broker at (once the listener is
        bound to a port picked at start), without waiting."""
        self.me = BrokerInfo(self.me.broker_id, host, port, self.me.rack)
        self._submit(lambda: self._store.register(self.me, self._ttl_s))

    def leave(self) -> None:
        """Stop renewing, give the writer lease up and leave the cluster now (a standby
        takes over at once), close."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self._ttl_s)
        self._valid_until = 0.0
        try:
            if self._writer is not None and self.fenced is None:
                self._store.release(self._writer)
                if self._stream is not None:
                    self._store.release(self._stream)
            self._store.unregister()
            log.info("cluster.left broker=%d", self.me.broker_id)
        except Exception as exc:  # expires by itself within the session timeout
            log.warning("cluster.leave_failed broker=%d error=%s", self.me.broker_id, exc)
        finally:
            self._store.close()

    # -- the thread ----------------------------------------------------------------------

    def _submit(self, job: Callable[[], Any]) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._jobs.put((job, future))
        return future

    def _run(self) -> None:
        due = time.monotonic() + self._interval_s
        while not self._stop.is_set():
            try:
                job, future = self._jobs.get(timeout=max(0.0, due - time.monotonic()))
            except queue.Empty:
                pass
            else:
                self._do(job, future)
            if time.monotonic() >= due:
                due = time.monotonic() + self._interval_s
                self._renew()

    def _do(self, job: Callable[[], Any], future: concurrent.futures.Future[Any]) -> None:
        try:
            future.set_result(job())
        except MetadataUnavailableError as exc:
            self._note_unavailable(exc)
            future.set_exception(exc)
        except Exception as exc:
            log.exception("cluster.job_failed broker=%d", self.me.broker_id)
            future.set_exception(exc)

    def _renew(self) -> None:
        sent = time.monotonic()
        try:
            try:
                self._store.keepalive()
                held = (
                    self.fenced is None
                    and self._store.renew(self._held(), self._ttl_s)
                    and self._store.renew(self._held_stream(), self._ttl_s)
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
        was not the writer meanwhile. It writes again only if nobody else was: the
        writer lease comes back at the next epoch and no partition changed owner;
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
        writer = self._store.acquire(WRITER_LEASE, self.me.broker_id, self._ttl_s)
        if writer is None or writer.epoch != self._held().epoch + 1:
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
        owners = self._store.owners()
        moved = [k for k, mine in self.owned.items() if owners.get(k) != mine]
        if moved:
            self._fence(f"partition {moved[0][0]}-{moved[0][1]} changed owner meanwhile")
            return
        mine = list(self.owned)
        self.owned.clear()
        self._claim(mine)
        self._valid_until = sent + self._ttl_s * (1 - MARGIN_FRACTION)
        log.info(
            "cluster.rejoined broker=%d writer_epoch=%d partitions=%d",
            self.me.broker_id, writer.epoch, len(self.owned),
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
        self.view = ClusterView(brokers, self._store.owners(), time.time())

    def _claim(self, partitions: list[Key]) -> None:
        """Own ``partitions`` (this broker holds the writer lease, so they are its to
        take: a former owner finds out at its next renewal and stops)."""
        owners = dict(self.view.owners)
        for key in partitions:
            if key in self.owned:
                continue
            for _ in range(3):  # a lost compare-and-set: read again and claim again
                won = self._store.claim(key[0], key[1], self.me.broker_id, owners.get(key))
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

    def _fence(self, reason: str) -> None:
        if self.fenced is None:
            self.fenced = reason
            self._valid_until = 0.0
            log.error("cluster.fenced broker=%d reason=%s", self.me.broker_id, reason)

    def _note_unavailable(self, exc: Exception) -> None:
        if not self._unavailable:
            self._unavailable = True
            log.error(
                "cluster.store_unavailable broker=%d store=%s error=%s "
                "(writes refused once the lease runs out: %.1f s)",
                self.me.broker_id, self.where, exc, max(0.0, self.valid_for_s()),
            )  # fmt: skip
