"""``cluster.metadata.url`` to a metadata store: ``etcd://``, ``postgresql://`` or
``sqlite:///``, each behind :class:`~floe.cluster.interface.MetadataStore`."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from floe.cluster.interface import MetadataStore
from floe.errors import ConfigError


def open_metadata_store(url: str, namespace: str, timeout_s: float) -> MetadataStore:
    """A client of the store at ``url``, keeping this cluster's facts under
    ``namespace`` (etcd key prefix, PostgreSQL schema; a SQLite file is one cluster).

    Raises:
        ConfigError: the URL names no supported store, or its client is not installed.
        MetadataUnavailableError: the store cannot be reached (PostgreSQL and SQLite
            connect here; etcd on the first call).
    """
    scheme, _, rest = url.partition("://")
    if scheme == "etcd":
        try:
            from floe.cluster.etcd import EtcdMetadataStore
        except ImportError as exc:
            raise ConfigError(
                f"the etcd metadata store needs grpcio and python3-etcd3 ({exc}): "
                "pip install 'floe[cluster]'"
            ) from None

        endpoints = rest.split("/", 1)[0]
        return EtcdMetadataStore(endpoints, prefix=f"{namespace}/", timeout_s=timeout_s)
    if scheme in ("postgresql", "postgres"):
        from floe.cluster.postgres import PostgresMetadataStore

        return PostgresMetadataStore(url, schema=namespace, timeout_s=timeout_s)
    if scheme == "sqlite":
        from floe.cluster.sqlite import SqliteMetadataStore

        path = rest  # sqlite:///abs/path
        if not path.startswith("/"):
            raise ConfigError(f"sqlite metadata store URL needs an absolute path: {url}")
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        return SqliteMetadataStore(Path(path), timeout_s=timeout_s)
    raise ConfigError(
        f"cluster.metadata.url {redacted(url)!r}: not etcd://, postgresql://, sqlite:///"
    )


def redacted(url: str) -> str:
    """``url`` without a password, for logs and status."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()
