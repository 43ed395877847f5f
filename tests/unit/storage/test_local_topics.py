"""Topic metadata: validation, create/delete/grow, configs, durability of topics.json."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from localstore_helpers import StoreFactory, T, append, batch, records

from floe.storage.interface import (
    InvalidPartitionsError,
    InvalidTopicError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from floe.types import Offset, PartitionId, TopicName


@pytest.mark.parametrize("name", ["", ".", "..", "a" * 250, "bad name", "é", "a/b"])
def test_invalid_topic_names(open_store: StoreFactory, name: str) -> None:
    store = open_store()
    with pytest.raises(InvalidTopicError, match=r"topic name"):
        store.create_topic(TopicName(name), 1, {})


@pytest.mark.parametrize("name", ["a", "A.b_c-9", "a" * 249, "..."])
def test_valid_topic_names(open_store: StoreFactory, name: str) -> None:
    store = open_store()
    store.create_topic(TopicName(name), 1, {})
    assert store.partition(TopicName(name), PartitionId(0)).log_end_offset == 0


@pytest.mark.parametrize("count", [0, -1, 10001])
def test_invalid_partition_counts(open_store: StoreFactory, count: int) -> None:
    store = open_store()
    with pytest.raises(InvalidPartitionsError):
        store.create_topic(T, count, {})


def test_create_exists_unknown_and_metadata_file(open_store: StoreFactory, tmp_path: Path) -> None:
    store = open_store()
    meta = store.create_topic(T, 3, {"retention.ms": "1000"}, internal=True)
    with pytest.raises(TopicExistsError):
        store.create_topic(T, 1, {})
    with pytest.raises(UnknownTopicOrPartitionError):
        store.partition(T, PartitionId(3))
    with pytest.raises(UnknownTopicOrPartitionError):
        store.partition(TopicName("nope"), PartitionId(0))
    doc = orjson.loads((tmp_path / "data" / "meta" / "topics.json").read_bytes())
    (saved,) = doc["topics"]
    assert saved["topic_id"] == str(meta.topic_id)
    assert saved["internal"] is True
    assert saved["configs"] == {"retention.ms": "1000"}
    assert store.topic_config(T).retention_ms == 1000
    assert store.topics() == {T: meta}
    assert [p.name for p in sorted((tmp_path / "data" / "logs").iterdir())] == [
        "recovery-point-offset-checkpoint", "t-0", "t-1", "t-2",
    ]  # fmt: skip


def test_delete_topic_removes_data_and_never_resurrects(
    open_store: StoreFactory, tmp_path: Path
) -> None:
    store = open_store()
    meta = store.create_topic(T, 2, {})
    append(store.partition(T, PartitionId(0)), batch(records(3)))
    store.delete_topic(T)
    assert store.topic(T) is None
    assert store.topic_by_id(meta.topic_id) is None
    assert not list((tmp_path / "data" / "logs").glob("t-*"))
    with pytest.raises(UnknownTopicOrPartitionError):
        store.delete_topic(T)
    again = store.create_topic(T, 1, {})
    assert again.topic_id != meta.topic_id
    assert store.partition(T, PartitionId(0)).log_end_offset == 0
    store.close()
    store = open_store()
    assert store.topic(T) == again


def test_create_partitions_and_set_configs(open_store: StoreFactory) -> None:
    store = open_store()
    store.create_topic(T, 1, {})
    with pytest.raises(InvalidPartitionsError):
        store.create_partitions(T, 1)
    grown = store.create_partitions(T, 3)
    assert grown.partitions == 3
    append(store.partition(T, PartitionId(2)), batch(records(1)))
    updated = store.set_topic_configs(T, {"segment.bytes": "100"})
    assert updated.configs == {"segment.bytes": "100"}
    plog = store.partition(T, PartitionId(2))
    assert plog.config.segment_bytes == 100
    append(plog, batch(records(5)))
    assert len(plog.segments) == 2
    store.close()
    store = open_store()
    assert store.topic(T) == updated
    assert store.partition(T, PartitionId(2)).read(Offset(0), 1000)


def test_broker_defaults_resolve(open_store: StoreFactory) -> None:
    store = open_store(log_segment_bytes=12345)
    store.create_topic(T, 1, {})
    assert store.topic_config(T).segment_bytes == 12345
    assert store.log_dir().endswith("logs")
