"""``floe cluster status`` and the console's Brokers section against real brokers: one
without a cluster (the session broker), one in a cluster (a SQLite metadata store, its
log in a real S3 server, SeaweedFS), the CLI run as a subprocess like a user would."""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from floe.cli.cluster import role_at
from helpers.admin import create_topic
from helpers.broker import Broker, floe_bin
from helpers.cluster import cluster_settings, wait_writer
from helpers.seaweed import SeaweedServer, seaweed_server

BUCKET = "floe-status"
WAIT_S = 30.0


@pytest.fixture(scope="module")
def s3() -> Iterator[SeaweedServer]:
    with seaweed_server(BUCKET) as server:
        yield server


def floe(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [floe_bin(), *args], capture_output=True, text=True, timeout=60, check=False
    )


def status(b: Broker) -> dict[str, Any]:
    """``floe cluster status -o json`` of ``b``."""
    done = floe("cluster", "status", "-o", "json", "--admin", b.admin_url)
    assert done.returncode == 0, done.stderr
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


def overview_page(b: Broker) -> str:
    with urllib.request.urlopen(f"{b.admin_url}/", timeout=10) as resp:
        return str(resp.read().decode())


def test_a_broker_without_a_cluster_is_its_only_member(broker: Broker) -> None:
    doc = status(broker)
    assert doc["brokers"] == [
        {"node_id": 1, "host": broker.host, "port": broker.port, "rack": None, "self": True}
    ]
    assert doc["membership"] is None
    assert doc["ownership"] == []
    assert doc["controller"] == 1
    # every table topic of the session broker, if another test made one, runs here
    assert {t["coordinator"] for t in doc["table_coordinators"]} <= {1}
    assert doc["kafka"] == broker.bootstrap  # the fields from before are still there

    table = floe("cluster", "status", "--admin", broker.admin_url)
    assert table.returncode == 0, table.stderr
    assert "no cluster (single broker)" in table.stdout
    assert any(
        line.split()[:3] == ["1", broker.host, str(broker.port)] and "this broker" in line
        for line in table.stdout.splitlines()
    ), table.stdout
    assert "No cluster: this broker alone" in overview_page(broker)


def test_a_cluster_member_shows_its_lease_and_partitions(
    broker_factory: Callable[..., Broker], s3: SeaweedServer, tmp_path: Path
) -> None:
    prefix = f"s-{uuid.uuid4().hex[:8]}"
    url = f"sqlite:///{tmp_path / 'meta' / 'cluster.db'}"
    b = wait_writer(broker_factory(cluster_settings(s3, BUCKET, prefix, url)))
    topic = create_topic(b.bootstrap, f"t-{uuid.uuid4().hex[:8]}", partitions=2)

    wanted = [{"topic": topic, "partition": p, "owner": 1, "epoch": 1} for p in range(2)]
    deadline = time.monotonic() + WAIT_S
    while True:
        doc = status(b)
        if [o for o in doc["ownership"] if o["topic"] == topic] == wanted:
            break
        assert time.monotonic() < deadline, f"not owned within {WAIT_S} s: {doc}"
        time.sleep(0.2)
    membership = doc["membership"]
    assert membership["store"].startswith("sqlite:///")
    assert membership["lease_valid_for_ms"] > 0
    assert membership["fenced"] is None
    assert membership["lease_losses"] == 0
    assert membership["session_timeout_ms"] == 3000
    assert membership["owned_partitions"] >= 2
    assert membership["seen_at_ms"] > 0
    assert doc["brokers"] == [
        {"node_id": 1, "host": b.host, "port": b.port, "rack": None, "self": True}
    ]

    table = floe("cluster", "status", "--admin", b.admin_url).stdout
    assert membership["store"] in table
    assert "valid for" in table

    page = overview_page(b)
    assert "<h2>Brokers</h2>" in page
    assert f"<code>{b.host}:{b.port}</code>" in page
    assert membership["store"] in page


def metrics(b: Broker) -> str:
    with urllib.request.urlopen(f"{b.admin_url}/metrics", timeout=10) as resp:
        return str(resp.read().decode())


def role(b: Broker) -> str:
    membership = status(b)["membership"]
    return str(membership["role"])


def wait_until(what: str, check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {WAIT_S} s"
        time.sleep(0.2)


def test_every_broker_of_a_cluster_answers_status_and_metrics(
    broker_factory: Callable[..., Broker], s3: SeaweedServer, tmp_path: Path
) -> None:
    """A member (leading partitions of its own) and a standby serve ``floe cluster
    status`` and ``/metrics`` on their admin ports, in their own role; a member that
    becomes the writer serves the writer's admin API on the same port."""
    prefix = f"m-{uuid.uuid4().hex[:8]}"
    url = f"sqlite:///{tmp_path / 'meta' / 'cluster.db'}"
    shared = {"cluster.share.partitions": "true"}
    writer = wait_writer(
        broker_factory(cluster_settings(s3, BUCKET, prefix, url, **{"node.id": "1", **shared}))
    )
    member = broker_factory(cluster_settings(s3, BUCKET, prefix, url, **{"node.id": "2", **shared}))
    topic = create_topic(writer.bootstrap, f"t-{uuid.uuid4().hex[:8]}", partitions=4)

    seen: list[dict[str, Any]] = []

    def member_leads() -> bool:
        """One answer in which the member owns a partition of the topic, as it and the
        store see it (the writer records a new topic's owners before each member takes
        its partitions up: until then the view names it but it owns nothing)."""
        doc = status(member)
        seen.append(doc)
        return doc["membership"]["owned_partitions"] >= 1 and any(
            o["topic"] == topic and o["owner"] == 2 for o in doc["ownership"]
        )

    wait_until("the member's admin API answers", lambda: role_at(member.admin_url) == "member")
    wait_until("the member leads a partition", member_leads)
    doc = seen[-1]
    assert doc["membership"]["role"] == "member" and doc["node_id"] == 2
    assert doc["kafka"] == member.bootstrap
    assert [b["node_id"] for b in doc["brokers"]] == [1, 2]
    assert doc["subjects"] is None  # only the writer keeps them
    assert doc["groups"] == 0  # those it coordinates: none yet
    assert doc["controller"] == 1
    assert doc["table_coordinators"] == []
    assert role(writer) == "writer"
    table = floe("cluster", "status", "--admin", member.admin_url)
    assert table.returncode == 0, table.stderr
    assert "member" in table.stdout and "valid for" in table.stdout
    # /metrics: its lease, and the partitions it leads (the writer may move one meanwhile)
    wait_until(
        "the member's /metrics show a partition of the topic",
        lambda: re.search(rf'partition="\d+",topic="{topic}"', metrics(member)) is not None,
    )
    assert "floe_cluster_partitions_owned" in metrics(member)

    writer.kill()  # the member takes over: the writer's admin API on the same port
    wait_until("the member serves as the writer", lambda: role_at(member.admin_url) == "writer")
    assert "floe_cluster_partitions_owned" in metrics(member)

    standby_prefix = f"s-{uuid.uuid4().hex[:8]}"
    standby_url = f"sqlite:///{tmp_path / 'meta2' / 'cluster.db'}"
    first = wait_writer(
        broker_factory(
            cluster_settings(s3, BUCKET, standby_prefix, standby_url, **{"node.id": "1"})
        )
    )
    standby = broker_factory(
        cluster_settings(s3, BUCKET, standby_prefix, standby_url, **{"node.id": "2"})
    )
    wait_until("the standby answers", lambda: role_at(standby.admin_url) == "standby")
    assert role(first) == "writer"
    assert "floe_cluster_lease_valid_seconds" in metrics(standby)
