"""A batch whose sequence the partition does not check against earlier ones is logged
(``producer.unchecked_batch``): one of a producer the partition has no state for, past
its first sequence (KIP-360 lets it in once producers were expired), or the first of an
idempotent producer's new epoch. A retry written twice can only come in through these
doors, so a duplicate found later (the chaos suite's checker) can be traced to the door
it took; an ordinary run
(a new producer at sequence 0, the next batch in sequence) logs nothing."""

from __future__ import annotations

import logging

import pytest
from localstore_helpers import NOW, StoreFactory, T, append, records

from floe.protocol.records import encode_batch
from floe.storage.local import LocalPartitionLog, LocalStore
from floe.types import PartitionId


def produce(plog: LocalPartitionLog, pid: int, epoch: int, seq: int) -> None:
    data = encode_batch(records(4, start_ts=NOW), base_offset=0, producer_id=pid,
                        producer_epoch=epoch, base_sequence=seq)  # fmt: skip
    append(plog, data)


def partition(store: LocalStore) -> LocalPartitionLog:
    store.create_topic(T, 1, {})
    return store.partition(T, PartitionId(0))


def unchecked(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "producer.unchecked_batch" in r.getMessage()]


def test_ordinary_batches_log_nothing(
    open_store: StoreFactory, caplog: pytest.LogCaptureFixture
) -> None:
    plog = partition(open_store())
    with caplog.at_level(logging.INFO, logger="floe.storage.local.log"):
        produce(plog, 5, 0, 0)
        produce(plog, 5, 0, 4)
    assert unchecked(caplog) == []


def test_a_producer_without_state_past_its_first_sequence_is_logged(
    open_store: StoreFactory, caplog: pytest.LogCaptureFixture
) -> None:
    plog = partition(open_store())
    produce(plog, 6, 0, 0)
    assert plog.expire_producers(NOW + 10_000, 1000) == 1  # producers may now be missing
    with caplog.at_level(logging.INFO, logger="floe.storage.local.log"):
        produce(plog, 5, 0, 40)
    (line,) = unchecked(caplog)
    assert "partition=t-0 producer_id=5 epoch=0 first_sequence=40" in line
    assert "seen=no state" in line


def test_an_idempotent_producers_new_epoch_is_logged(
    open_store: StoreFactory, caplog: pytest.LogCaptureFixture
) -> None:
    plog = partition(open_store())
    produce(plog, 5, 0, 0)
    produce(plog, 5, 0, 4)
    with caplog.at_level(logging.INFO, logger="floe.storage.local.log"):
        produce(plog, 5, 1, 0)
    (line,) = unchecked(caplog)
    assert "producer_id=5 epoch=1 first_sequence=0" in line
    assert "seen=epoch 0 up to sequence 7" in line
