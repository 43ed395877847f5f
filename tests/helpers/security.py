"""A broker with users and the authorizer, as the security tests set it up: PLAINTEXT
on its port (for tools without credentials) and SASL_PLAINTEXT (SCRAM) beside it, the
bootstrap admin a super user, and Kafka AdminClient calls for users and ACLs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from helpers.broker import Broker, fresh_ports

ADMIN, ADMIN_PASSWORD = "admin", "admin-secret"
TIMEOUT = 15


def secured_broker(data_dir: Path, **settings: str) -> tuple[Broker, str]:
    """A broker (not started) with the authorizer on and the bootstrap admin, and the
    address of its SASL_PLAINTEXT listener; ``settings`` add to or override those."""
    b = Broker(data_dir)
    (sasl_port,) = fresh_ports(1)
    b.settings.update(
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{b.port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
            "authorizer.enable": "true",
            "security.bootstrap.user": ADMIN,
            "security.bootstrap.password": ADMIN_PASSWORD,
            **settings,
        }
    )
    return b, f"127.0.0.1:{sasl_port}"


def sasl_client(address: str, user: str, password: str) -> dict[str, Any]:
    """librdkafka settings for ``user`` on a SASL_PLAINTEXT listener (SCRAM-SHA-256)."""
    return {
        "bootstrap.servers": address,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": user,
        "sasl.password": password,
    }


def set_password(admin: AdminClient, user: str, password: str) -> None:
    """Create ``user`` or change their password (SCRAM-SHA-256, 4096 iterations)."""
    upsert = UserScramCredentialUpsertion(
        user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), password.encode()
    )
    for f in admin.alter_user_scram_credentials([upsert]).values():
        f.result(TIMEOUT)


def allow_topic(admin: AdminClient, principal: str, operation: AclOperation, topic: str) -> None:
    """An ALLOW ACL for ``principal`` on the literal topic ``topic``, from any host."""
    binding = AclBinding(
        ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, principal, "*",
        operation, AclPermissionType.ALLOW,
    )  # fmt: skip
    for f in admin.create_acls([binding]).values():
        f.result(TIMEOUT)
