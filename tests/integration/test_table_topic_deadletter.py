"""The dead-letter topic of a table topic, end to end with the real broker, Spark,
registry, a real consumer and ``floe dlq replay``.

Avro records (Confluent serializer) and bad ones (bytes without the wire format, a
schema id the registry never issued) are produced to a table topic with
``table.topic.errors.dlq.topic=true``: the good ones land in the table, each bad one in
``<topic>.dlq`` exactly once, byte-identical (key, value, timestamp, headers), with
headers saying where it came from and why; status counts them. A broker killed with
``kill -9`` right after it sent a round's dead letters, before or just after its
commit, sends none of them twice when the round is redone. A dead-letter topic without
skipped records (``errors.tolerance=none``) is refused when set. ``floe dlq replay``
counts them (``--dry-run``), sends those a ``--reason`` picks, then the rest, each once:
the replayed records are the originals without the ``floe.dlq.*`` headers.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from collections.abc import Callable
from typing import Any

import confluent_kafka as ck
import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from floe.tabletopic import catalog as cat
from helpers.admin import admin, create_table_topic, create_topic
from helpers.broker import Broker, floe_bin
from helpers.cluster import crash
from helpers.table_readers import catalog_settings, table_status, wait_for_table_rows

pytestmark = [pytest.mark.timeout(420), pytest.mark.filterwarnings("ignore::ResourceWarning")]

DEADLINE_S = 150.0
CLICK = {
    "type": "record",
    "name": "Click",
    "fields": [{"name": "user", "type": "string"}, {"name": "n", "type": "int"}],
}
DLQ = {"table.topic.errors.dlq.topic": "true"}
UNKNOWN_ID = b"\x00\x00\x00\x03\xe7garbage"  # wire format, schema id 999: never issued


def produce(broker: Broker, topic: str, first: int, n: int) -> tuple[int, list[dict[str, Any]]]:
    """``n`` records from index ``first``: every fifth is bad (alternately plain bytes
    and an unknown schema id), the rest good Avro clicks; returns the good count and
    the bad records as sent (partition, offset, key, value, headers, timestamp)."""
    registry = SchemaRegistryClient({"url": broker.registry_url})
    serialize = AvroSerializer(registry, json.dumps(CLICK))
    ctx = SerializationContext(topic, MessageField.VALUE)
    producer = ck.Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    bad: list[dict[str, Any]] = []
    good = 0

    def sent(record: dict[str, Any]) -> Callable[[Any, Any], None]:
        def delivered(err: Any, msg: Any) -> None:
            assert err is None, err
            record.update(partition=msg.partition(), offset=msg.offset())
            record["timestamp"] = msg.timestamp()[1]

        return delivered

    for i in range(first, first + n):
        key = f"k{i}".encode()
        if i % 5 == 0:
            value = b"not avro" if i % 10 == 0 else UNKNOWN_ID
            headers = [("bad", b"yes"), ("i", str(i).encode())]
            bad.append({"key": key, "value": value, "headers": headers})
            on_delivery = sent(bad[-1])
        else:
            value, headers = serialize({"user": f"u{i}", "n": i}, ctx), [("i", str(i).encode())]
            good += 1
            on_delivery = sent({})
        producer.produce(
            topic, value, key, partition=i % 2, headers=headers, on_delivery=on_delivery
        )
    assert producer.flush(30) == 0
    return good, bad


def dead_letters(broker: Broker, dlq: str, n: int) -> list[Any]:
    """Every record of ``dlq`` (at least ``n``; then 2 s more to catch extras)."""
    consumer = ck.Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"read-{dlq}-{time.monotonic_ns()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([dlq])
    got: list[Any] = []
    deadline, quiet = time.monotonic() + DEADLINE_S, None
    try:
        while time.monotonic() < deadline and (quiet is None or time.monotonic() < quiet):
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg)
            if len(got) >= n and quiet is None:
                quiet = time.monotonic() + 2.0
    finally:
        consumer.close()
    return got


def check(letters: list[Any], bad: list[dict[str, Any]], topic: str) -> None:
    """``letters`` are ``bad``, each once, byte-identical, with the headers saying why."""
    by_source = {}
    for m in letters:
        h = dict(m.headers())
        key = (int(h["floe.dlq.partition"]), int(h["floe.dlq.offset"]))
        assert key not in by_source, f"dead-lettered twice: {key}"
        by_source[key] = m
    assert sorted(by_source) == sorted((b["partition"], b["offset"]) for b in bad)
    for b in bad:
        m = by_source[(b["partition"], b["offset"])]
        assert (m.key(), m.value(), m.timestamp()[1]) == (b["key"], b["value"], b["timestamp"])
        headers = m.headers()
        assert headers[: len(b["headers"])] == b["headers"]  # the originals, first
        h = dict(headers)
        assert h["floe.dlq.topic"] == topic.encode()
        assert h["floe.dlq.error.class"] == b"conversion"
        assert h["floe.dlq.error.reason"]
        assert h.get("floe.dlq.schema.id") == (b"999" if b["value"] == UNKNOWN_ID else None)


def test_skipped_records_go_to_the_dead_letter_topic_once_byte_identical(
    broker_factory: Callable[..., Broker],
) -> None:
    broker = broker_factory()
    topic = "dlq_clicks"
    create_table_topic(broker.bootstrap, topic, 2, DLQ, flatten=True)
    entry = ConfigEntry(
        "table.topic.errors.tolerance", "none", incremental_operation=AlterConfigOpType.SET
    )
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[entry])
    with pytest.raises(KafkaException, match="a dead-letter topic needs skipped records"):
        admin(broker.bootstrap).incremental_alter_configs([res])[res].result(30)

    good, bad = produce(broker, topic, 0, 50)
    wait_for_table_rows(broker, ("default", topic), good, DEADLINE_S)
    check(dead_letters(broker, f"{topic}.dlq", len(bad)), bad, topic)
    shown = table_status(broker, topic)
    assert shown["dead_letter_topic"] == f"{topic}.dlq"
    assert shown["dead_lettered_records"] == len(bad) == shown["skipped_records"]
    with urllib.request.urlopen(f"{broker.admin_url}/topics/{topic}", timeout=30) as page:
        html = page.read().decode()  # the console's topic page: the count, linked
    assert f'id="tb-dead"><a href="/topics/{topic}.dlq">{len(bad)}</a>' in html
    table = cat.load_table(cat.load_catalog(catalog_settings(broker)), "default", topic)
    assert len(table.scan().to_arrow()) == good

    # replay: a dry run counts; a --reason picks some; the next run sends the rest; again
    # nothing: each once
    create_topic(broker.bootstrap, "fixed", 2)
    not_avro = [b for b in bad if b["value"] == b"not avro"]
    dry = replay(broker, topic, "--dry-run", "--to", "fixed")
    assert (dry["dead_letters"], dry["replayed"], dry["already_replayed"]) == (
        len(bad),
        len(bad),
        0,
    )
    assert sum(dry["reasons"].values()) == len(bad)
    picked = replay(broker, topic, "--reason", "magic byte", "--to", "fixed")
    assert (picked["replayed"], picked["not_matching"]) == (len(not_avro), len(bad) - len(not_avro))
    rest = replay(broker, topic, "--to", "fixed")
    assert (rest["replayed"], rest["already_replayed"]) == (len(bad) - len(not_avro), len(not_avro))
    assert replay(broker, topic, "--to", "fixed")["replayed"] == 0
    assert table_status(broker, topic)["dead_lettered_records"] == len(bad)  # markers not counted
    replayed = dead_letters(broker, "fixed", len(bad))  # the originals, each once
    assert sorted((m.key(), m.value(), m.timestamp()[1], m.headers()) for m in replayed) == sorted(
        (b["key"], b["value"], b["timestamp"], b["headers"]) for b in bad
    )


def replay(broker: Broker, topic: str, *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [floe_bin(), "dlq", "replay", topic, "--brokers", broker.bootstrap, "-o", "json", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    summary: dict[str, Any] = json.loads(done.stdout)
    return summary


def test_a_round_redone_after_a_kill_sends_no_dead_letter_twice(
    broker_factory: Callable[..., Broker],
) -> None:
    broker = broker_factory()
    topic = "dlq_crash"
    create_table_topic(broker.bootstrap, topic, 2, DLQ, flatten=True)
    good, bad = produce(broker, topic, 0, 50)
    deadline = time.monotonic() + DEADLINE_S
    while "tabletopic.dead_lettered" not in broker.stderr_text():
        broker.assert_alive()
        assert time.monotonic() < deadline, "no dead letters sent"
        time.sleep(0.005)
    crash(broker)  # kill -9, Spark too: the round's commit is under way, or not started
    broker.start()
    more_good, more_bad = produce(broker, topic, 50, 50)
    wait_for_table_rows(broker, ("default", topic), good + more_good, DEADLINE_S)
    check(dead_letters(broker, f"{topic}.dlq", len(bad + more_bad)), bad + more_bad, topic)
