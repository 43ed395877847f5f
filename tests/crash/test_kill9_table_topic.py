"""``kill -9`` the broker at every phase of table-topic commit rounds: exactly-once holds.

An idempotent acks=all producer streams keyed records with a header into a 3-partition
table topic (``string`` values, 1 s commit interval) for the whole test, while the
broker is SIGKILLed ``KILLS`` times and restarted on the same port and data dir, each
kill aimed at one phase of a round (``helpers.table_kills``: writing, committing,
committed, random).

After the last restart the producer stops, the table catches up with the log end
offsets, and the test proves: the table's (partition, offset) pairs are exactly the
topic's, each once (no duplicates, none missing); each row's key, value, header and
timestamp equal the topic's record; every acknowledged record is in the topic at its
acknowledged offset; no killed broker's Spark processes outlived it for long.

``make test`` runs it on object storage (the log in the bucket, the catalog and
warehouse in ``data.dir``); ``make crash`` on local disk too
(``FLOE_TABLE_ENGINES=local,s3``). The upsert test
(``test_kill9_upsert_table_topic.py``) runs the same kills on local disk.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from helpers.admin import create_topic
from helpers.broker import Broker
from helpers.table_eos import KeyedStream, assert_table_is_topic
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

ENGINES = os.environ.get("FLOE_TABLE_ENGINES", "s3").split(",")


@pytest.mark.parametrize("engine_broker_factory", ENGINES, indirect=True)
def test_table_topic_exactly_once_across_kill9(
    engine_broker_factory: Callable[..., Broker],
) -> None:
    b = engine_broker_factory({"spark.sql.shuffle.partitions": "2"})
    create_topic(b.bootstrap, TOPIC, PARTITIONS, TABLE_TOPIC)
    log, kills = stream_through_kills(b, KeyedStream(b.bootstrap, TOPIC, PARTITIONS))
    rows = catalog_table(b).scan().to_arrow().to_pylist()
    try:
        assert_table_is_topic(rows, log)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nsnapshots:\n" + "\n".join(floe_snapshots(b))) from None
    print(f"{len(rows)} rows, {len(log)} records")
    stop_cleanly(b, kills)
