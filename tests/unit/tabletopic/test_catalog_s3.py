"""``[catalog.s3]``: one object-store setting, translated for Spark (Hadoop S3A, Iceberg's
HadoopFileIO, the S3A jars) and for pyiceberg (Iceberg FileIO properties)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from floe.config import load_config
from floe.errors import ConfigError
from floe.tabletopic.catalog import CatalogSettings, S3Settings
from floe.tabletopic.spark import SparkSettings, session
from floe.tabletopic.spark.session import S3A_JARS, SparkUnavailableError

S3 = {
    "catalog.type": "rest",
    "catalog.uri": "http://127.0.0.1:8181",
    "catalog.warehouse": "s3://warehouse",
    "catalog.s3.endpoint": "http://127.0.0.1:8333",
    "catalog.s3.region": "eu-west-1",
    "catalog.s3.access.key.id": "AKID",
    "catalog.s3.secret.access.key": "SECRET",
    "catalog.s3.path.style.access": "true",
}
HADOOP = "spark.hadoop.fs.s3a."


def settings(tmp_path: Path, **values: str) -> CatalogSettings:
    config = load_config(None, {"data.dir": str(tmp_path), **values}, environ={})
    return CatalogSettings.from_config(config)


def test_a_local_warehouse_gets_no_s3_settings(tmp_path: Path) -> None:
    cat = settings(tmp_path)
    assert not cat.uses_s3
    spark = cat.spark_confs()
    assert not any(k.startswith("spark.hadoop.") for k in spark)
    assert "spark.sql.catalog.floe.io-impl" not in spark
    assert not any(k.startswith("s3.") for k in cat.pyiceberg_catalog_properties())


def test_one_setting_for_both_engines(tmp_path: Path) -> None:
    cat = settings(tmp_path, **S3)
    assert cat.uses_s3
    spark = cat.spark_confs()
    assert spark["spark.sql.catalog.floe.io-impl"] == "org.apache.iceberg.hadoop.HadoopFileIO"
    assert spark["spark.hadoop.fs.s3.impl"] == "org.apache.hadoop.fs.s3a.S3AFileSystem"
    assert {k[len(HADOOP) :]: v for k, v in spark.items() if k.startswith(HADOOP)} == {
        "impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "endpoint": "http://127.0.0.1:8333",
        "connection.ssl.enabled": "false",
        "endpoint.region": "eu-west-1",
        "aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
        "access.key": "AKID",
        "secret.key": "SECRET",
        "path.style.access": "true",
    }
    py = cat.pyiceberg_catalog_properties()
    assert {k: v for k, v in py.items() if k.startswith("s3.")} == {
        "s3.endpoint": "http://127.0.0.1:8333",
        "s3.region": "eu-west-1",
        "s3.access-key-id": "AKID",
        "s3.secret-access-key": "SECRET",
        "s3.path-style-access": "true",
    }
    assert "SECRET" not in repr(cat.s3)


def test_an_s3_warehouse_alone_uses_the_default_credential_chain(tmp_path: Path) -> None:
    cat = settings(tmp_path, **{"catalog.warehouse": "s3a://lake/tables"})
    assert cat.uses_s3 and not cat.s3.configured
    spark = cat.spark_confs()
    assert spark["spark.hadoop.fs.s3a.impl"] == "org.apache.hadoop.fs.s3a.S3AFileSystem"
    assert not any(k in spark for k in (f"{HADOOP}endpoint", f"{HADOOP}aws.credentials.provider"))
    assert not any(k.startswith("s3.") for k in cat.pyiceberg_catalog_properties())


def test_https_endpoint_keeps_tls_and_explicit_properties_win(tmp_path: Path) -> None:
    cat = settings(
        tmp_path,
        **{
            "catalog.s3.endpoint": "https://s3.example.com",
            "catalog.spark.io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
            "catalog.properties.s3.endpoint": "https://other.example.com",
        },
    )
    spark = cat.spark_confs()
    assert spark[f"{HADOOP}connection.ssl.enabled"] == "true"
    assert spark["spark.sql.catalog.floe.io-impl"] == "org.apache.iceberg.aws.s3.S3FileIO"
    assert cat.pyiceberg_catalog_properties()["s3.endpoint"] == "https://other.example.com"


def test_an_endpoint_must_be_a_url(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="use a URL like http://host:port"):
        settings(tmp_path, **{"catalog.s3.endpoint": "127.0.0.1:8333"})


def test_spark_gets_the_s3a_jars_only_for_s3(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jar_dir = tmp_path / "jars"
    jar_dir.mkdir()
    monkeypatch.setattr(session, "S3A_JAR_DIR", jar_dir)
    local = load_config(None, {"data.dir": str(tmp_path)}, environ={})
    on_s3 = load_config(None, {"data.dir": str(tmp_path), **S3}, environ={})
    assert "hadoop-aws" not in SparkSettings.from_config(local).confs()["spark.jars"]
    with pytest.raises(SparkUnavailableError, match="run `make setup`"):
        SparkSettings.from_config(on_s3).confs()
    for name in S3A_JARS:
        (jar_dir / name).write_bytes(b"")
    jars = SparkSettings.from_config(on_s3).confs()["spark.jars"].split(",")
    assert [str(jar_dir / name) for name in S3A_JARS] == jars[-2:]
    buffers = SparkSettings.from_config(on_s3).confs()["spark.hadoop.fs.s3a.buffer.dir"]
    assert buffers == str(tmp_path / "spark" / "tmp" / "s3a")


def test_packages_bring_their_own_s3_client(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(session, "S3A_JAR_DIR", tmp_path / "none")
    packages = "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.0"
    config = load_config(
        None, {"data.dir": str(tmp_path), "spark.jars.packages": packages, **S3}, environ={}
    )
    confs = SparkSettings.from_config(config).confs()
    assert "hadoop-aws" not in confs["spark.jars"]


def test_s3_settings_default_to_the_sdks() -> None:
    assert not S3Settings().configured
    assert S3Settings().fileio_properties() == {}


def test_every_toml_example_of_the_catalog_docs_loads(tmp_path: Path) -> None:
    """The ``floe.toml`` snippets in docs/table-topics.md are valid configuration."""
    doc = (Path(__file__).parents[3] / "docs" / "table-topics.md").read_text()
    examples = re.findall(r"```toml\n(.*?)```", doc, re.DOTALL)
    assert len(examples) >= 6
    for i, example in enumerate(examples):
        toml = tmp_path / f"example-{i}.toml"
        toml.write_text(example)
        cat = CatalogSettings.from_config(load_config(toml, environ={}))
        cat.spark_confs()
        if cat.type != "hadoop":
            cat.pyiceberg_catalog_properties()
