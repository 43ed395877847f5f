"""Static membership and group administration through confluent-kafka."""

from __future__ import annotations

import time
from typing import Any

import confluent_kafka as ck
import pytest

from helpers.admin import admin, create_topic
from helpers.clients import confluent_config

GROUP_SETTINGS = {"group.initial.rebalance.delay.ms": "100"}


class Member:
    """A confluent-kafka group member polled from the test thread, counting its
    rebalance callbacks."""

    def __init__(self, bootstrap: str, topic: str, group: str, instance: str | None) -> None:
        extra: dict[str, object] = {"group.id": group, "session.timeout.ms": 6000}
        if instance is not None:
            extra["group.instance.id"] = instance
        self.consumer = ck.Consumer(confluent_config(bootstrap, **extra))
        self.assigned: list[int] = []
        self.revocations = 0

        def on_assign(c: ck.Consumer, parts: list[ck.TopicPartition]) -> None:
            self.assigned = sorted(p.partition for p in parts)

        def on_revoke(c: ck.Consumer, parts: list[ck.TopicPartition]) -> None:
            self.revocations += 1
            self.assigned = []

        self.consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)

    def poll(self) -> None:
        self.consumer.poll(0.05)


def poll_until(members: list[Member], cond: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        for m in members:
            m.poll()


def describe(bootstrap: str, group: str) -> Any:
    return admin(bootstrap).describe_consumer_groups([group])[group].result(30)


def test_static_member_restart_keeps_the_assignment(broker_factory: Any) -> None:
    broker = broker_factory(GROUP_SETTINGS)
    topic = create_topic(broker.bootstrap, partitions=4)
    b = Member(broker.bootstrap, topic, "g-static", "instance-b")
    poll_until([b], lambda: len(b.assigned) == 4, 30, "b to own every partition")
    a = Member(broker.bootstrap, topic, "g-static", "instance-a")
    poll_until([a, b], lambda: len(a.assigned) == 2 == len(b.assigned), 30, "a and b to share")
    before = {
        m.member_id: m.group_instance_id for m in describe(broker.bootstrap, "g-static").members
    }
    revocations = b.revocations
    owned = a.assigned
    a.consumer.close()  # a static member sends no LeaveGroup
    again = Member(broker.bootstrap, topic, "g-static", "instance-a")
    poll_until([again, b], lambda: again.assigned == owned, 30, "the restarted member's partitions")
    end = time.monotonic() + 2
    while time.monotonic() < end:
        for m in (again, b):
            m.poll()
    assert b.revocations == revocations, "the other member was made to rebalance"
    after = describe(broker.bootstrap, "g-static")
    assert after.state == ck.ConsumerGroupState.STABLE
    now = {m.member_id: m.group_instance_id for m in after.members}
    assert sorted(now.values()) == ["instance-a", "instance-b"]
    assert now.keys() != before.keys()  # instance-a has a new member id
    again.consumer.close()
    b.consumer.close()


def test_delete_groups_only_when_empty(broker_factory: Any) -> None:
    broker = broker_factory(GROUP_SETTINGS)
    topic = create_topic(broker.bootstrap, partitions=1)
    m = Member(broker.bootstrap, topic, "g-delete", None)
    poll_until([m], lambda: m.assigned == [0], 30, "assignment")
    with pytest.raises(ck.KafkaException) as refused:
        admin(broker.bootstrap).delete_consumer_groups(["g-delete"])["g-delete"].result(30)
    assert refused.value.args[0].code() == ck.KafkaError.NON_EMPTY_GROUP
    m.consumer.close()
    admin(broker.bootstrap).delete_consumer_groups(["g-delete"])["g-delete"].result(30)
    listed = admin(broker.bootstrap).list_consumer_groups().result(30).valid
    assert "g-delete" not in {g.group_id for g in listed}
    with pytest.raises(ck.KafkaException) as missing:
        admin(broker.bootstrap).delete_consumer_groups(["g-delete"])["g-delete"].result(30)
    assert missing.value.args[0].code() == ck.KafkaError.GROUP_ID_NOT_FOUND


def test_admin_commits_and_deleting_the_topic_removes_them(broker: Any) -> None:
    """AlterConsumerGroupOffsets is a simple commit (generation -1, no member)."""
    topic = create_topic(broker.bootstrap, partitions=2)
    client = admin(broker.bootstrap)
    group = f"g-admin-{topic}"
    request = ck.ConsumerGroupTopicPartitions(
        group, [ck.TopicPartition(topic, 0, 0), ck.TopicPartition(topic, 1, 0)]
    )
    client.alter_consumer_group_offsets([request])[group].result(30)
    listed = client.list_consumer_group_offsets([ck.ConsumerGroupTopicPartitions(group)])
    assert sorted(
        (tp.partition, tp.offset) for tp in listed[group].result(30).topic_partitions
    ) == [
        (0, 0),
        (1, 0),
    ]
    client.delete_topics([topic])[topic].result(30)
    listed = client.list_consumer_group_offsets([ck.ConsumerGroupTopicPartitions(group)])
    assert listed[group].result(30).topic_partitions == []
