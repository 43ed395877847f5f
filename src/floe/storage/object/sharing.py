"""Partitions shared among the live brokers of a cluster (``cluster.share.partitions``):
the background work that brings partitions to this broker.

* A member (a broker without the writer lease) mirrors the writer's topics from the
  bucket every pass, and at once when a client names a topic it does not know.
* Every broker opens the partitions the metadata store says it owns and it does not lead
  yet (the writer assigned them: it spreads new topics' partitions over the live
  brokers), claiming each at a new ownership epoch first, so that a run of it before a
  crash can never be mistaken for this one.
* The writer takes over the partitions of brokers that died: it fences each dead
  broker's WAL stream (once its lease lapsed), claims the partitions and restores them
  from the bucket (their partition objects and every stream's WAL objects). It restores
  those of a broker whose Kafka port refuses connections while that broker's lease
  lapses (:meth:`ObjectStore.stage`), so that the takeover opens them at once.
* The writer leads the partitions of the topics that stay with it
  (:func:`~.topics.stays_with_writer`: most internal topics, dead-letter topics, routed
  table topics): it recalls those another broker leads (a topic made a dead-letter
  topic, a writer that changed) by assigning them to itself. A new writer waits
  until it leads them before it starts any coordinator
  (:meth:`PartitionSharing.lead_writer_partitions`). A member never claims one, even
  when the metadata store says it owns it (a run of it before a restart was the
  writer): it gives it to the broker the writer assigned it to.
* Every broker measures the bytes per second (appended and read) of each partition it
  leads, smoothed over about :data:`RATE_WINDOW_S`, and reports them to the metadata
  store every pass.
* The writer balances when no move is in flight (:func:`.balancing.plan_moves`). Under
  load (the partitions' bytes per second add up to
  :data:`~.balancing.BALANCE_FLOOR_BYTES_S` or more) it moves partitions from the
  broker with the most bytes per second to the one with the fewest while a move lowers
  the busiest one's load by more than :data:`~.balancing.BALANCE_MARGIN` of it; only
  while every broker's bytes per second are steady (within that margin of the last
  pass: not while a load ramps up), every owner has measured its partitions, and
  :data:`SETTLE_S` after the last move at the earliest; then cold partitions even out
  the counts. An idle cluster is balanced by partition
  count instead (every broker, a joining one too, leads its share).
* An owner whose partition is assigned to another live broker hands it over: it
  releases it (appends refused, everything copied into partition objects, its cache
  closed), then records the new owner by compare-and-set, which opens it. Handovers run
  in the background, one partition at a time: the passes (a takeover among them) do
  not wait for them.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections import defaultdict
from collections.abc import Callable

from floe.storage.interface import StorageError, TopicMeta, WriteGuard
from floe.storage.local.meta import topics_from_doc
from floe.storage.object import layout
from floe.storage.object.balancing import holds_moves, plan_moves
from floe.storage.object.bucket import Bucket, describe
from floe.storage.object.store import ObjectStore, stays_with_writer
from floe.tasks import cancel_and_wait
from floe.types import PartitionId, TopicName

log = logging.getLogger(__name__)

Key = tuple[TopicName, PartitionId]

RATE_WINDOW_S = 5.0
"""The smoothing window of a partition's bytes per second (exponential: the rate of the
last pass weighs its share of the window)."""
MOVE_POLL_S = 0.25
"""How often each broker reads the metadata store for moves waiting for it (a partition
to hand over, or to open) between passes."""
LAPSE_POLL_S = 0.1
"""How often the writer reads it while another broker refuses connections: that broker
most likely died, and its partitions are taken over as soon as its lease lapses."""
SETTLE_S = 2 * RATE_WINDOW_S
"""After a move by bytes, the time the writer waits before it plans the next: the moved
partition's new owner reports its rate by then."""
WAIT_LOG_EVERY = 10
"""While a new writer waits for its partitions, it logs the first attempt and every
this many after."""
WAIT_LOGGED_S = 3 * SETTLE_S
"""How long the balancing waits with a move due before it logs why
(``cluster.balancing_waits``)."""


def read_topics(bucket: Bucket) -> dict[TopicName, TopicMeta] | None:
    """The writer's topics as the bucket holds them (None: no topic was ever created;
    blocking).

    Raises:
        StorageError: the bucket could not be read.
    """
    try:
        doc = bucket.get(layout.TOPICS_KEY)
    except FileNotFoundError:
        return None
    except Exception as exc:
        raise StorageError(f"cannot read the topics in the bucket: {describe(exc)}") from exc
    return dict(topics_from_doc(doc))


class PartitionSharing:
    """See the module docstring. Owned by the event loop: :meth:`start` starts the
    passes (every ``interval_s``), :meth:`stop` ends them."""

    def __init__(
        self,
        store: ObjectStore,
        guard: WriteGuard,
        me: int,
        interval_s: float,
        *,
        refusing: Callable[[], frozenset[int]] = frozenset,
        held: Callable[[], frozenset[Key]] = frozenset,
    ) -> None:
        """``refusing``: the other brokers whose Kafka port refuses connections
        (:class:`floe.cluster.reach.Reach`); the writer stages their partitions.
        ``held``: the partitions an operator placed (Kafka's reassignment API), which
        the writer's balancing leaves where they are."""
        self._store = store
        self._guard = guard
        self._me = me
        self._interval_s = interval_s
        self._refusing = refusing
        self._held = held
        self._task: asyncio.Task[None] | None = None
        self._handing: asyncio.Task[None] | None = None
        """The handovers under way (:meth:`_start_handovers`)."""
        self._moving: Key | None = None
        """The partition being handed over: released here, still owned here until the
        new owner is recorded (never opened here again meanwhile)."""
        self._handover_failing: str | None = None
        """Why the last handovers failed (logged once per distinct reason)."""
        self._mirroring: asyncio.Future[None] | None = None
        self._measured: dict[Key, tuple[int, float]] = {}
        """Each led partition's bytes moved at the last pass, and when."""
        self.rates: dict[Key, float] = {}
        """Each led partition's bytes per second, smoothed."""
        self._settled_at = 0.0
        """When the writer may plan moves by bytes again (:data:`SETTLE_S`)."""
        self._due: frozenset[Key] = frozenset()
        """The moves waiting for this broker when the last pass started."""
        self._totals: dict[int, float] = {}
        """Each live broker's bytes per second at the last pass: the writer moves
        partitions by bytes only while these are steady (not while a load ramps up)."""
        self._unfenced: dict[str, int] = {}
        """WAL streams fenced in the metadata store whose takeover is not recorded in the
        bucket yet, with their epoch (:meth:`_record_fences`)."""
        self._waiting: tuple[float, str | None] | None = None
        """Since when the writer's balancing passes planned no move though one was due,
        and the reason last logged (:meth:`_waits`); None while it is not waiting."""

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="floe-partition-sharing")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
        await cancel_and_wait(self._handing)
        self._handing = None
        self._store.keep_staged(())

    async def _run(self) -> None:
        """A pass every ``interval_s``, and at once when the metadata store, read every
        :data:`MOVE_POLL_S` (:data:`LAPSE_POLL_S` while a broker refuses connections),
        shows a move waiting for this broker that the last pass did not see
        (:meth:`_moves`): a handover then takes a fraction of a second, not up to a pass
        on each side, and the writer starts taking a dead broker's partitions over as
        soon as the store sees it gone."""
        failing: str | None = None
        next_pass = 0.0
        while True:
            try:
                due = time.monotonic() >= next_pass
                if not due:  # between passes: read the metadata store for new moves
                    await asyncio.to_thread(self._guard.refresh)
                moves = self._moves()
                if due or moves - self._due:  # one that failed waits for the next pass
                    next_pass = time.monotonic() + self._interval_s
                    self._due = moves
                    await self.step()
                if not self._store.member:
                    self._stage()
                failing = None
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                reason = describe(exc)
                if reason != failing:  # once per distinct failure, not every pass
                    log.warning("cluster.sharing_pass_failed error=%s (retried)", reason)
                failing = reason
            lapsing = not self._store.member and self._refusing()
            await asyncio.sleep(LAPSE_POLL_S if lapsing else MOVE_POLL_S)

    def _moves(self) -> frozenset[Key]:
        """The moves waiting for this broker as last seen: the partitions it leads and
        is to hand over, those it owns and does not lead yet, and (the writer) those
        whose owner is not live any more, to take over."""
        moves = frozenset(k for k, _ in self._handovers()) | {
            k for k in self._unled() if self._guard.owner(*k) == self._me
        }
        if not self._store.member:
            live = set(self._guard.live())
            moves |= {k for k in self._unled() if self._guard.owner(*k) not in live}
        return moves

    def _stage(self) -> None:
        """The writer stages the partitions of brokers that refuse connections (they
        most likely died: the takeover then opens them from that copy, not restored after
        the lapse), and drops the stages of those it does not take over (their owner is
        live and takes connections again, or they are led here already)."""
        refusing = self._refusing()
        live = set(self._guard.live())
        doomed, dead = [], []
        for key in self._unled():
            owner = self._guard.owner(*key)
            if owner in refusing:
                doomed.append(key)
            if owner in refusing or owner not in live:
                dead.append(key)
        if doomed:
            self._store.stage(doomed)
        self._store.keep_staged(dead)

    def _handovers(self) -> list[tuple[Key, int]]:
        """The led partitions assigned to another live broker, with that broker (the
        writer keeps those of the topics that stay with it, whatever an assignment from
        before the topic became one says)."""
        live = set(self._guard.live())
        found = []
        for key in self._store.led():
            to = self._guard.assigned(*key)
            if to is None or to == self._me or to not in live:
                continue
            meta = self._store.topic(key[0])
            if not self._store.member and meta is not None and stays_with_writer(meta):
                continue
            found.append((key, to))
        return found

    async def step(self) -> None:
        """One pass: mirror the topics (a member), start handing over the partitions
        assigned elsewhere, open those owned here (a member gives the writer's away),
        take over dead brokers' and balance (the writer)."""
        if self._store.member:
            await self.refreshed()
        self._measure()
        self._start_handovers()
        await self._open_owned()
        if self._store.member:
            await self._give_writer_partitions()
        if not self._store.member:
            await self._take_over()
            self._recall()
            await self._balance()

    def _measure(self) -> None:
        """Update the led partitions' rates and report them."""
        now = time.monotonic()
        rates: dict[Key, float] = {}
        measured: dict[Key, tuple[int, float]] = {}
        for key, moved in self._store.traffic().items():
            measured[key] = (moved, now)
            before = self._measured.get(key)
            if before is None or moved < before[0] or now <= before[1]:
                continue  # opened since the last pass: measured from now on
            current = (moved - before[0]) / (now - before[1])
            weight = min(1.0, (now - before[1]) / RATE_WINDOW_S)
            previous = self.rates.get(key, current)
            rates[key] = previous + weight * (current - previous)
        self._measured = measured
        self.rates = rates
        self._guard.report_load(rates)

    async def refreshed(self) -> None:
        """A member reads the writer's topics from the bucket now; concurrent callers
        share one read.

        Raises:
            Exception: the bucket could not be read (the topics known stay).
        """
        if self._mirroring is None:
            self._mirroring = asyncio.ensure_future(self._mirror())
        try:
            await asyncio.shield(self._mirroring)
        finally:
            if self._mirroring is not None and self._mirroring.done():
                self._mirroring = None

    async def _mirror(self) -> None:
        topics = await asyncio.to_thread(read_topics, self._store.bucket)
        if topics is not None:
            self._store.mirror_topics(topics)

    def _unled(self) -> list[Key]:
        """The partitions of every known topic that this broker does not lead."""
        return [
            (meta.name, PartitionId(p))
            for meta in self._store.topics().values()
            for p in range(meta.partitions)
            if not self._store.leads(meta.name, PartitionId(p))
        ]

    async def _open_owned(self, among: list[Key] | None = None) -> None:
        """Claim and open the partitions (of ``among``, None: all) owned here and not
        led yet; a member never the writer's (it gives them away)."""
        mine = [
            k
            for k in (self._unled() if among is None else among)
            if self._guard.owner(*k) == self._me
            and k != self._moving
            and not (self._store.member and self.writer_only(k[0]))
        ]
        if mine:
            await self._open(await asyncio.to_thread(self._guard.claim, mine), "assigned")

    def writer_only(self, topic: TopicName) -> bool:
        """Whether ``topic``'s partitions stay with the writer (:func:`stays_with_writer`;
        False for a topic not known here)."""
        meta = self._store.topic(topic)
        return meta is not None and stays_with_writer(meta)

    async def _give_writer_partitions(self) -> None:
        """A member gives away the writer's partitions that the metadata store says it
        owns and it does not lead (a run of it before a restart was the writer): each
        becomes the broker's the writer assigned it to (its recall), by compare-and-set
        from this broker's ownership. It never claims them, so it never leads them."""
        live = set(self._guard.live())
        for key in self._unled():
            to = self._guard.assigned(*key)
            if (
                self._guard.owner(*key) != self._me
                or not self.writer_only(key[0])
                or to is None
                or to == self._me
                or to not in live
            ):
                continue
            moved = await asyncio.to_thread(self._guard.hand_over, key, to)
            log.info(
                "cluster.writer_partition_given broker=%d partition=%s-%d to=%d moved=%s",
                self._me, key[0], key[1], to, moved,
            )  # fmt: skip

    def _writer_unled(self) -> list[Key]:
        """The writer's partitions (:func:`stays_with_writer`) not led here."""
        return [k for k in self._unled() if self.writer_only(k[0])]

    async def lead_writer_partitions(self) -> None:
        """A new writer, before it starts any coordinator (they read the internal
        partitions at start): lead every partition of the topics that stay with it.
        Each attempt assigns those not led here to this broker (a live owner hands them
        over, a member gives them), claims those it owns and takes over those of dead
        owners; a live owner's wait until it gives them up, or its registration lapses
        (a broker killed a moment ago: within one session timeout). It never gives up;
        it logs the first attempt that found some missing, then one in
        :data:`WAIT_LOG_EVERY`.
        """
        started = time.monotonic()
        attempts = 0
        while True:
            try:
                await asyncio.to_thread(self._guard.refresh)
                self._recall()
                await self._open_owned(self._writer_unled())
                await self._take_over(self._writer_unled())
                missing, failure = self._writer_unled(), ""
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                missing, failure = self._writer_unled(), describe(exc)
            if not missing and not failure:
                break
            if attempts % WAIT_LOG_EVERY == 0:  # a dead owner's lapse is a normal wait
                log.log(
                    logging.INFO if attempts == 0 else logging.WARNING,
                    "cluster.waiting_for_internal_partitions broker=%d attempt=%d "
                    "partitions=%s owners=%s error=%s (coordinators start once this broker "
                    "leads them: a live owner gives them up, a dead one's registration "
                    "lapses within the session timeout)",
                    self._me, attempts + 1, ",".join(f"{t}-{p}" for t, p in missing),
                    ",".join(str(self._guard.owner(*k)) for k in missing), failure or "none",
                )  # fmt: skip
            attempts += 1
            await asyncio.sleep(self._interval_s)
        if attempts:
            log.info(
                "cluster.internal_partitions_led broker=%d attempts=%d ms=%.0f",
                self._me, attempts + 1, (time.monotonic() - started) * 1000,
            )  # fmt: skip

    async def _take_over(self, among: list[Key] | None = None) -> None:
        """The writer claims the partitions (of ``among``, None: all) of dead owners once
        it fenced their streams (a broker whose lease lapsed and that rejoined before
        the fence is live again and keeps them: its stream is not fenced), and those
        with no owner (an assignment that never got recorded; one recorded a moment ago
        stays its new owner's: claims run after assignments in the metadata store's
        queue, and skip live owners). It assigns those it took to itself: the dead
        broker, started again, gets its share back from the balancing once it serves
        (it reports its load once it listens), not at its registration, seconds before
        it listens.

        It records the takeovers of the dead brokers' WAL streams in the bucket
        (:meth:`_record_fences`) while the partitions open, not before the claim: a WAL
        object a dead broker had in flight counts only up to where its ownership epoch
        ended, which the claim records, so the record only marks such objects for
        deletion. Under a slow bucket its LIST, GET and PUT took 3.6 s of one member
        kill's outage."""
        await self._record_fences()
        live = set(self._guard.live())
        orphans = [
            k
            for k in (self._unled() if among is None else among)
            if self._guard.owner(*k) not in live
        ]
        if not orphans:
            return
        dead = sorted({str(o) for k in orphans if (o := self._guard.owner(*k)) is not None})
        steps = [time.monotonic()]
        fences = await asyncio.to_thread(self._guard.fence_streams, dead)
        self._unfenced.update(fences)
        steps.append(time.monotonic())
        orphans = [k for k in orphans if (o := self._guard.owner(*k)) is None or str(o) in fences]
        won = await asyncio.to_thread(self._guard.claim, orphans)
        if won:  # led here now: an assignment to the dead broker must not hand them back
            self._guard.plan(dict.fromkeys(won, self._me))  # when it registers again
            await asyncio.to_thread(self._guard.refresh)  # recorded before the next pass
        steps.append(time.monotonic())
        recording = asyncio.ensure_future(self._record_fences())
        try:
            await self._open(won, "taken_over")
        finally:
            await recording
        steps.append(time.monotonic())
        if won:
            fence_ms, claim_ms, open_ms = ((b - a) * 1000 for a, b in itertools.pairwise(steps))
            log.info(
                "cluster.partitions_taken_over broker=%d from=%s partitions=%d ms=%.0f "
                "fence_ms=%.0f claim_ms=%.0f open_ms=%.0f",
                self._me, ",".join(dead) or "none", len(won), (steps[-1] - steps[0]) * 1000,
                fence_ms, claim_ms, open_ms,
            )  # fmt: skip

    async def _record_fences(self) -> None:
        """Record in the bucket the WAL streams fenced in the metadata store whose
        takeover is not recorded yet (:meth:`ObjectStore.fence_stream`); one that fails
        is logged and tried again at the next pass."""
        for stream, epoch in sorted(self._unfenced.items()):
            try:
                await self._store.fence_stream(stream, epoch)
            except StorageError as exc:
                log.warning(
                    "cluster.stream_fence_unrecorded stream=%s epoch=%d error=%s (tried again "
                    "at the next pass; its partitions are served meanwhile)",
                    stream, epoch, exc,
                )  # fmt: skip
                continue
            if self._unfenced.get(stream) == epoch:
                del self._unfenced[stream]

    def _start_handovers(self) -> None:
        """Hand over the partitions assigned elsewhere (:meth:`_handovers`) in the
        background, unless the last handovers are still under way. A release waits for
        the upload pass and copies the partition's tail into partition objects: 83 ms
        at the median under load, but 5.5 and 16.8 s in a slow spell of the bucket, and
        a dead broker's takeover waited for them when the pass ran them first."""
        if self._handing is not None and not self._handing.done():
            return
        if self._handovers():
            self._handing = asyncio.create_task(self._hand_over(), name="floe-handover")

    async def _hand_over(self) -> None:
        """Hand over each partition assigned elsewhere, one at a time, each as its
        assignment stands then (a release takes seconds in a slow spell). A failure
        ends the handovers, logged once per distinct reason (the next pass starts them
        again); it is never raised: :meth:`stop` must not fail with it."""
        try:
            while pending := self._handovers():
                await self._hand_over_one(*pending[0])
        except Exception as exc:
            reason = describe(exc)
            if reason != self._handover_failing:
                log.warning("cluster.handover_failed error=%s (retried)", reason)
            self._handover_failing = reason
        else:
            self._handover_failing = None

    async def _hand_over_one(self, key: Key, to: int) -> None:
        started = time.monotonic()
        self._moving = key
        try:
            await self._store.release(*key)
            moved = await asyncio.to_thread(self._guard.hand_over, key, to)
        finally:
            self._moving = None
        log.info(
            "cluster.partition_handed_over broker=%d partition=%s-%d to=%d moved=%s ms=%.0f",
            self._me, key[0], key[1], to, moved, (time.monotonic() - started) * 1000,
        )  # fmt: skip

    def _recall(self) -> None:
        """Assign to the writer the partitions of the topics that stay with it that other
        brokers lead (a topic just made a dead-letter topic; a new writer, whose
        predecessor recalled them to itself): their owners hand them over."""
        moves = {
            (meta.name, PartitionId(p)): self._me
            for meta in self._store.topics().values()
            if stays_with_writer(meta)
            for p in range(meta.partitions)
            if not self._store.leads(meta.name, PartitionId(p))
            and self._guard.assigned(meta.name, PartitionId(p)) != self._me
        }
        if moves:
            self._guard.plan(moves)
            log.info(
                "cluster.partitions_recalled broker=%d partitions=%s (internal, dead-letter "
                "and routed table topics' partitions are the writer's: their owners hand "
                "them over)",
                self._me, ",".join(f"{t}-{p}" for t, p in sorted(moves)),
            )  # fmt: skip

    async def _balance(self) -> None:
        """Plan moves (:func:`plan_moves`) when no move is in flight (an assignment to a
        live broker that does not own it yet); the partitions an operator placed
        (``held``) stay where they are, and count for their broker."""
        live = self._guard.live()
        if len(live) < 2:
            return
        led: dict[int, list[Key]] = {b: [] for b in live}
        held = self._held()
        for meta in self._store.topics().values():
            if stays_with_writer(meta):
                continue
            for p in range(meta.partitions):
                key = (meta.name, PartitionId(p))
                owner = self._guard.owner(*key)
                wanted = self._guard.assigned(*key)
                if wanted is not None and wanted in led and wanted != owner:
                    self._settled_at = time.monotonic() + SETTLE_S
                    self._waits(f"a move in flight: {key[0]}-{key[1]} to broker {wanted}")
                    return
                if owner in led:
                    led[owner].append(key)
        load, serving = await asyncio.to_thread(self._guard.loads)
        if not serving.issuperset(led):  # a broker is still starting (it reports once open)
            silent = ",".join(str(b) for b in sorted(set(led) - serving))
            self._waits(f"no load report from broker {silent}")
            return
        # an owner that opened a partition just now has not measured it yet
        measured = all(k in load for keys in led.values() for k in keys)
        totals = {b: sum(load.get(k, 0.0) for k in keys) for b, keys in led.items()}
        before, self._totals = self._totals, totals
        moves, by = plan_moves(led, load, held)
        if not moves:
            self._waiting = None
            return
        waits = by == "bytes" and holds_moves(
            led, totals, before, measured=measured, settling=time.monotonic() < self._settled_at
        )
        if waits:
            self._waits(waits)
            return
        self._waiting = None
        self._guard.plan(moves)
        self._settled_at = time.monotonic() + SETTLE_S
        to: dict[int, int] = defaultdict(int)
        for broker in moves.values():
            to[broker] += 1
        log.info(
            "cluster.balancing broker=%d by=%s moves=%d to=%s mb_per_s=%s",
            self._me, by, len(moves), ",".join(f"{b}:{n}" for b, n in sorted(to.items())),
            ",".join(f"{b}:{t / 1e6:.2f}" for b, t in sorted(totals.items())),
        )  # fmt: skip

    def _waits(self, reason: str) -> None:
        """Note that a balancing pass planned no move for ``reason``; logged once when
        the balancing has waited :data:`WAIT_LOGGED_S` (a joining broker gets no share
        meanwhile), and again when the reason changes after that."""
        now = time.monotonic()
        since, logged = self._waiting or (now, None)
        if now - since >= WAIT_LOGGED_S and reason != logged:
            log.info(
                "cluster.balancing_waits broker=%d reason=%s waited_s=%.0f",
                self._me, reason, now - since,
            )  # fmt: skip
            logged = reason
        self._waiting = (since, logged)

    async def _open(self, keys: list[Key], why: str) -> None:
        live = [(name, p) for name, p in keys if self._store.topic(name) is not None]
        for (name, p), plog in zip(live, await self._store.acquire_all(live), strict=True):
            log.info(
                "cluster.partition_led broker=%d partition=%s-%d reason=%s log_end_offset=%d",
                self._me, name, p, why, plog.log_end_offset,
            )  # fmt: skip
