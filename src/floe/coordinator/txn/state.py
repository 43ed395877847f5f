"""Transaction coordinator state: plain data, records, and the one apply function.

The state is what replaying the ``__transaction_state`` journal gives:

* key ``b"\\x00producer-id-block"``: ``{"end": N}``, producer ids below ``N`` are
  reserved (handed out or skipped); after a restart allocation resumes at ``N``, so a
  producer id is never reused;
* key ``b"\\x01" + transactional id``: the :class:`TxnMetadata` as JSON, or a tombstone
  when the transactional id expired.

:func:`apply` is used for replay at start-up and after every durable append alike.
:func:`check_transition` validates a change before its record is written.

Invariant: nothing here does I/O.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import orjson

from floe.errors import ErrorCode, KafkaError

BLOCK_KEY = b"\x00producer-id-block"
TXN_PREFIX = b"\x01"
MAX_EPOCH = 32766
"""Largest usable producer epoch (Kafka: Short.MAX_VALUE - 1); beyond, a new id."""


class TxnState(enum.StrEnum):
    """Kafka's transaction states (names as DescribeTransactions reports them)."""

    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"


PREPARED = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
COMPLETED = (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)

_ALLOWED: dict[TxnState, frozenset[TxnState]] = {
    TxnState.EMPTY: frozenset({TxnState.EMPTY, TxnState.ONGOING}),
    TxnState.ONGOING: frozenset({TxnState.ONGOING, *PREPARED}),
    TxnState.PREPARE_COMMIT: frozenset({TxnState.COMPLETE_COMMIT}),
    TxnState.PREPARE_ABORT: frozenset({TxnState.COMPLETE_ABORT}),
    TxnState.COMPLETE_COMMIT: frozenset({TxnState.EMPTY, TxnState.ONGOING}),
    TxnState.COMPLETE_ABORT: frozenset({TxnState.EMPTY, TxnState.ONGOING}),
}


class InvalidTransitionError(KafkaError):
    """A state change the transaction state machine does not allow."""

    code = ErrorCode.invalid_txn_state


@dataclass(frozen=True, slots=True)
class TxnMetadata:
    """One transactional id's durable state (a value object: changes are copies)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[tuple[str, int]] = frozenset()
    groups: frozenset[str] = frozenset()
    txn_start_ms: int = -1
    last_update_ms: int = -1
    previous_epoch: int = -1
    """The epoch the last InitProducerId bumped from, so that its retry (KIP-360, the
    answer was lost) gets the same answer instead of being fenced."""

    def encode(self) -> bytes:
        return orjson.dumps(
            {
                "producer_id": self.producer_id,
                "producer_epoch": self.producer_epoch,
                "timeout_ms": self.timeout_ms,
                "state": self.state.value,
                "partitions": sorted(self.partitions),
                "groups": sorted(self.groups),
                "txn_start_ms": self.txn_start_ms,
                "last_update_ms": self.last_update_ms,
                "previous_epoch": self.previous_epoch,
            }
        )

    @classmethod
    def decode(cls, transactional_id: str, value: bytes) -> TxnMetadata:
        d = orjson.loads(value)
        return cls(
            transactional_id,
            d["producer_id"],
            d["producer_epoch"],
            d["timeout_ms"],
            TxnState(d["state"]),
            frozenset((t, p) for t, p in d["partitions"]),
            frozenset(d["groups"]),
            d["txn_start_ms"],
            d["last_update_ms"],
            d.get("previous_epoch", -1),
        )


@dataclass
class TxnStateMap:
    """Everything the coordinator knows, as replayed from its journal.

    Ownership: one per :class:`~floe.coordinator.txn.coordinator.TransactionCoordinator`,
    changed only by :func:`apply`.
    """

    txns: dict[str, TxnMetadata] = field(default_factory=dict)
    by_producer_id: dict[int, str] = field(default_factory=dict)
    reserved_until: int = 0
    """Producer ids below this are reserved."""


def txn_key(transactional_id: str) -> bytes:
    return TXN_PREFIX + transactional_id.encode()


def txn_record(md: TxnMetadata) -> tuple[bytes, bytes | None]:
    return txn_key(md.transactional_id), md.encode()


def tombstone(transactional_id: str) -> tuple[bytes, bytes | None]:
    return txn_key(transactional_id), None


def block_record(end: int) -> tuple[bytes, bytes | None]:
    return BLOCK_KEY, orjson.dumps({"end": end})


def apply(state: TxnStateMap, key: bytes, value: bytes | None) -> None:
    """Apply one journal record to ``state`` (replay and live updates alike); keys of
    unknown kinds are ignored so that newer records do not break older readers."""
    if key == BLOCK_KEY:
        if value is not None:
            state.reserved_until = max(state.reserved_until, int(orjson.loads(value)["end"]))
        return
    if not key.startswith(TXN_PREFIX):
        return
    tid = key[len(TXN_PREFIX) :].decode()
    old = state.txns.pop(tid, None)
    if old is not None and state.by_producer_id.get(old.producer_id) == tid:
        del state.by_producer_id[old.producer_id]
    if value is None:
        return
    md = TxnMetadata.decode(tid, value)
    state.txns[tid] = md
    state.by_producer_id[md.producer_id] = tid


def check_transition(old: TxnMetadata, new: TxnMetadata) -> None:
    """Validate a change of one transactional id's state before it is written.

    Raises:
        InvalidTransitionError: the state machine does not allow ``old`` → ``new``, or
            the epoch went backwards.
    """
    if new.state not in _ALLOWED[old.state]:
        raise InvalidTransitionError(
            f"{old.transactional_id}: {old.state} cannot become {new.state}"
        )
    if new.producer_id == old.producer_id and new.producer_epoch < old.producer_epoch:
        raise InvalidTransitionError(f"{old.transactional_id}: producer epoch went backwards")
