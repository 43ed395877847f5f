"""Every request a broker makes of its metadata store is counted by operation and
exported (``floe_cluster_store_requests_total``): the measure of what a broker costs
the store. A real SQLite store; a member joins, renews and claims a partition."""

from __future__ import annotations

import time
from pathlib import Path

from prometheus_client.core import CounterMetricFamily

from floe.cluster.interface import BrokerInfo
from floe.cluster.membership import Membership
from floe.cluster.sqlite import SqliteMetadataStore
from floe.observability.collectors import cluster_families
from floe.types import PartitionId, TopicName

TTL_S = 1.5
KEY = (TopicName("t"), PartitionId(0))


def test_requests_are_counted_by_operation_and_exported(tmp_path: Path) -> None:
    member = Membership(
        SqliteMetadataStore(tmp_path / "cluster.db"), BrokerInfo(2, "127.0.0.1", 9002), TTL_S,
        "db", share=True,
    )  # fmt: skip
    try:
        member.join()
        assert member.claim([KEY]) == [KEY]
        joined = dict(member.store_requests)
        time.sleep(TTL_S)  # two renewals at a third of the session timeout
        renewed = dict(member.store_requests)
    finally:
        member.leave()
    assert joined["register"] >= 1 and joined["claim"] == 1
    assert renewed["keepalive"] >= joined.get("keepalive", 0) + 1
    (family,) = [f for f in cluster_families(member) if f.name == "floe_cluster_store_requests"]
    assert isinstance(family, CounterMetricFamily)
    exported = {s.labels["operation"]: s.value for s in family.samples if s.name.endswith("_total")}
    assert exported["claim"] == 1 and exported["register"] >= 1
