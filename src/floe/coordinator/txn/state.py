"""Transaction coordinator state: plain data, records, and the one apply function.

The state is what replaying the ``__transaction_state`` journal gives:

* key ``b"\\x00producer-id-block"``: ``{"end": N}``, producer ids below ``N`` are
  reserved (handed out or skipped); after a restart allocation resumes at ``N``, so a
  producer id is never reused;
* key ``b"\\x01" + transactional id``: the :class:`TxnMetadata` as JSON, or a tombstone
  when the transactional id expired.

:func:`apply` is used for replay at start-up and after every durable append alike; it
decodes and validates a record completely before it changes anything, so a record it
refuses (:class:`TxnRecordError`: a key of an unknown kind, a value that is not what
this version writes) leaves the state as it was, and the coordinator skips it.
:func:`check_transition` validates a change before its record is written.

Invariant: nothing here does I/O.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import orjson

from floe.errors import ErrorCode, FloeError, KafkaError

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


class TxnRecordError(FloeError):
    """A ``__transaction_state`` record this version cannot decode."""


def _int(d: dict[str, object], name: str, default: int | None = None) -> int:
    value = d.get(name, default)
    if type(value) is not int:
        raise TxnRecordError(f"{name} is not an integer: {value!r:.40}")
    return value


class TxnError(KafkaError):
    """A transactional request refused with ``code``."""


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
        """Raises:
        TxnRecordError: not the JSON object this version writes (a missing field, a
            wrong type, an unknown state).
        """
        try:
            d = orjson.loads(value)
        except orjson.JSONDecodeError as exc:
            raise TxnRecordError(f"value is not JSON: {exc}") from None
        if not isinstance(d, dict):
            raise TxnRecordError("value is not a JSON object")
        try:
            state = TxnState(str(d.get("state")))
        except ValueError:
            raise TxnRecordError(f"unknown state {d.get('state')!r:.40}") from None
        partitions, groups = d.get("partitions"), d.get("groups")
        if not isinstance(partitions, list) or not all(
            isinstance(tp, list) and len(tp) == 2 and type(tp[0]) is str and type(tp[1]) is int
            for tp in partitions
        ):
            raise TxnRecordError("partitions is not a list of [topic, partition]")
        if not isinstance(groups, list) or not all(type(g) is str for g in groups):
            raise TxnRecordError("groups is not a list of group ids")
        return cls(
            transactional_id,
            _int(d, "producer_id"),
            _int(d, "producer_epoch"),
            _int(d, "timeout_ms"),
            state,
            frozenset((t, p) for t, p in partitions),
            frozenset(groups),
            _int(d, "txn_start_ms"),
            _int(d, "last_update_ms"),
            _int(d, "previous_epoch", -1),
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


def _block_end(value: bytes) -> int:
    try:
        d = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        raise TxnRecordError(f"value is not JSON: {exc}") from None
    if not isinstance(d, dict):
        raise TxnRecordError("value is not a JSON object")
    return _int(d, "end")


def apply(state: TxnStateMap, key: bytes, value: bytes | None) -> None:
    """Apply one journal record to ``state`` (replay and live updates alike).

    Raises:
        TxnRecordError: the record does not decode (``state`` is unchanged); a key of
            an unknown kind is refused too, so that newer records are skipped, and
            logged, by older readers.
    """
    if key == BLOCK_KEY:
        if value is not None:
            state.reserved_until = max(state.reserved_until, _block_end(value))
        return
    if not key.startswith(TXN_PREFIX):
        raise TxnRecordError(f"unknown record kind {key[:1]!r}")
    try:
        tid = key[len(TXN_PREFIX) :].decode()
    except UnicodeDecodeError:
        raise TxnRecordError("transactional id is not UTF-8") from None
    md = None if value is None else TxnMetadata.decode(tid, value)
    old = state.txns.pop(tid, None)
    if old is not None and state.by_producer_id.get(old.producer_id) == tid:
        del state.by_producer_id[old.producer_id]
    if md is not None:
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
