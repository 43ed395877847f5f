"""``floe table status`` and ``GET /api/v1/tables`` against a real ``floe up`` with Spark.

One broker for the module (Spark starts once): a table topic in ``string`` mode with a
1 s commit interval and 2 partitions, plus a plain topic. The CLI runs as a subprocess
(the real ``floe`` script), the HTTP API is asked with urllib.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers.admin import admin, create_topic
from helpers.broker import Broker, floe_bin, free_port
from helpers.clients import confluent_produce
from helpers.records import Record, recent_ts

pytestmark = pytest.mark.timeout(300)

TOPIC = "clicks.status-1"  # '.' and '-': the table name goes through table_identifier
TABLE = "default.clicks_status_1_"  # + 8 hex digits of the name's hash
PLAIN = "plain-status"
COUNTS = {0: 30, 1: 20}
DEADLINE_S = 150.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    b = Broker(
        tmp_path_factory.mktemp("status") / "data",
        {"auto.create.topics.enable": "false", "spark.sql.shuffle.partitions": "2"},
    )
    try:
        b.start()
        create_topic(
            b.bootstrap,
            TOPIC,
            2,
            {
                "table.topic.enable": "true",
                "table.topic.commit.interval.ms": "1000",
                "table.topic.convert.value.type": "string",
            },
        )
        create_topic(b.bootstrap, PLAIN, 1)
        base = recent_ts()
        records = [
            Record(f"k{i}".encode(), f"v{i}".encode(), (), base + i, p)
            for p, n in COUNTS.items()
            for i in range(n)
        ]
        confluent_produce(b.bootstrap, TOPIC, records)
        yield b
        admin.cache_clear()
        b.stop()  # SIGTERM: the admin server stops with the rest, exit code 0
    finally:
        b.close()


def cli(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [floe_bin(), "table", "status", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,  # no stray ./floe.toml
        env={**os.environ, **(env or {})},
        check=False,
    )


def http_get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.fixture(scope="module")
def caught_up(broker: Broker, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Poll the CLI's JSON until every partition's committed offset is its log end."""
    cwd = tmp_path_factory.mktemp("cli")
    deadline = time.monotonic() + DEADLINE_S
    while True:
        out = cli(TOPIC, "--admin", broker.admin_url, "--output", "json", cwd=cwd)
        assert out.returncode == 0, out.stderr
        status: dict[str, Any] = json.loads(out.stdout)
        parts = status["partitions"]
        if all(p["committed_offset"] == p["log_end_offset"] > 0 for p in parts):
            return status
        assert time.monotonic() < deadline, f"not caught up: {status}"
        broker.assert_alive()
        time.sleep(1)


def test_status_reaches_the_log_end(broker: Broker, caught_up: dict[str, Any]) -> None:
    s = caught_up
    assert (s["topic"], s["enabled"], s["status"]) == (TOPIC, True, "ok")
    assert s["table"].startswith(TABLE) and len(s["table"]) == len(TABLE) + 8
    assert s["catalog_table"] == f"floe.{s['table']}"
    assert s["settings"]["commit_interval_ms"] == 1000
    assert s["settings"]["convert_value_type"] == "string"
    parts = {p["partition"]: p for p in s["partitions"]}
    assert {p: parts[p]["committed_offset"] for p in parts} == COUNTS
    assert {p: parts[p]["log_end_offset"] for p in parts} == COUNTS
    assert all(p["lag_records"] == 0 and p["lag_seconds"] == 0 for p in parts.values())
    assert s["last_commit_rows"] > 0 and s["last_commit_files"] > 0
    assert s["last_commit_duration_s"] > 0 and s["last_commit_id"]
    assert s["snapshots"] >= 1 and s["rounds"] >= 1
    assert (s["skipped_records"], s["lost_records"], s["last_error"]) == (0, 0, None)

    # the HTTP API answers the same document (nothing new to commit meanwhile)
    assert http_get(f"{broker.admin_url}/api/v1/tables/{TOPIC}") == (200, s)
    code, listing = http_get(f"{broker.admin_url}/api/v1/tables")
    assert code == 200 and listing == {"tables": [s]}
    assert http_get(f"{broker.admin_url}/api/v1/health")[1]["status"] == "ok"
    code, spec = http_get(f"{broker.admin_url}/api/v1/openapi.json")
    assert code == 200 and "/api/v1/tables/{topic}" in spec["paths"]


def test_table_form_with_the_configured_admin_port(
    broker: Broker, caught_up: dict[str, Any], tmp_path: Path
) -> None:
    # no --admin: admin.host/admin.port from the configuration (here FLOE_ADMIN_PORT)
    out = cli(TOPIC, cwd=tmp_path, env={"FLOE_ADMIN_PORT": str(broker.admin_port)})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert f"Table:       {caught_up['table']} (Spark SQL: floe.{caught_up['table']})" in lines
    assert "Status:      ok" in lines
    rows = [line.split() for line in lines[lines.index("") + 1 :]]
    assert rows == [
        ["PARTITION", "COMMITTED", "LOG-END", "LAG", "LAG-SECONDS", "HELD-BYTES"],
        ["0", "30", "30", "0", "0.0", "0"],
        ["1", "20", "20", "0", "0.0", "0"],
    ]


def test_not_a_table_topic(broker: Broker, tmp_path: Path) -> None:
    code, body = http_get(f"{broker.admin_url}/api/v1/tables/{PLAIN}")
    assert (code, body) == (
        404,
        {"error_code": 404, "message": f"topic {PLAIN!r} is not a table topic"},
    )
    code, body = http_get(f"{broker.admin_url}/api/v1/tables/no-such-topic")
    assert (code, body["error_code"]) == (404, 404)
    out = cli(PLAIN, "--admin", broker.admin_url, cwd=tmp_path)
    assert out.returncode == 1
    assert out.stdout == ""
    assert out.stderr == f"floe: error: topic {PLAIN!r} is not a table topic\n"


def test_unreachable_admin_is_one_line(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    out = cli("--admin", url, cwd=tmp_path)
    assert out.returncode == 1
    assert out.stderr == f"floe: cannot reach the admin API at {url}: connection refused\n"


def test_taken_admin_port_stops_floe_up_with_one_line(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        b = Broker(tmp_path / "data")
        b.admin_port = port
        try:
            out = subprocess.run(
                b.command(), capture_output=True, text=True, timeout=60, cwd=tmp_path, check=False
            )
        finally:
            b.close()
    assert out.returncode == 1
    last = out.stderr.splitlines()[-1]
    assert (
        last
        == f"floe: error: cannot bind the admin API to 127.0.0.1:{port}: Address already in use"
    )
    assert "Traceback" not in out.stderr
