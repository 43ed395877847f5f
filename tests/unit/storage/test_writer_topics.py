"""Which topics' partitions stay with the writer of a cluster whose brokers share
partitions (``stays_with_writer``): what the writer's own code reads or writes locally.
Every other topic, table topics included, is spread over the brokers."""

from __future__ import annotations

import uuid

import pytest

from floe.storage.interface import TopicMeta
from floe.storage.object.topics import stays_with_writer
from floe.types import TopicName

TABLE = {"table.topic.enable": "true"}


@pytest.mark.parametrize(
    ("name", "configs", "internal", "stays"),
    [
        ("orders", {}, False, False),
        ("orders", TABLE, False, False),  # read from each leader by its coordinator
        ("orders", {**TABLE, "automq.table.topic.convert.value.type": "string"}, False, False),
        (
            "orders",
            {**TABLE, "table.topic.enable": "false", "table.topic.route.by": "record_name"},
            False,
            False,
        ),
        # route tables share retention holds on the writer
        ("orders", {**TABLE, "table.topic.route.by": "record_name"}, False, True),
        # its dead letters are copied from the source log by the writer's coordinator
        ("orders", {**TABLE, "table.topic.errors.dlq.topic": "true"}, False, True),
        ("orders", {**TABLE, "table.topic.errors.dlq.topic": "bad-orders"}, False, True),
        ("orders.dlq", {"table.topic.errors.dlq.source": "orders"}, False, True),
        ("_schemas", {}, True, True),
        ("__consumer_offsets", {}, True, False),
        ("__transaction_state", {}, True, False),
    ],
)
def test_what_stays_with_the_writer(
    name: str, configs: dict[str, str], internal: bool, stays: bool
) -> None:
    meta = TopicMeta(TopicName(name), uuid.uuid4(), 3, configs, internal)
    assert stays_with_writer(meta) is stays
