"""Table maintenance, end to end with the real broker, Spark and catalog.

A table topic's table after many small rounds is compacted, its old snapshots expired,
an orphan file older than the safety window removed and its manifests rewritten by
``floe table maintain --now``, while a producer keeps writing and rounds keep
committing: afterwards the table holds every acknowledged record exactly once (Spark
SQL and pyiceberg agree) in fewer files. The schedule runs it by itself, counted from
the last run the table records, and status shows the last run and its effect. Asked
before the table exists, the API answers 409.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from floe.tabletopic import catalog as cat
from helpers.admin import create_topic, set_topic_config
from helpers.broker import Broker, floe_bin
from helpers.clients import confluent_produce
from helpers.records import Record, recent_ts
from helpers.table_readers import (
    acked_rows,
    catalog_settings,
    pyiceberg_rows,
    spark_sql_rows,
    table_status,
    wait_for_table_rows,
)

pytestmark = [pytest.mark.timeout(480), pytest.mark.filterwarnings("ignore::ResourceWarning")]

DEADLINE_S = 150.0
TOPIC, TABLE = "maintained", ("default", "maintained")
BURSTS = 6
DAY_S = 24 * 3600


def records(word: str, n: int, first: int) -> list[Record]:
    base = recent_ts()
    return [
        Record(f"k{i}".encode(), f"{word} {i}".encode(), (), base + i, i % 2)
        for i in range(first, first + n)
    ]


def data_files(broker: Broker) -> int:
    table = cat.load_table(cat.load_catalog(catalog_settings(broker)), *TABLE)
    return len(table.inspect.files())


def maintenance_status(broker: Broker) -> dict[str, Any]:
    return table_status(broker, TOPIC)["maintenance"]  # type: ignore[no-any-return]


def floe_table_maintain(broker: Broker, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [floe_bin(), "table", "maintain", TOPIC, "--admin", broker.admin_url, *extra],
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
        check=False,
    )


class Producer(threading.Thread):
    """Produces bursts of records until stopped: rounds commit while maintenance runs."""

    def __init__(self, broker: Broker, first: int) -> None:
        super().__init__(daemon=True)
        self.broker, self.next = broker, first
        self.acked: list[Record] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            self.acked += confluent_produce(
                self.broker.bootstrap, TOPIC, records("during", 20, self.next)
            )
            self.next += 20
            time.sleep(0.3)


def test_maintenance_compacts_expires_and_cleans_while_rounds_go_on(
    broker_factory: Callable[..., Broker],
) -> None:
    broker = broker_factory()
    create_topic(
        broker.bootstrap,
        TOPIC,
        2,
        {
            "table.topic.enable": "true",
            "table.topic.commit.interval.ms": "1000",
            "table.topic.convert.value.type": "string",
            "table.topic.maintenance.interval.ms": "0",  # on demand only, until below
            "table.topic.maintenance.min.input.files": "2",
            "table.topic.maintenance.snapshots.retain.last": "2",
            "table.topic.maintenance.snapshots.max.age.ms": "0",
            "table.topic.maintenance.orphan.age.ms": str(DAY_S * 1000),
            "table.topic.metadata.versions.kept": "2",
        },
    )
    request = urllib.request.Request(
        f"{broker.admin_url}/api/v1/tables/{TOPIC}/maintenance", data=b"{}", method="POST"
    )
    message = "is starting"
    while "is starting" in message:  # the manager starts the coordinator within a second
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=30)
        assert refused.value.code == 409
        message = json.loads(refused.value.read())["message"]
    assert "does not exist yet" in message  # no table before the first round

    acked: list[Record] = []
    for burst in range(BURSTS):  # one round each: small files, one snapshot each
        acked += confluent_produce(broker.bootstrap, TOPIC, records("small", 20, burst * 20))
        wait_for_table_rows(broker, TABLE, len(acked), DEADLINE_S)
    files_before = data_files(broker)
    assert files_before >= BURSTS
    table = cat.load_table(cat.load_catalog(catalog_settings(broker)), *TABLE)
    snapshots_before = len(table.snapshots())
    # a metadata file per commit, but only the current one and 2 before it stay
    metadata_dir = Path(table.location().removeprefix("file:")) / "metadata"
    assert len(list(metadata_dir.glob("*.metadata.json"))) <= 3 < snapshots_before
    # a file a failed round left two days ago (older than the safety window), and one
    # written a moment ago (younger: it could be a running round's)
    data_dir = Path(table.location().removeprefix("file:")) / "data"
    old_orphan, young_orphan = data_dir / "orphan-old.parquet", data_dir / "orphan-young.parquet"
    for orphan in (old_orphan, young_orphan):
        orphan.write_bytes(b"not referenced")
    os.utime(old_orphan, (time.time() - 2 * DAY_S, time.time() - 2 * DAY_S))

    producer = Producer(broker, first=BURSTS * 20)
    producer.start()
    try:
        time.sleep(1.0)  # rounds of the producer's records are under way
        done = floe_table_maintain(broker, "--now", "-o", "json")
    finally:
        producer.stopping.set()
        producer.join(timeout=60)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["rewritten_files"] >= BURSTS and result["added_files"] >= 1
    assert result["orphan_files"] == 1 and not old_orphan.exists() and young_orphan.exists()
    assert result["expired_snapshots"] >= snapshots_before - 2
    assert result["rewritten_manifests"] >= 1

    acked += producer.acked
    assert len(producer.acked) > 0
    wait_for_table_rows(broker, TABLE, len(acked), DEADLINE_S)
    want = acked_rows(acked)
    assert pyiceberg_rows(catalog_settings(broker), TABLE) == want  # each record exactly once
    assert spark_sql_rows(broker, TABLE) == want
    assert data_files(broker) < files_before + len(producer.acked) // 20

    shown = maintenance_status(broker)
    assert shown["last"]["started_ms"] == result["started_ms"]
    assert shown["last_effect"].startswith(f"compacted {result['rewritten_files']} files")
    assert shown["error"] is None and shown["running"] is False and shown["interval_ms"] == 0
    text = floe_table_maintain(broker)
    assert text.returncode == 0, text.stderr
    assert "Schedule:   none (--now only)" in text.stdout
    assert f"Effect:     {shown['last_effect']}" in text.stdout

    # on a schedule: the next run is due one interval after the recorded one
    set_topic_config(broker.bootstrap, TOPIC, "table.topic.maintenance.interval.ms", "5000")
    deadline = time.monotonic() + DEADLINE_S
    while (shown := maintenance_status(broker))["last"]["started_ms"] == result["started_ms"]:
        broker.assert_alive()
        assert time.monotonic() < deadline, shown
        time.sleep(0.5)
    assert shown["interval_ms"] == 5000 and shown["error"] is None
    assert pyiceberg_rows(catalog_settings(broker), TABLE) == want
