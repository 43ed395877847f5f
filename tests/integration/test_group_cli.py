"""``floe group`` against a real broker, run as a subprocess like a user would."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import confluent_kafka as ck

from helpers.admin import create_topic
from helpers.clients import confluent_config, confluent_produce
from helpers.records import Record


def floe(*args: str) -> subprocess.CompletedProcess[str]:
    exe = str(Path(sys.executable).with_name("floe"))
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=60, check=False)


def _consume_and_commit(bootstrap: str, topic: str, group: str, count: int) -> ck.Consumer:
    """A live member that has consumed and committed ``count`` records."""
    c = ck.Consumer(
        confluent_config(
            bootstrap,
            **{"group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False},
        )
    )
    c.subscribe([topic])
    seen = 0
    while seen < count:
        m = c.poll(1.0)
        if m is not None and not m.error():
            seen += 1
            c.commit(m, asynchronous=False)
    return c


def test_list_describe_and_reset(broker: Any) -> None:
    topic = create_topic(broker.bootstrap, partitions=2)
    confluent_produce(
        broker.bootstrap,
        topic,
        [Record(b"k", str(i).encode(), partition=i % 2) for i in range(10)],
    )
    group = f"cli-{topic}"
    a = ["--admin", broker.admin_url]  # every verb: the admin API
    consumer = _consume_and_commit(broker.bootstrap, topic, group, 10)
    try:
        listed = floe("group", "list", *a)
        assert listed.returncode == 0, listed.stderr
        assert any(line.split()[:2] == [group, "STABLE"] for line in listed.stdout.splitlines())

        described = json.loads(floe("group", "describe", group, *a, "--output", "json").stdout)
        assert described["state"] == "STABLE"
        (member,) = described["members"]
        assert sorted(member["assignment"]) == [f"{topic}-0", f"{topic}-1"]
        assert member["client_id"] == "rdkafka"
        assert [(p["committed"], p["log_end"], p["lag"]) for p in described["partitions"]] == [
            (5, 5, 0),
            (5, 5, 0),
        ]
        text = floe("group", "describe", group, *a).stdout
        assert "TOPIC" in text and "LAG" in text and member["member_id"] in text

        refused = floe("group", "reset-offsets", group, *a, "--topic", topic, "--to-earliest")
        assert refused.returncode == 1
        assert refused.stderr.count("\n") == 1 and "STABLE" in refused.stderr
    finally:
        consumer.close()

    dry = floe("group", "reset-offsets", group, *a, "--topic", topic, "--to-earliest", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    after_dry = json.loads(floe("group", "describe", group, *a, "--output", "json").stdout)
    assert [p["committed"] for p in after_dry["partitions"]] == [5, 5]

    reset = floe(
        "group", "reset-offsets", group, *a, "--topic", topic, "--partition", "1",
        "--to-offset", "2", "--output", "json",
    )  # fmt: skip
    assert reset.returncode == 0, reset.stderr
    assert json.loads(reset.stdout)["partitions"] == [
        {"topic": topic, "partition": 1, "previous": 5, "new": 2}
    ]
    floe("group", "reset-offsets", group, *a, "--topic", topic, "--to-datetime", "2000-01-01")
    final = json.loads(floe("group", "describe", group, *a, "--output", "json").stdout)
    assert final["state"] == "EMPTY"
    assert [(p["committed"], p["lag"]) for p in final["partitions"]] == [(0, 5), (0, 5)]


def test_errors_are_one_line(broker: Any) -> None:
    b = ["--admin", broker.admin_url]
    bad_topic = floe("group", "reset-offsets", "g-none", *b, "--topic", "nope", "--to-latest")
    assert bad_topic.returncode == 1
    assert bad_topic.stderr == "floe: error: unknown topic nope\n"
    bad_time = floe(
        "group", "reset-offsets", "g-none", *b, "--topic", "nope", "--to-datetime", "yesterday"
    )
    assert bad_time.returncode == 1 and "Traceback" not in bad_time.stderr
