"""The etcd metadata store: every fact is a key under one prefix, and liveness is etcd's
own lease clock, so brokers with skewed clocks agree.

Keys (``P`` is the prefix, ``floe/`` by default; values are compact JSON):

* ``P brokers/<id>``: a live broker (``broker_id``, ``host``, ``port``, ``rack``, and
  the ``token`` of the store object that registered it), attached to an etcd lease of
  the registration's TTL: the broker's session. Registering is one transaction that
  creates the key only if it is absent (``create_revision == 0``); a key of the same
  token (this store registering again, or retrying a register whose answer was lost)
  is replaced. Registering again while this store's session lives (a new address)
  keeps its etcd lease, refreshed. Otherwise (the first time, after it lapsed, or for
  another broker id) a new one is granted and the previous one revoked, which ends the
  previous session's named leases too (after a lapse they had lapsed with it). keepalive
  refreshes the etcd lease, unregister revokes it: etcd deletes the key, and every named
  lease key of the session, when it expires or is revoked.
* ``P owners/<topic>/<partition>``: ``{"epoch", "owner"}``, no lease. A claim is one
  transaction comparing the key's value with the expected ownership (or
  ``create_revision == 0`` for None). Values are written in one canonical form; one
  in another form that decodes to the expected ownership is claimed on a second
  transaction comparing its ``mod_revision``.
* ``P committed/<topic>/<partition>``: the partition's committed end offset (decimal),
  no lease. A commit is a transaction comparing the owner's key with the committing
  broker's ownership and this key with the end it last saw (``create_revision == 0``
  for none), for :data:`~floe.cluster.interface.COMMITS_PER_TXN` partitions at most;
  when one of them does not hold, the keys are read back and the others committed
  again without it.
* ``P manifests/<topic>/<partition>``: the bucket key of the partition's manifest
  (text), no lease. Setting pointers is a transaction comparing each owner's key with
  the setting broker's ownership and putting each pointer, batched and retried without
  the refused ones as a commit is.
* ``P leases/<name>``: the named lease ``{"epoch", "holder"}``. Taken by this store for
  the broker it registered, the key is attached to the session's etcd lease (no grant
  of its own): keepalive renews it, renew of it refreshes the whole session, and it
  goes with the registration. Taken for any other holder (a store that did not register
  it: tools, tests), it gets an etcd lease of its own TTL, created once and dying with
  it. renew and release act only when the key still holds that exact ``(holder,
  epoch)``; release revokes a lease of its own, and deletes a session's key in a
  transaction comparing its ``mod_revision`` (revoking would end the session: a key is
  a session's when its etcd lease is the one of its holder's ``brokers/<id>`` key).
* ``P epochs/<name>``: the last epoch given for ``name``, without a lease, so epochs
  keep growing after the lease key vanished. acquire writes both keys in one
  transaction guarded by both keys' revisions: epochs start at 1 and every new holder
  gets a larger one. (These keys are never deleted: one small key per name ever used.)

etcd lease TTLs are whole seconds, at least its minimum (about 2 s with default
timings): a TTL is rounded up. A renewal (keepalive, renew, acquire by the holder)
extends a lease by the TTL it was granted with; the ``ttl_s`` of a renewal is not used
(nor that of an acquire into a session: the registration's TTL counts).

Client: etcd's gRPC API, through ``grpcio`` and the messages ``python3-etcd3`` generated
from etcd's ``rpc.proto`` (not its client: it marks a failed endpoint dead for minutes).
etcd's HTTP/JSON gateway (``etcd3gw``, used before 2026-12-04) costs three times as much
per call: an eight-partition commit took 3.15 ms through the gateway and 0.99 ms over gRPC
on the same host, a one-key range 1.61 against 0.56 ms, and the client's CPU a third. A
commit is on the path of every acks=all produce of a cluster. How a failed call leaves
the connection: :mod:`~floe.cluster.etcd.channel`. Only a store on etcd imports this
module (:func:`floe.cluster.url.open_metadata_store`), and gRPC with it.

Timeouts and failures: every call has one deadline of ``timeout_s`` (shared by the
requests it makes). etcd unreachable, timing out or refusing a request becomes
:class:`MetadataUnavailableError` with a one-line message naming the endpoint. A call
is never retried (a write whose answer was lost may have been applied: read before
deciding again); with several endpoints, a failed call moves this store to the next
one for the calls after it.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Concatenate, ParamSpec, TypeVar

from etcd3.etcdrpc import rpc_pb2

from floe.cluster.etcd import wire
from floe.cluster.etcd.channel import Connection, LeaseNotFoundError, Stubs
from floe.cluster.interface import (
    COMMITS_PER_TXN,
    EPOCH_ENDS_KEPT,
    BrokerIdTakenError,
    BrokerInfo,
    Lease,
    LeaseLostError,
    LogCommit,
    ManifestCommit,
    MetadataUnavailableError,
    Ownership,
    RegistrationLapsedError,
    decode_load,
    encode_load,
)
from floe.errors import ConfigError
from floe.types import PartitionId, TopicName

P = ParamSpec("P")
R = TypeVar("R")

_ATTEMPTS = 3
"""acquire and claim: how many read-then-transact rounds a lost race is retried before
None."""


def _bounded(
    method: Callable[Concatenate[EtcdMetadataStore, P], R],
) -> Callable[Concatenate[EtcdMetadataStore, P], R]:
    """Give a public method one deadline of ``timeout_s`` for all its requests."""

    @functools.wraps(method)
    def bounded(self: EtcdMetadataStore, /, *args: P.args, **kwargs: P.kwargs) -> R:
        self._deadline = time.monotonic() + self._timeout_s
        return method(self, *args, **kwargs)

    return bounded


class EtcdMetadataStore:
    """See the module docstring and :class:`~floe.cluster.interface.MetadataStore`.

    Owns one gRPC channel (:class:`~floe.cluster.etcd.channel.Connection`), used by one
    thread at a time (its owner), and the broker id and registration lease (the broker's
    session) while registered; the channel is closed by :meth:`close`. Nothing of the
    store runs in the background (gRPC's own threads serve the channel).
    """

    def __init__(self, endpoints: str, prefix: str = "floe/", timeout_s: float = 10.0) -> None:
        """Make a client of the etcd cluster at ``endpoints`` (``host:port`` or several,
        comma-separated). Nothing is sent yet: a wrong endpoint shows on the first call.

        Raises:
            ConfigError: an endpoint is not ``host:port``, or ``timeout_s`` is not
                positive.
        """
        if not timeout_s > 0:
            raise ConfigError(f"metadata store timeout {timeout_s} s is not positive")
        parsed = [wire.endpoint(e) for e in endpoints.split(",") if e.strip()]
        if not parsed:
            raise ConfigError("no etcd endpoint given (host:port, comma-separated)")
        self._connection = Connection(parsed, timeout_s)
        self._prefix = prefix.encode()
        self._timeout_s = timeout_s
        self._deadline = 0.0  # of the public call under way (see _bounded)
        # a token per store, not per registration: a register whose answer was lost
        # (applied or not) can be retried without finding its own key in the way
        self._token = secrets.token_hex(8)
        self._registration: int | None = None  # the etcd lease id, until it is lost
        # registered as, until unregister (also while its lease has lapsed): the named
        # leases this store takes for it are in its session
        self._broker_id: int | None = None

    # -- brokers ---------------------------------------------------------------------

    @_bounded
    def register(self, broker: BrokerInfo, ttl_s: float) -> None:
        key = self._key("brokers", str(broker.broker_id))
        value = wire.dumps(
            {"broker_id": broker.broker_id, "host": broker.host, "port": broker.port,
             "rack": broker.rack, "token": self._token}
        )  # fmt: skip
        kept = self._registration if broker.broker_id == self._broker_id else None
        if kept is not None and self._refresh(kept) <= 0:
            kept = None  # it lapsed: a new session
        lease = kept if kept is not None else self._grant(ttl_s)  # kept: the session goes on
        try:
            done = self._txn(
                [wire.created(key, 0)], [wire.put(key, value, lease)], [wire.range_request(key)]
            )
            replaced = None
            if not done.succeeded:
                (found,) = done.ranges[0]  # it exists: that is why the compare failed
                if json.loads(found.value).get("token") != self._token:
                    raise BrokerIdTakenError(
                        f"broker id {broker.broker_id} is registered and alive"
                    )
                # this store's own key (registering again, or an earlier answer lost)
                done = self._txn(
                    [wire.modified(key, found.mod_revision)], [wire.put(key, value, lease)]
                )
                if not done.succeeded:
                    raise BrokerIdTakenError(f"broker id {broker.broker_id} changed meanwhile")
                replaced = found.lease
        except BaseException:
            if kept is None:
                self._revoke_quietly(lease)
            raise
        previous, self._registration = self._registration, lease
        self._broker_id = broker.broker_id
        for stale in {previous, replaced} - {lease}:
            if stale is not None:
                self._revoke_quietly(stale)  # a lapsed session, or another broker id's

    @_bounded
    def keepalive(self) -> None:
        if self._registration is None:
            raise LeaseLostError("not registered")
        if self._refresh(self._registration) <= 0:
            self._registration = None
            raise LeaseLostError("the registration lease expired")

    @_bounded
    def unregister(self) -> None:
        if self._registration is not None:
            self._revoke(self._registration)  # its named leases' keys go with it
            self._registration = None
        self._broker_id = None

    @_bounded
    def live_brokers(self) -> list[BrokerInfo]:
        found = []
        for kv in self._range_prefix(self._key("brokers", "")):
            b = json.loads(kv.value)
            found.append(BrokerInfo(b["broker_id"], b["host"], b["port"], b.get("rack")))
        return sorted(found, key=lambda b: b.broker_id)

    # -- partition ownership ---------------------------------------------------------

    @_bounded
    def owners(self) -> dict[tuple[TopicName, PartitionId], Ownership]:
        start = len(self._key("owners", ""))
        found = {}
        for kv in self._range_prefix(self._key("owners", "")):
            topic, partition = kv.key[start:].decode().rsplit("/", 1)
            found[TopicName(topic), PartitionId(int(partition))] = wire.ownership(kv.value)
        return found

    @_bounded
    def claim(
        self,
        topic: TopicName,
        partition: PartitionId,
        owner: int,
        expected: Ownership | None,
    ) -> Ownership | None:
        key = self._key("owners", topic, str(partition))
        claimed = Ownership(owner, 1 if expected is None else expected.epoch + 1)
        put = wire.put(key, wire.dumps({"epoch": claimed.epoch, "owner": claimed.owner}))
        if expected is None:
            return claimed if self._txn([wire.created(key, 0)], [put]).succeeded else None
        end_key = self._key("committed", topic, str(partition))
        for _ in range(_ATTEMPTS):
            owned, ended = self._read(key, end_key)
            if not owned or wire.ownership(owned[0].value) != expected:
                return None  # it changed meanwhile
            # where the ended epoch ended, in the same transaction as the move: the
            # compares fail if a commit at that epoch moved the end since it was read
            end = int(ended[0].value) if ended else 0
            compare = [
                wire.modified(key, owned[0].mod_revision),
                wire.modified(end_key, ended[0].mod_revision)
                if ended
                else wire.created(end_key, 0),
            ]
            success = [
                put,
                wire.put(self._epoch_key(topic, partition, expected.epoch), str(end).encode()),
                wire.delete(self._epoch_key(topic, partition, expected.epoch - EPOCH_ENDS_KEPT)),
            ]
            if self._txn(compare, success).succeeded:
                return claimed
        return None  # raced every time: the caller reads and decides again

    def _epoch_key(self, topic: TopicName, partition: PartitionId, epoch: int) -> bytes:
        return self._key("epoch_ends", topic, str(partition), str(epoch))

    @_bounded
    def epoch_end(self, topic: TopicName, partition: PartitionId, epoch: int) -> int | None:
        (found,) = self._read(self._epoch_key(topic, partition, epoch))
        return int(found[0].value) if found else None

    @_bounded
    def commit(self, owner: int, commits: Sequence[LogCommit]) -> list[LogCommit]:
        refused: list[LogCommit] = []
        for first in range(0, len(commits), COMMITS_PER_TXN):
            refused += self._commit(owner, list(commits[first : first + COMMITS_PER_TXN]))
        return refused

    def _commit(self, owner: int, todo: list[LogCommit]) -> list[LogCommit]:
        """One transaction for ``todo``; when a condition fails, the keys are read back
        (the failure branch) and the rest is committed again without those refused."""
        refused: list[LogCommit] = []
        while todo:
            compare, success, failure = [], [], []
            for c in todo:
                owned = self._key("owners", c.topic, str(c.partition))
                end = self._key("committed", c.topic, str(c.partition))
                compare.append(wire.value_is(owned, wire.dumps({"epoch": c.epoch, "owner": owner})))
                compare.append(
                    wire.created(end, 0)
                    if c.expected is None
                    else wire.value_is(end, str(c.expected).encode())
                )
                success.append(wire.put(end, str(c.end).encode()))
                failure += [wire.range_request(owned), wire.range_request(end)]
            done = self._txn(compare, success, failure)
            if done.succeeded:
                break
            left: list[LogCommit] = []
            for i, c in enumerate(todo):
                owned_now, end_now = done.ranges[2 * i], done.ranges[2 * i + 1]
                holds = (
                    bool(owned_now)
                    and owned_now[0].value == wire.dumps({"epoch": c.epoch, "owner": owner})
                    and (
                        not end_now
                        if c.expected is None
                        else bool(end_now) and end_now[0].value == str(c.expected).encode()
                    )
                )
                (left if holds else refused).append(c)
            if len(left) == len(todo):  # every condition held when read: raced, try again
                continue
            todo = left
        return refused

    @_bounded
    def committed(self) -> dict[tuple[TopicName, PartitionId], int]:
        start = len(self._key("committed", ""))
        found = {}
        for kv in self._range_prefix(self._key("committed", "")):
            topic, partition = kv.key[start:].decode().rsplit("/", 1)
            found[TopicName(topic), PartitionId(int(partition))] = int(kv.value)
        return found

    @_bounded
    def set_manifests(
        self, owner: int, manifests: Sequence[ManifestCommit]
    ) -> list[ManifestCommit]:
        refused: list[ManifestCommit] = []
        for first in range(0, len(manifests), COMMITS_PER_TXN):
            refused += self._set_manifests(owner, list(manifests[first : first + COMMITS_PER_TXN]))
        return refused

    def _set_manifests(self, owner: int, todo: list[ManifestCommit]) -> list[ManifestCommit]:
        """One transaction for ``todo``; when an owner's key does not hold, the owners'
        keys are read back (the failure branch) and the rest is set again without those
        refused."""
        refused: list[ManifestCommit] = []
        while todo:
            compare, success, failure = [], [], []
            for m in todo:
                owned = self._key("owners", m.topic, str(m.partition))
                compare.append(wire.value_is(owned, wire.dumps({"epoch": m.epoch, "owner": owner})))
                success.append(
                    wire.put(self._key("manifests", m.topic, str(m.partition)), m.key.encode())
                )
                failure.append(wire.range_request(owned))
            done = self._txn(compare, success, failure)
            if done.succeeded:
                break
            left: list[ManifestCommit] = []
            for m, owned_now in zip(todo, done.ranges, strict=True):
                mine = wire.dumps({"epoch": m.epoch, "owner": owner})
                (left if owned_now and owned_now[0].value == mine else refused).append(m)
            if len(left) == len(todo):  # every condition held when read: raced, try again
                continue
            todo = left
        return refused

    @_bounded
    def manifests(self) -> dict[tuple[TopicName, PartitionId], str]:
        start = len(self._key("manifests", ""))
        found = {}
        for kv in self._range_prefix(self._key("manifests", "")):
            topic, partition = kv.key[start:].decode().rsplit("/", 1)
            found[TopicName(topic), PartitionId(int(partition))] = kv.value.decode()
        return found

    @_bounded
    def forget(self, topic: TopicName) -> None:
        deletes = []
        for kind in ("owners", "assign", "committed", "epoch_ends", "manifests"):
            start = self._key(kind, topic, "")
            deletes.append(wire.delete(start, wire.prefix_end(start)))
        self._txn([], deletes)

    @_bounded
    def assignments(self) -> dict[tuple[TopicName, PartitionId], int]:
        start = len(self._key("assign", ""))
        found = {}
        for kv in self._range_prefix(self._key("assign", "")):
            topic, partition = kv.key[start:].decode().rsplit("/", 1)
            found[TopicName(topic), PartitionId(int(partition))] = int(kv.value)
        return found

    @_bounded
    def assign(self, topic: TopicName, partition: PartitionId, broker: int) -> None:
        self._txn([], [wire.put(self._key("assign", topic, str(partition)), str(broker).encode())])

    @_bounded
    def report_load(self, broker: int, load: Mapping[tuple[TopicName, PartitionId], float]) -> None:
        key = self._key("loads", str(broker))
        self._txn([], [wire.put(key, encode_load(load).encode(), self._registration or 0)])

    @_bounded
    def loads(self) -> dict[int, dict[tuple[TopicName, PartitionId], float]]:
        start = len(self._key("loads", ""))
        return {
            int(kv.key[start:]): decode_load(kv.value)
            for kv in self._range_prefix(self._key("loads", ""))
        }

    # -- named leases ----------------------------------------------------------------

    @_bounded
    def acquire(self, name: str, holder: int, ttl_s: float) -> Lease | None:
        if holder != self._broker_id:
            return self._acquire(name, holder, ttl_s, None)
        # the registered broker's lease goes into its session (the registration's lease)
        lapsed = RegistrationLapsedError(f"broker {holder}'s registration lapsed")
        if self._registration is None:
            raise lapsed
        try:
            return self._acquire(name, holder, ttl_s, self._registration)
        except LeaseNotFoundError:  # a put under the session's lease: it is gone
            raise lapsed from None

    def _acquire(self, name: str, holder: int, ttl_s: float, session: int | None) -> Lease | None:
        """acquire, the key attached to etcd lease ``session`` (None: a lease of its own)."""
        key, counter = self._key("leases", name), self._key("epochs", name)
        for _ in range(_ATTEMPTS):
            held, last = self._read(key, counter)
            epoch = int(last[0].value) if last else 0
            if held:
                current = json.loads(held[0].value)
                if current["holder"] != holder:
                    return None
                if self._refresh(held[0].lease) > 0:  # its holder renews it
                    if session in (None, held[0].lease):
                        return Lease(name, holder, current["epoch"])
                    # taken before this store registered its holder: into the session
                    moved = [wire.put(key, held[0].value, session)]
                    if self._txn([wire.modified(key, held[0].mod_revision)], moved).succeeded:
                        return Lease(name, holder, current["epoch"])
                    continue  # it changed meanwhile: read again
                # its etcd lease just expired (the key goes soon): take it over
                epoch = max(epoch, current["epoch"])
            epoch += 1
            lease = self._grant(ttl_s) if session is None else session
            try:
                done = self._txn(
                    [
                        wire.modified(key, held[0].mod_revision) if held else wire.created(key, 0),
                        wire.modified(counter, last[0].mod_revision)
                        if last
                        else wire.created(counter, 0),
                    ],
                    [
                        wire.put(counter, str(epoch).encode()),
                        wire.put(key, wire.dumps({"epoch": epoch, "holder": holder}), lease),
                    ],
                )
            except BaseException:
                if session is None:
                    self._revoke_quietly(lease)
                raise
            if done.succeeded:
                return Lease(name, holder, epoch)
            if session is None:
                self._revoke_quietly(lease)  # lost a race: read again
        return None

    @_bounded
    def holder(self, name: str) -> Lease | None:
        (held,) = self._read(self._key("leases", name))
        if not held:  # the key goes with its etcd lease
            return None
        current = json.loads(held[0].value)
        return Lease(name, current["holder"], current["epoch"])

    @_bounded
    def renew(self, lease: Lease, ttl_s: float) -> bool:
        held = self._holding(lease)  # a session's: its refresh renews the whole session
        return held is not None and self._refresh(held[0].lease) > 0

    @_bounded
    def release(self, lease: Lease) -> None:
        held = self._holding(lease)
        if held is None:
            return
        kv, in_session = held
        if in_session:  # the key alone: the registration and the other leases stay
            key = self._key("leases", lease.name)
            self._txn([wire.modified(key, kv.mod_revision)], [wire.delete(key)])
        else:
            self._revoke(kv.lease)

    def close(self) -> None:
        self._connection.close()

    # -- helpers ---------------------------------------------------------------------

    def _key(self, *parts: str) -> bytes:
        return self._prefix + "/".join(parts).encode()

    def _holding(self, lease: Lease) -> tuple[wire.KeyValue, bool] | None:
        """``lease``'s key if it still holds exactly ``lease``, and whether it is in its
        holder's session (attached to the etcd lease of its ``brokers/<id>`` key)."""
        key, broker = self._key("leases", lease.name), self._key("brokers", str(lease.holder))
        held, registered = self._read(key, broker)
        if held and json.loads(held[0].value) == {"epoch": lease.epoch, "holder": lease.holder}:
            return held[0], bool(registered) and registered[0].lease == held[0].lease
        return None

    def _range_prefix(self, start: bytes) -> list[wire.KeyValue]:
        return self._ranges([wire.range_of(start, wire.prefix_end(start))])[0]

    def _read(self, *keys: bytes) -> list[list[wire.KeyValue]]:
        """``keys`` as of one revision (each list empty when its key is absent)."""
        return self._ranges([wire.range_of(key) for key in keys])

    def _ranges(self, requests: list[wire.RangeRequest]) -> list[list[wire.KeyValue]]:
        """Read-only: one Range call per request, each after the first at the first's
        revision, so that together they are one consistent snapshot. Never a read-only
        transaction: etcd before 3.5.5 panics when the client of one goes away
        mid-request (etcd-io/etcd#14110; the chaos suite's cut links crashed the
        pinned 3.5.1 that way), while a Range whose client goes away just ends."""
        found: list[list[wire.KeyValue]] = []
        revision = 0
        for request in requests:
            if revision:
                request.revision = revision
            response = self._call(lambda s, t: s.kv.Range(request, timeout=t))  # noqa: B023
            revision = revision or response.header.revision
            found.append(list(response.kvs))
        return found

    def _txn(
        self,
        compare: list[wire.Compare],
        success: list[wire.RequestOp],
        failure: list[wire.RequestOp] | None = None,
    ) -> wire.Txn:
        """One transaction: ``success`` if every ``compare`` holds, else ``failure``."""
        txn = wire.txn_request(compare, success, failure or [])
        return wire.txn_outcome(self._call(lambda s, t: s.kv.Txn(txn, timeout=t)))

    def _grant(self, ttl_s: float) -> int:
        ttl = max(1, math.ceil(ttl_s))
        request = rpc_pb2.LeaseGrantRequest(TTL=ttl)
        granted = self._call(lambda s, t: s.lease.LeaseGrant(request, timeout=t))
        return int(granted.ID)

    def _refresh(self, lease: int) -> int:
        """Refresh etcd lease ``lease``; its new TTL, <= 0 when it is gone."""
        return self._call(functools.partial(_keepalive, lease=lease))

    def _revoke(self, lease: int) -> None:
        """Revoke etcd lease ``lease`` (its keys go with it); gone already is fine."""
        request = rpc_pb2.LeaseRevokeRequest(ID=lease)
        with contextlib.suppress(LeaseNotFoundError):
            self._call(lambda s, t: s.lease.LeaseRevoke(request, timeout=t))

    def _revoke_quietly(self, lease: int) -> None:
        """Revoke a lease nobody needs (it would expire by itself): errors ignored."""
        with contextlib.suppress(MetadataUnavailableError):
            self._revoke(lease)

    def _call(self, request: Callable[[Stubs, float], R]) -> R:
        """One request within the public call's deadline (see
        :meth:`~floe.cluster.etcd.channel.Connection.call`)."""
        return self._connection.call(request, self._deadline)


def _keepalive(stubs: Stubs, timeout_s: float, *, lease: int) -> int:
    """One keep-alive of ``lease`` on a stream of its own; the new TTL (0: it is gone)."""
    replies = stubs.lease.LeaseKeepAlive(
        iter([rpc_pb2.LeaseKeepAliveRequest(ID=lease)]), timeout=timeout_s
    )
    try:
        return int(next(replies).TTL)
    except StopIteration:
        raise MetadataUnavailableError(f"{stubs.where}: no answer to a lease keep-alive") from None
    finally:
        replies.cancel()
