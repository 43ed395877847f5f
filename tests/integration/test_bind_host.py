"""``floe up --host H`` binds the Kafka, Schema Registry and admin listeners to H, so
two Floes run side by side on 127.0.0.2 and 127.0.0.3 with the same ports and one flag
each (registry.host and admin.host, when set, still win)."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from confluent_kafka.admin import AdminClient

from helpers.broker import Broker


def _call(url: str, body: object = None) -> object:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def _kafka_topics(bootstrap: str) -> set[str]:
    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics)


def test_two_floes_on_two_loopback_addresses_share_their_ports(tmp_path: Path) -> None:
    first = Broker(tmp_path / "a")
    first.host = "127.0.0.2"
    second = Broker(tmp_path / "b")
    second.host = "127.0.0.3"
    second.port, second.registry_port, second.admin_port = (
        first.port, first.registry_port, first.admin_port
    )  # fmt: skip
    try:
        for b in (first, second):
            b.start()
        for b, mine in ((first, "only-on-a"), (second, "only-on-b")):
            assert b.admin_url.startswith(f"http://{b.host}:")
            _call(f"{b.admin_url}/api/v1/topics", {"name": mine})
            assert _call(f"{b.registry_url}/subjects") == []
        for b, mine in ((first, "only-on-a"), (second, "only-on-b")):
            topics = _call(f"{b.admin_url}/api/v1/topics")
            assert isinstance(topics, dict)
            assert [t["topic"] for t in topics["topics"]] == [mine]
            assert mine in _kafka_topics(b.bootstrap)
        assert "only-on-a" not in _kafka_topics(second.bootstrap)
        for b in (first, second):
            b.stop()
    finally:
        for b in (first, second):
            b.close()
