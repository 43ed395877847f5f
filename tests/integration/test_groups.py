"""Consumer groups with real clients: members join, leave and die; offsets survive.

Each member is a child process (``helpers/group_worker.py``) that commits after every
record, so the checks are exact: every record is processed, and nothing is processed
again once a commit past it succeeded (only a member killed between processing and
committing may leave a record to be processed twice).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions

from helpers.admin import admin, create_topic
from helpers.broker import Broker
from helpers.clients import confluent_produce, kcat_path
from helpers.groups import Spec, Worker, check_log, committed, spawn, wait_until, workers
from helpers.records import Record

GROUP_SETTINGS = {"group.initial.rebalance.delay.ms": "300"}
PARTITIONS = 6
PER_PARTITION = 100
DELAY_MS = 20


def _fill(bootstrap: str, partitions: int = PARTITIONS, per: int = PER_PARTITION) -> str:
    topic = create_topic(bootstrap, partitions=partitions)
    records = [
        Record(f"k{p}-{i}".encode(), f"v{p}-{i}".encode(), partition=p)
        for p in range(partitions)
        for i in range(per)
    ]
    confluent_produce(bootstrap, topic, records)
    return topic


def _expected(partitions: int = PARTITIONS, per: int = PER_PARTITION) -> set[tuple[int, int]]:
    return {(p, o) for p in range(partitions) for o in range(per)}


def _all_committed(started: list[Worker], partitions: int = PARTITIONS) -> bool:
    done = committed(started)
    return all(done.get(p, 0) == PER_PARTITION for p in range(partitions))


def group_offsets(bootstrap: str, group: str) -> dict[int, int]:
    result: Any = (
        admin(bootstrap)
        .list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group]
        .result(30)
    )
    return {tp.partition: tp.offset for tp in result.topic_partitions}


def group_state(bootstrap: str, group: str) -> str:
    desc: Any = admin(bootstrap).describe_consumer_groups([group])[group].result(30)
    return str(desc.state.name)


@pytest.mark.parametrize(
    "client", ["confluent", "confluent-cooperative", "kafka-python", "aiokafka"]
)
def test_three_members_join_leave_and_one_killed(
    client: str, broker_factory: Any, tmp_path: Path
) -> None:
    broker: Broker = broker_factory(GROUP_SETTINGS)
    topic = _fill(broker.bootstrap)
    group = f"g-{client}"
    with workers() as started:

        def member() -> Worker:
            return spawn(started, Spec(client, broker.bootstrap, topic, group, tmp_path, DELAY_MS))

        a, b, c = member(), member(), member()
        wait_until(lambda: min(w.processed() for w in (a, b, c)) >= 3, 60, "3 active members")
        c.kill()  # its partitions move once its 6 s session times out
        d = member()
        wait_until(lambda: d.processed() >= 3, 60, "a new member to get partitions")
        b.stop()  # leaves the group cleanly
        wait_until(lambda: _all_committed(started), 90, "every partition committed to the end")
        a.stop()
        d.stop()
    again = check_log(started, _expected())
    assert again <= PARTITIONS, f"{again} records re-processed"
    assert group_offsets(broker.bootstrap, group) == dict.fromkeys(range(PARTITIONS), PER_PARTITION)
    assert group_state(broker.bootstrap, group) == "EMPTY"


def test_broker_restart_during_group_activity(engine_broker_factory: Any, tmp_path: Path) -> None:
    broker: Broker = engine_broker_factory(GROUP_SETTINGS)
    topic = _fill(broker.bootstrap)
    group = "g-restart"
    with workers() as started:
        for _ in range(2):
            spawn(started, Spec("confluent", broker.bootstrap, topic, group, tmp_path, DELAY_MS))
        wait_until(
            lambda: sum(w.processed() for w in started) >= 120, 60, "progress before the kill"
        )
        before = committed(started)
        broker.kill()
        if broker.on_object_storage:
            broker.lose_disk()
        broker.start()
        admin.cache_clear()  # a fresh AdminClient instead of one in reconnect backoff
        wait_until(lambda: _all_committed(started), 120, "every partition committed after restart")
        for w in started:
            w.stop()
    # check_log proves committed progress was not lost: a lost commit would make a
    # member re-process records behind a commit it had seen succeed.
    check_log(started, _expected())
    after = group_offsets(broker.bootstrap, group)
    assert all(after[p] >= o for p, o in before.items())
    assert after == dict.fromkeys(range(PARTITIONS), PER_PARTITION)
    broker.stop()
    broker.start()
    admin.cache_clear()
    assert group_offsets(broker.bootstrap, group) == after
    assert group_state(broker.bootstrap, group) == "EMPTY"


def test_kcat_consumes_as_a_group(broker_factory: Any) -> None:
    broker: Broker = broker_factory(GROUP_SETTINGS)
    topic = _fill(broker.bootstrap, partitions=3, per=20)
    cmd = [kcat_path(), "-b", broker.bootstrap, "-G", "g-kcat", "-o", "beginning", "-e", "-q"]
    cmd += ["-f", "%p %o\\n", "-X", "broker.address.family=v4", topic]
    out = subprocess.run(cmd, capture_output=True, timeout=60, check=True, text=True).stdout
    seen = {tuple(map(int, line.split())) for line in out.splitlines() if line.strip()}
    assert seen == _expected(3, 20)
    assert group_offsets(broker.bootstrap, "g-kcat") == dict.fromkeys(range(3), 20)


def test_kcat_is_installed() -> None:
    assert shutil.which("kcat") or shutil.which("kafkacat")
