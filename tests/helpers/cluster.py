"""Settings of a ``floe up`` in a cluster: its log in a SeaweedFS bucket and its
membership in a metadata store (``cluster.metadata.url``)."""

from __future__ import annotations

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
