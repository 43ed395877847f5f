"""Secrets in the broker configuration: which keys are sensitive, and that neither
``floe config`` nor the configuration reference prints their values."""

from __future__ import annotations

from pathlib import Path

import pytest

from floe.cli.main import main
from floe.config.broker import BROKER_KEYS, CATALOG_URI
from floe.config.loader import looks_sensitive
from floe.config.reference import render


@pytest.mark.parametrize(
    "name",
    [
        "catalog.properties.s3.secret-access-key",
        "catalog.properties.s3.access-key-id",
        "catalog.properties.jdbc.password",
        "catalog.properties.credential",
        "catalog.pyiceberg.token",
        "catalog.spark.rest.auth.oauth2.token",
        "catalog.spark.header.Authorization",
        "spark.hadoop.fs.s3a.secret.key",
        "spark.hadoop.fs.s3a.session.token",
        "spark.ssl.keyStorePassword",
    ],
)
def test_secret_names(name: str) -> None:
    assert looks_sensitive(name, "value")


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("catalog.properties.uri", "jdbc:postgresql://db/iceberg?user=floe&password=hunter2"),
        ("catalog.properties.uri", "http://floe:hunter2@rest:8181/"),
        ("catalog.spark.oauth2-server-uri", "https://auth/token?client_secret=x"),
        ("spark.driver.extraJavaOptions", "-Dtoken=abc"),
    ],
)
def test_secret_values(name: str, value: str) -> None:
    assert looks_sensitive(name, value)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("spark.sql.shuffle.partitions", "4"),
        ("catalog.properties.uri", "http://rest:8181/"),
        ("catalog.properties.warehouse", "s3://warehouse/"),
        ("catalog.properties.s3.path-style-access", "true"),
        ("catalog.properties.uri", "jdbc:postgresql://db/iceberg?user=floe"),
    ],
)
def test_plain_settings(name: str, value: str) -> None:
    assert not looks_sensitive(name, value)


def test_declared_sensitive_keys() -> None:
    assert CATALOG_URI.sensitive
    assert [k.name for k in BROKER_KEYS if k.sensitive] == [
        "ssl.key.password",
        "security.bootstrap.password",
        "cluster.metadata.url",  # a PostgreSQL URI may carry the password
        "storage.s3.secret.access.key",
        "catalog.uri",
        "catalog.s3.access.key.id",
        "catalog.s3.secret.access.key",
    ]


def test_reference_marks_sensitive_keys() -> None:
    row = next(line for line in render().splitlines() if line.startswith("| `catalog.uri` |"))
    assert "Sensitive" in row


def test_floe_config_masks_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    settings = {
        "catalog.uri": "jdbc:postgresql://db/iceberg?user=floe&password=SECRET-0",
        "catalog.properties.s3.secret-access-key": "SECRET-1",
        "spark.hadoop.fs.s3a.access.key": "SECRET-2",
        "catalog.properties.s3.endpoint": "http://minio:SECRET-3@127.0.0.1:9000",
        "spark.sql.shuffle.partitions": "7",
    }
    argv = ["config"]
    for name, value in settings.items():
        argv += ["--set", f"{name}={value}"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "SECRET" not in out
    lines = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    assert "********" in lines["catalog.uri"] and "command line" in lines["catalog.uri"]
    assert "********" in lines["catalog.properties.s3.secret-access-key"]
    assert " 7 " in lines["spark.sql.shuffle.partitions"]
    assert "********" not in lines["data.dir"]


def test_log_lines_get_uris_with_their_secrets_masked() -> None:
    from floe.config.loader import mask_secrets

    assert (
        mask_secrets("jdbc:postgresql://h:5432/db?user=floe&password=s3cret&x=1")
        == "jdbc:postgresql://h:5432/db?user=floe&password=********&x=1"
    )
    assert (
        mask_secrets("postgresql+psycopg://floe:pw@h/db")
        == "postgresql+psycopg://floe:********@h/db"
    )
    plain = "jdbc:sqlite:/p/iceberg.db?journal_mode=WAL&busy_timeout=10000"
    assert mask_secrets(plain) == plain
