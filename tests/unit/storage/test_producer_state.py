"""Producer state: idempotence decisions against a reference model, LSO and aborted
transactions, and recovery from the log (clean reopen and simulated kill -9)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from localstore_helpers import NOW, StoreFactory, T, append, broker_config, records

from floe.errors import ErrorCode, KafkaError
from floe.protocol.control import encode_marker
from floe.protocol.records import encode_batch
from floe.storage.local import LocalPartitionLog, LocalStore
from floe.types import Offset, PartitionId

# -- reference model -------------------------------------------------------------------


@dataclass
class ModelProducer:
    epoch: int
    history: list[tuple[int, int, int]] = field(default_factory=list)
    """(first_seq, last_seq, base_offset) of every accepted batch of this epoch."""


def model_decide(model: dict[int, ModelProducer], pid: int, epoch: int, first: int, n: int) -> str:
    """What the broker must answer: 'ok', 'dup:<offset>', or an error name (written
    from the rules, not from the implementation)."""
    p = model.get(pid)
    last = first + n - 1
    if p is None:  # the partition knows every producer (none expires here)
        return "ok" if first == 0 else "out_of_order_sequence_number"
    if epoch < p.epoch:
        return "invalid_producer_epoch"
    if epoch > p.epoch:
        return "ok" if first == 0 else "out_of_order_sequence_number"
    for f, lst, off in p.history[-5:]:
        if (f, lst) == (first, last):
            return f"dup:{off}"
    if p.history and first != p.history[-1][1] + 1:
        return "out_of_order_sequence_number"
    return "ok"


def model_apply(model: dict[int, ModelProducer], op: tuple[int, int, int, int], offset: int
                ) -> None:  # fmt: skip
    pid, epoch, first, n = op
    p = model.get(pid)
    if p is None or epoch > p.epoch:
        p = model[pid] = ModelProducer(epoch)
    p.history.append((first, first + n - 1, offset))


def produce(plog: LocalPartitionLog, pid: int, epoch: int, seq: int, n: int,
            *, txn: bool = False) -> str:  # fmt: skip
    data = encode_batch(
        records(n), base_offset=0, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
        transactional=txn,
    )  # fmt: skip
    end = plog.log_end_offset
    try:
        result = append(plog, data)
    except KafkaError as exc:
        assert plog.log_end_offset == end, "a refused batch must not be appended"
        return exc.code.name
    if plog.log_end_offset == end:
        return f"dup:{result.base_offset}"
    return "ok"


def open_log(store: LocalStore) -> LocalPartitionLog:
    if store.topic(T) is None:
        store.create_topic(T, 1, {})
    return store.partition(T, PartitionId(0))


ops = st.lists(
    st.tuples(
        st.integers(0, 2),  # producer id
        st.integers(0, 2),  # epoch
        st.integers(0, 12),  # first sequence
        st.integers(1, 3),  # records
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(ops=ops)
def test_decisions_match_reference_model(ops: list[tuple[int, int, int, int]], tmp_path_factory:
                                         pytest.TempPathFactory) -> None:  # fmt: skip
    data_dir = tmp_path_factory.mktemp("ps") / "data"
    config = broker_config(tmp_path_factory.mktemp("cfg"))
    store = LocalStore(data_dir, config)
    try:
        plog = open_log(store)
        model: dict[int, ModelProducer] = {}
        for op in ops:
            expected = model_decide(model, *op)
            end = plog.log_end_offset
            got = produce(plog, *op)
            assert got == expected, op
            if got == "ok":
                model_apply(model, op, end)
        # recovery gives the same decisions: replay the ops' retries after a reopen
        store.close()
        store = LocalStore(data_dir, config)
        plog = open_log(store)
        for pid, epoch, seq, n in ops[-5:]:
            assert produce(plog, pid, epoch, seq, n) == model_decide(model, pid, epoch, seq, n)
            break  # one retry suffices: a further 'ok' would change the model
    finally:
        store.close()


# -- examples --------------------------------------------------------------------------


def test_duplicate_answers_original_offset_after_kill(open_store: StoreFactory) -> None:
    plog = open_log(open_store())
    append(plog, encode_batch(records(3), base_offset=0))  # offsets 0..2, no producer
    assert produce(plog, 7, 0, 0, 2) == "ok"  # offsets 3..4
    assert produce(plog, 7, 0, 2, 2) == "ok"  # offsets 5..6
    plog2 = open_log(open_store())  # second store without closing: kill -9
    assert produce(plog2, 7, 0, 0, 2) == "dup:3"
    assert produce(plog2, 7, 0, 2, 2) == "dup:5"
    assert produce(plog2, 7, 0, 6, 1) == ErrorCode.out_of_order_sequence_number.name
    assert produce(plog2, 7, 0, 4, 1) == "ok"


def test_lso_and_aborted_transactions_survive_reopen(open_store: StoreFactory) -> None:
    plog = open_log(open_store())
    assert produce(plog, 1, 0, 0, 2, txn=True) == "ok"  # 0..1 open txn of producer 1
    assert produce(plog, 2, 0, 0, 1) == "ok"  # 2 idempotent, not transactional
    assert plog.last_stable_offset == 0
    marker = bytearray(encode_marker(1, 0, False, 0, NOW))
    append(plog, bytes(marker))  # 3: ABORT
    assert plog.last_stable_offset == plog.high_watermark == 4
    assert produce(plog, 1, 0, 2, 1, txn=True) == "ok"  # 4 second txn
    assert plog.last_stable_offset == 4
    aborted = [(a.producer_id, a.first_offset, a.last_offset)
               for a in plog.aborted_transactions(Offset(0), Offset(5))]  # fmt: skip
    assert aborted == [(1, 0, 3)]
    plog2 = open_log(open_store())
    assert plog2.last_stable_offset == 4
    assert [(a.first_offset, a.last_offset) for a in plog2.aborted_transactions(
        Offset(0), Offset(5))] == [(0, 3)]  # fmt: skip
    assert plog2.aborted_transactions(Offset(4), Offset(5)) == []
    commit = encode_marker(1, 0, True, 0, NOW)
    append(plog2, commit)
    assert plog2.last_stable_offset == plog2.high_watermark
    assert len(plog2.aborted_transactions(Offset(0), Offset(10))) == 1


def test_marker_with_bumped_epoch_fences_old_epoch(open_store: StoreFactory) -> None:
    plog = open_log(open_store())
    assert produce(plog, 1, 0, 0, 1, txn=True) == "ok"
    append(plog, encode_marker(1, 1, False, 0, NOW))  # coordinator aborted with epoch 1
    assert produce(plog, 1, 0, 1, 1, txn=True) == ErrorCode.invalid_producer_epoch.name
    assert produce(plog, 1, 1, 0, 1, txn=True) == "ok"


def test_a_marker_of_an_older_coordinator_epoch_is_fenced(open_store: StoreFactory) -> None:
    """A stale transaction coordinator (a writer paused mid-commit, its lease taken by
    another) must not end the producer's next transaction: its markers carry an older
    coordinator epoch than the newer coordinator's, and the partition refuses them
    (TRANSACTION_COORDINATOR_FENCED), across a restart too."""
    plog = open_log(open_store())
    assert produce(plog, 1, 0, 0, 1, txn=True) == "ok"
    append(plog, encode_marker(1, 0, True, 3, NOW))  # the new coordinator (epoch 3)
    assert produce(plog, 1, 0, 1, 1, txn=True) == "ok"  # the next transaction: open
    for log_ in (plog, open_log(open_store())):  # and after a kill -9
        with pytest.raises(KafkaError) as refused:
            append(log_, encode_marker(1, 0, True, 2, NOW))  # the stale one wakes up
        assert refused.value.code == ErrorCode.transaction_coordinator_fenced
        assert log_.last_stable_offset < log_.high_watermark  # still open
    append(plog, encode_marker(1, 0, False, 3, NOW))
    assert plog.last_stable_offset == plog.high_watermark


def test_idle_producers_expire(open_store: StoreFactory) -> None:
    store = open_store()
    plog = open_log(store)
    assert produce(plog, 1, 0, 0, 1) == "ok"
    assert plog.expire_producers(NOW + 10, 1000) == 0
    assert produce(plog, 2, 0, 5, 1) == "out_of_order_sequence_number"  # none forgotten yet
    assert plog.expire_producers(NOW + 2000, 1000) == 1
    assert produce(plog, 1, 0, 5, 1) == "ok"  # unknown again: any sequence (KIP-360)
    assert produce(plog, 2, 0, 5, 1) == "ok"  # it may be a forgotten one too


def test_a_forgotten_producer_is_remembered_as_such_across_restarts(
    open_store: StoreFactory,
) -> None:
    """Whether the state may miss producers survives restarts: complete after a clean
    one, forgetful after a kill that replays from a snapshot taken after an expiry."""
    store = open_store()
    plog = open_log(store)
    assert produce(plog, 1, 0, 0, 1) == "ok"
    store.close()
    store = open_store()
    plog = open_log(store)
    assert produce(plog, 2, 0, 5, 1) == "out_of_order_sequence_number"
    assert plog.expire_producers(NOW + 2000, 1000) == 1
    plog.roll()  # a snapshot of the forgetful state
    assert produce(plog, 3, 0, 0, 1) == "ok"
    killed = open_store()  # the first store is left open: a kill -9
    assert produce(open_log(killed), 2, 0, 5, 1) == "ok"


def test_recovery_scan_cost(open_store: StoreFactory) -> None:
    """Rebuilding producer state scans batch headers: keep it well under 1 s for 20k
    batches (the number is printed for the docs)."""
    plog = open_log(open_store(log_segment_bytes=1 << 20))
    for i in range(20_000):
        assert produce(plog, i % 50, 0, i // 50, 1) == "ok"
    t0 = time.perf_counter()
    plog2 = open_log(open_store(log_segment_bytes=1 << 20))
    elapsed = time.perf_counter() - t0
    print(f"reopen of {len(plog2.segments)} segments, 20000 batches: {elapsed:.3f} s")
    assert len(plog2.producers()) == 50
    assert elapsed < 5


def test_compaction_keeps_each_producers_last_batch(open_store: StoreFactory) -> None:
    store = open_store()
    store.create_topic(T, 1, {"cleanup.policy": "compact", "segment.bytes": "200"})
    plog = store.partition(T, PartitionId(0))
    for seq in range(2):  # both batches carry key k0, later superseded by plain writes
        assert produce(plog, 5, 0, seq, 1) == "ok"
    for _ in range(4):
        append(plog, encode_batch(records(1), base_offset=0))
    plog.roll()
    store.run_maintenance(NOW + 1000)  # within producer.id.expiration.ms
    assert [h.producer_id for s in plog.segments for h in s.iter_headers()].count(5) == 1
    store.close()
    plog2 = open_log(open_store())
    assert produce(plog2, 5, 0, 1, 1).startswith("dup:")
    assert produce(plog2, 5, 0, 2, 1) == "ok"
