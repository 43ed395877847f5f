"""``kill -9`` the broker at every phase of an upsert table topic's rounds: each key's
row is its last record's, once.

The stream of ``test_kill9_table_topic.py`` with 21 keys (a multiple of the partition
count, so a key's records all go to one partition and "its last record" is defined),
into a table topic upserting by ``_kafka_key``, through the same kills
(``helpers.table_kills``). A round's position deletes and new rows land in one commit
with its offsets, or not at all: after the last restart the table holds exactly one row
per key, its last record's (key, value, header, timestamp, offset), read by pyiceberg.
"""

from __future__ import annotations

from collections.abc import Callable

from helpers.admin import create_topic
from helpers.broker import Broker
from helpers.table_eos import KeyedStream, assert_table_is_topic, upserted_view
from helpers.table_kills import (
    MARKS,
    PARTITIONS,
    TABLE_TOPIC,
    TOPIC,
    catalog_table,
    floe_snapshots,
    stop_cleanly,
    stream_through_kills,
)

pytestmark = MARKS

UPSERT_KEYS = 21
"""A multiple of PARTITIONS: seq % 21 decides seq % 3."""


def test_upsert_table_exactly_once_across_kill9(broker_factory: Callable[..., Broker]) -> None:
    """The same kills on an upsert table by key: each key's row is its last record's,
    once, whatever round a kill cut (its position deletes and rows land together or
    not at all)."""
    b = broker_factory({"spark.sql.shuffle.partitions": "2"})
    upsert = {"table.topic.id.columns": "[_kafka_key]", "table.topic.upsert.enable": "true"}
    create_topic(b.bootstrap, TOPIC, PARTITIONS, {**TABLE_TOPIC, **upsert})
    stream = KeyedStream(b.bootstrap, TOPIC, PARTITIONS, keys=UPSERT_KEYS)
    log, kills = stream_through_kills(b, stream)
    rows = catalog_table(b).scan().to_arrow().to_pylist()
    try:
        assert_table_is_topic(rows, upserted_view(log))
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nsnapshots:\n" + "\n".join(floe_snapshots(b))) from None
    assert len(rows) == UPSERT_KEYS
    print(f"{len(rows)} rows, {len(log)} records")
    stop_cleanly(b, kills)
