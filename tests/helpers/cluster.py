"""Settings of a ``floe up`` in a cluster: its log in a SeaweedFS bucket and its
membership in a metadata store (``cluster.metadata.url``)."""

from __future__ import annotations

import socket
import time

from helpers.broker import Broker
from helpers.seaweed import SeaweedServer

SESSION_MS = 3000
"""cluster.session.timeout.ms of the test brokers: short, so leases lapse quickly."""


def namespace(prefix: str) -> str:
    """The metadata namespace of the brokers writing under storage ``prefix``."""
    return prefix.replace("-", "_")


def cluster_settings(
    s3: SeaweedServer, bucket: str, prefix: str, url: str, **extra: str
) -> dict[str, str]:
    """A broker writing under ``prefix`` of ``bucket``, a member of the cluster whose
    metadata is at ``url`` (namespace from the prefix)."""
    return {
        "storage.type": "s3",
        "storage.s3.bucket": bucket,
        "storage.s3.prefix": prefix,
        "storage.s3.endpoint": s3.s3_endpoint,
        "storage.s3.region": s3.region,
        "storage.s3.access.key.id": s3.access_key,
        "storage.s3.secret.access.key": s3.secret_key,
        "cluster.metadata.url": url,
        "cluster.metadata.namespace": namespace(prefix),
        "cluster.session.timeout.ms": str(SESSION_MS),
        **extra,
    }


def writing(b: Broker) -> bool:
    """``b`` runs and is the cluster's writer: its admin API listens (a standby answers
    only Metadata, on its Kafka port, and starts its admin API once it takes over)."""
    if not b.running:
        return False
    try:
        with socket.create_connection((b.host, b.admin_port), timeout=0.5):
            return True
    except OSError:
        return False


def wait_writer(b: Broker, timeout_s: float = 60.0) -> Broker:
    """Wait until ``b`` took the writer lease and serves.

    Raises:
        AssertionError: it did not within ``timeout_s``, or exited.
    """
    deadline = time.monotonic() + timeout_s
    while not writing(b):
        b.assert_alive()
        assert time.monotonic() < deadline, f"broker not the writer after {timeout_s} s"
        time.sleep(0.05)
    return b
