"""Kafka's authorization as the unmodified Java Admin (kafka-clients 3.9.1) sees it.

Invariants: ``Admin.describeCluster()`` works for any authenticated principal, ACLs or
not, as on Kafka (only the authorized operations are withheld); asked for them, the
cluster, topic and group describes return exactly the operations the principal's ACLs
allow, with Kafka's implied ones (DESCRIBE with READ, WRITE or ALTER, DESCRIBE_CONFIGS
with ALTER_CONFIGS) and every operation of the resource for a super user; a topic or group the
principal may not describe is refused with Kafka's exception.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from helpers.broker import Broker
from helpers.java import FloeJava, floe_clients
from helpers.security import (
    ADMIN,
    ADMIN_PASSWORD,
    TIMEOUT,
    allow_topic,
    sasl_client,
    secured_broker,
    set_password,
)

ALICE, ALICE_PASSWORD = "alice", "alice-secret"
"""A user without any ACL."""
BOB, BOB_PASSWORD = "bob", "bob-secret"
"""A user with ALTER and ALTER_CONFIGS on the cluster, WRITE on TOPIC, READ on GROUP."""
TOPIC, GROUP = "ops-topic", "ops-group"
NODE_ID = 7
CLUSTER_OPERATIONS = (
    "ALTER,ALTER_CONFIGS,CLUSTER_ACTION,CREATE,DESCRIBE,DESCRIBE_CONFIGS,IDEMPOTENT_WRITE"
)
"""Every operation Kafka defines on the cluster resource, sorted."""


@pytest.fixture(scope="module")
def java(tmp_path_factory: pytest.TempPathFactory) -> FloeJava:
    return floe_clients(tmp_path_factory)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Broker, str]]:
    """The broker and its SASL_PLAINTEXT address; alice and bob exist, bob has his ACLs,
    and GROUP has an offset committed on TOPIC."""
    root: Path = tmp_path_factory.mktemp("security-java")
    settings = {"auto.create.topics.enable": "false", "node.id": str(NODE_ID)}
    b, sasl = secured_broker(root / "data", **settings)
    try:
        b.start()
        admin = AdminClient(sasl_client(sasl, ADMIN, ADMIN_PASSWORD))
        for f in admin.create_topics([NewTopic(TOPIC, 1)]).values():
            f.result(TIMEOUT)
        set_password(admin, ALICE, ALICE_PASSWORD)
        set_password(admin, BOB, BOB_PASSWORD)
        allow_topic(admin, f"User:{BOB}", AclOperation.WRITE, TOPIC)
        bindings = [
            *(
                AclBinding(
                    ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL,
                    f"User:{BOB}", "*", op, AclPermissionType.ALLOW,
                )
                for op in (AclOperation.ALTER, AclOperation.ALTER_CONFIGS)
            ),
            AclBinding(
                ResourceType.GROUP, GROUP, ResourcePatternType.LITERAL,
                f"User:{BOB}", "*", AclOperation.READ, AclPermissionType.ALLOW,
            ),
        ]  # fmt: skip
        for f in admin.create_acls(bindings).values():
            f.result(TIMEOUT)
        offsets = [ck.TopicPartition(TOPIC, 0, 0)]
        committed = admin.alter_consumer_group_offsets(
            [ck.ConsumerGroupTopicPartitions(GROUP, offsets)]
        )
        for f in committed.values():
            f.result(TIMEOUT)
        yield b, sasl
        b.stop()
    finally:
        b.close()


def _describe(java: FloeJava, sasl: str, user: str, password: str) -> dict[str, str]:
    """What ``FloeClients authorized`` printed for ``user``: ``nodes``, ``cluster`` and each
    ``OPS``/``DENIED`` line by its subject (``ops cluster``, ``denied topic``, ...)."""
    lines = java.run("authorized", sasl, user, password, TOPIC, GROUP)
    seen: dict[str, str] = {}
    for line in lines:
        kind, _, rest = line.partition(" ")
        if kind == "NODE":
            seen["nodes"] = (seen.get("nodes", "") + " " + rest).strip()
        elif kind == "CLUSTER":
            seen["cluster"] = rest
        elif kind in ("OPS", "DENIED"):
            subject, _, value = rest.partition(" ")
            seen[f"{kind.lower()} {subject}"] = value
    return seen


def test_describe_cluster_answers_a_principal_without_acls(
    java: FloeJava, secured: tuple[Broker, str]
) -> None:
    _, sasl = secured
    seen = _describe(java, sasl, ALICE, ALICE_PASSWORD)
    host, port = sasl.split(":")
    assert seen["nodes"] == f"{NODE_ID} {host} {port}"
    cluster_id, controller = seen["cluster"].split(" ")
    assert cluster_id and int(controller) == NODE_ID
    assert seen["ops cluster"] == "-", "alice has no operation on the cluster"
    assert seen["denied topic"] == "TopicAuthorizationException"
    assert seen["denied group"] == "GroupAuthorizationException"


def test_authorized_operations_are_the_acls_and_what_they_imply(
    java: FloeJava, secured: tuple[Broker, str]
) -> None:
    _, sasl = secured
    seen = _describe(java, sasl, BOB, BOB_PASSWORD)
    assert seen["ops cluster"] == "ALTER,ALTER_CONFIGS,DESCRIBE,DESCRIBE_CONFIGS"
    assert seen["ops topic"] == "DESCRIBE,WRITE"
    assert seen["ops group"] == "DESCRIBE,READ"


def test_a_super_user_is_authorized_for_every_operation(
    java: FloeJava, secured: tuple[Broker, str]
) -> None:
    _, sasl = secured
    seen = _describe(java, sasl, ADMIN, ADMIN_PASSWORD)
    assert seen["ops cluster"] == CLUSTER_OPERATIONS
    assert seen["ops topic"] == (
        "ALTER,ALTER_CONFIGS,CREATE,DELETE,DESCRIBE,DESCRIBE_CONFIGS,READ,WRITE"
    )
    assert seen["ops group"] == "DELETE,DESCRIBE,READ"
