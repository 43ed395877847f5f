"""A broker that starts into a fault waits it out instead of exiting: real ``floe up``
processes sharing partitions on SeaweedFS and etcd, each link of the starting broker
through a proxy the test cuts and heals (:mod:`helpers.chaos_proxy`).

A broker that exits at start-up when the metadata store or the bucket is briefly out of
reach needs a supervisor to come back, and under one every such fault is a restart
loop (the chaos suite saw both exits). Kafka's brokers wait for their controller
quorum instead; so does Floe's: it leaves the cluster, waits, and joins again through
a clean open, logging each try (``cluster.start_retry``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

import helpers.cluster
from helpers.admin import create_topic
from helpers.broker import Broker
from helpers.chaos_proxy import Proxy, ProxyHub
from helpers.cluster import consume_values, produce_round_robin, wait_for, wait_writer
from helpers.cluster import leaders_as_answered_by as leaders
from helpers.cluster_etcd import EtcdServer
from helpers.seaweed import SeaweedServer

BUCKET = "floe-start-faults"
PARTITIONS = 4


def _member_through(
    hub: ProxyHub, s3: SeaweedServer, etcd: EtcdServer, prefix: str
) -> tuple[dict[str, str], Proxy, Proxy]:
    """Node 2's settings with its metadata-store and bucket links through proxies."""
    meta = hub.proxy("meta-2", etcd.endpoint)
    bucket = hub.proxy("s3-2", s3.s3_endpoint.removeprefix("http://"))
    settings = helpers.cluster.sharing_settings(s3, BUCKET, prefix, meta.address, 2)
    settings["storage.s3.endpoint"] = f"http://{bucket.address}"
    return settings, meta, bucket


def _still_waiting(member: Broker, tries: int) -> None:
    """``member`` logged ``tries`` start-up retries and is still running."""
    wait_for(
        f"the member retries its start {tries} times",
        lambda: member.stderr_text().count("cluster.start_retry") >= tries or not member.running,
        timeout_s=60,
    )
    assert member.running, f"the member exited:\n{member.stderr_tail()}"


def _serves_its_share(writer: Broker, member: Broker) -> None:
    """The member joined, leads partitions of a new topic, and nothing produced through
    the cluster is lost."""
    wait_for("the member listens", lambda: "member.listening" in member.stderr_text(), 60)
    topic = create_topic(writer.bootstrap, partitions=PARTITIONS)
    wait_for(
        "the member leads partitions",
        lambda: 2 in set(leaders(writer.bootstrap, topic).values()),
        timeout_s=60,
    )
    values = [f"v{i}".encode() for i in range(100)]
    both = f"{writer.bootstrap},{member.bootstrap}"
    assert sorted(produce_round_robin(both, topic, values, PARTITIONS)) == sorted(values)
    assert sorted(consume_values(both, topic, len(values))) == sorted(values)


@pytest.mark.parametrize("link", ["metadata store", "bucket"])
def test_a_member_started_while_a_link_is_cut_waits_then_joins(
    broker_factory: Callable[..., Broker],
    s3: SeaweedServer,
    etcd: EtcdServer,
    hub: ProxyHub,
    link: str,
) -> None:
    prefix = f"sf-{uuid.uuid4().hex[:8]}"
    writer = wait_writer(
        broker_factory(helpers.cluster.sharing_settings(s3, BUCKET, prefix, etcd.endpoint, 1))
    )
    settings, meta, bucket = _member_through(hub, s3, etcd, prefix)
    cut = meta if link == "metadata store" else bucket
    cut.cut()
    member = broker_factory(settings, wait=False)
    _still_waiting(member, tries=2)
    cut.heal()
    _serves_its_share(writer, member)
