"""``floe demo clickstream`` end to end: the real script against a real ``floe up``.

One broker (with its Spark) for the module. The demo runs as a subprocess with the
broker's free ports passed as flags and its data dir for the Spark SQL step; the test
then checks the printed answers and counts the table's rows itself, through the admin
API and through pyiceberg. No timing assertions.
"""

from __future__ import annotations

import json
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from floe.config import load_config
from floe.tabletopic import catalog as cat
from helpers import jvm
from helpers.admin import admin, create_topic
from helpers.broker import Broker, floe_bin, free_port

pytestmark = pytest.mark.timeout(300)

EVENTS = 2000


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    b = Broker(tmp_path_factory.mktemp("demo") / "data", {"spark.sql.shuffle.partitions": "2"})
    try:
        yield b.start()
        admin.cache_clear()
        b.stop()
    finally:
        b.close()


def demo(
    broker: Broker, *args: str, cwd: Path, timeout: float = 280
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            floe_bin(),
            "demo",
            "clickstream",
            "--brokers",
            broker.bootstrap,
            "--registry",
            broker.registry_url,
            "--admin",
            broker.admin_url,
            "--data-dir",
            str(broker.data_dir),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,  # no stray ./floe.toml
        check=False,
    )


def test_demo_fills_the_table_and_answers(broker: Broker, tmp_path: Path) -> None:
    out = demo(broker, "-n", str(EVENTS), "--timeout", "240", cwd=tmp_path)
    assert out.returncode == 0, out.stderr + out.stdout
    assert jvm.without_note(out.stderr) == ""  # its query starts a JVM
    lines = out.stdout.splitlines()
    assert "✓ registered the Avro schema clickstream-value (id 1)" in lines
    assert "✓ created the table topic clickstream (3 partitions, commit every 2 s)" in lines
    assert any(line.startswith(f"✓ produced {EVENTS:,} events in ") for line in lines)
    assert any("the table caught up" in line for line in lines)

    # the top pages table: aligned columns, the most popular page first
    top = lines.index("Top pages")
    header = next(i for i in range(top, len(lines)) if lines[i].startswith("page "))
    assert lines[header].split() == ["page", "views", "users"]
    assert lines[header + 2].split()[0] == "/"
    assert lines[header + 7] == "(5 rows)"

    # events per minute: the events span the 10 minutes before the run (11 minute
    # buckets at most), and the per-minute counts add up to every event
    per_minute = lines.index("Events per minute (the newest 15 minutes)")
    header = next(i for i in range(per_minute, len(lines)) if lines[i].startswith("minute_utc"))
    assert lines[header].split() == ["minute_utc", "events", "purchases"]
    rows = []
    for line in lines[header + 2 :]:
        if line.startswith("("):
            break
        rows.append(line.split())
    assert 10 <= len(rows) <= 11
    assert sum(int(r[2]) for r in rows) == EVENTS
    total = lines.index("Rows in the table")
    assert lines[total + 4].strip() == str(EVENTS)

    # the table holds exactly the produced events: status API and pyiceberg agree
    with urllib.request.urlopen(f"{broker.admin_url}/api/v1/tables/clickstream") as response:
        status = json.loads(response.read())
    assert sum(p["committed_offset"] for p in status["partitions"]) == EVENTS
    assert status["skipped_records"] == 0
    config = load_config(None, {"data.dir": str(broker.data_dir)}, environ={})
    table = cat.load_table(
        cat.load_catalog(cat.CatalogSettings.from_config(config)), "default", "clickstream"
    )
    arrow = table.scan().to_arrow()
    assert arrow.num_rows == EVENTS
    names = set(arrow.column_names)
    assert {"user_id", "session_id", "page", "referrer", "event_type", "device", "ts"} <= names


def test_existing_plain_topic_is_one_line(broker: Broker, tmp_path: Path) -> None:
    create_topic(broker.bootstrap, "plain-demo", 1)
    out = demo(broker, "--topic", "plain-demo", "-n", "10", cwd=tmp_path, timeout=60)
    assert out.returncode == 1
    assert out.stderr == (
        "floe: error: topic 'plain-demo' exists and is not a table topic: pick another --topic\n"
    )


def test_unreachable_admin_is_one_line(broker: Broker, tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    out = subprocess.run(
        [floe_bin(), "demo", "clickstream", "--brokers", broker.bootstrap, "--admin", url],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        check=False,
    )
    assert out.returncode == 1
    assert out.stderr == f"floe: cannot reach the admin API at {url}: connection refused\n"
