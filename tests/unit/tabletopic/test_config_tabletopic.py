"""Table-topic topic configs, and the broker's [catalog] and [spark] configuration."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from floe.config import load_config
from floe.config import tabletopic as tt
from floe.config.topic import is_passthrough, validate_topic_configs
from floe.errors import ConfigError, ErrorCode
from floe.tabletopic.catalog import CatalogSettings
from floe.tabletopic.spark import SparkSettings


def ok(**configs: str) -> dict[str, str]:
    return validate_topic_configs({k.replace("__", "."): v for k, v in configs.items()})


def bad(configs: dict[str, str | None], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)) as info:
        validate_topic_configs(configs)
    assert info.value.code == ErrorCode.invalid_config


# ---- every declared key, both spellings ----------------------------------------------


def test_every_key_is_declared_once_with_doc_and_default() -> None:
    names = [k.name for k in tt.TABLE_TOPIC_KEYS]
    assert len(names) == len(set(names)) == 28
    for key in tt.TABLE_TOPIC_KEYS:
        assert key.name.startswith("table.topic.")
        assert key.doc
        key.parse(key.render(key.default))  # the default is valid


@pytest.mark.parametrize("prefix", ["table.topic.", "automq.table.topic."])
def test_defaults_accepted_under_both_spellings(prefix: str) -> None:
    for key in tt.TABLE_TOPIC_KEYS:
        name = prefix + key.name.removeprefix("table.topic.")
        assert validate_topic_configs({name: key.render(key.default)}) == {
            name: key.render(key.default)
        }
        assert is_passthrough(name)


def test_enable_is_boolean_and_canonical() -> None:
    assert validate_topic_configs({"table.topic.enable": "TRUE"}) == {"table.topic.enable": "true"}
    assert validate_topic_configs({"automq.table.topic.enable": "false"}) == {
        "automq.table.topic.enable": "false"
    }
    bad({"table.topic.enable": "maybe"}, "table.topic.enable: expected bool, got 'maybe'")
    bad(
        {"automq.table.topic.enable": "maybe"},
        "automq.table.topic.enable: expected bool, got 'maybe'",
    )


def test_commit_interval_bounds() -> None:
    assert ok(table__topic__commit__interval__ms="1000") == {
        "table.topic.commit.interval.ms": "1000"
    }
    assert ok(table__topic__commit__interval__ms=" 900000 ")["table.topic.commit.interval.ms"] == (
        "900000"
    )
    bad({"table.topic.commit.interval.ms": "999"}, "999 is below the minimum 1000")
    bad({"table.topic.commit.interval.ms": "900001"}, "900001 is above the maximum 900000")
    bad({"table.topic.commit.interval.ms": "1s"}, "expected int, got '1s'")


def test_namespace() -> None:
    assert ok(table__topic__namespace="analytics")
    assert ok(table__topic__namespace="lake.raw_events")
    assert ok(table__topic__namespace="")  # the broker default
    bad({"table.topic.namespace": "my-ns"}, "'my-ns' is not a namespace")
    bad({"table.topic.namespace": "a..b"}, "is not a namespace")
    bad({"table.topic.namespace": "1abc"}, "is not a namespace")


@pytest.mark.parametrize("part", ["value", "key"])
def test_convert_types(part: str) -> None:
    name = f"table.topic.convert.{part}.type"
    for choice in ("raw", "string", "by_schema_id", "by_latest_schema"):
        assert validate_topic_configs({name: choice}) == {name: choice}
    bad({name: "avro"}, f"{name}: 'avro' is not one of raw, string, by_schema_id")


@pytest.mark.parametrize("part", ["value", "key"])
def test_by_latest_schema_subject_and_message_name(part: str) -> None:
    subject = f"table.topic.convert.{part}.by_latest_schema.subject"
    message = f"table.topic.convert.{part}.by_latest_schema.message.full.name"
    assert validate_topic_configs({subject: "clicks-value"}) == {subject: "clicks-value"}
    assert validate_topic_configs({message: "com.acme.v1.Click"}) == {message: "com.acme.v1.Click"}
    assert validate_topic_configs({message: "Click"}) == {message: "Click"}
    bad({subject: "a\tb"}, "is not a subject name")
    bad({message: "com.acme.1Click"}, "is not a Protobuf message full name")
    bad({message: "com acme"}, "is not a Protobuf message full name")


def test_transform_and_tolerance_choices() -> None:
    assert ok(table__topic__transform__value__type="none")
    bad({"table.topic.transform.value.type": "explode"}, "'explode' is not one of none, flatten")
    for choice in ("none", "invalid_data", "all"):
        assert ok(table__topic__errors__tolerance=choice)
    bad({"table.topic.errors.tolerance": "some"}, "'some' is not one of none, invalid_data, all")


def test_unknown_table_key_rejected_with_reason() -> None:
    bad({"table.topic.enabled": "true"}, "unknown topic config 'table.topic.enabled'")
    bad(
        {"automq.table.topic.commit.interval": "1000"},
        "unknown topic config 'automq.table.topic.commit.interval'",
    )
    bad({"table.topic.enable": None}, "table.topic.enable: a value is required")


# ---- rules spanning keys ---------------------------------------------------------------


def test_both_spellings_must_agree() -> None:
    same = {"table.topic.enable": "true", "automq.table.topic.enable": "yes"}
    assert validate_topic_configs(same) == {
        "table.topic.enable": "true",
        "automq.table.topic.enable": "true",
    }
    bad(
        {"table.topic.enable": "true", "automq.table.topic.enable": "false"},
        "table.topic.enable and automq.table.topic.enable are the same key and are set to "
        "different values ('true' and 'false'): set only one",
    )


def test_flatten_needs_a_schema() -> None:
    bad(
        {"table.topic.transform.value.type": "flatten"},
        "table.topic.transform.value.type: 'flatten' needs a schema: set "
        "table.topic.convert.value.type to by_schema_id or by_latest_schema (it is 'raw')",
    )
    bad(
        {
            "automq.table.topic.transform.value.type": "flatten",
            "table.topic.convert.value.type": "string",
        },
        "(it is 'string')",
    )
    assert ok(
        table__topic__transform__value__type="flatten",
        automq__table__topic__convert__value__type="by_schema_id",
    )


def test_route_by_record_name_needs_by_schema_id() -> None:
    message = (
        "table.topic.route.by: record_name routes by the schema id each value carries: set "
        "table.topic.convert.value.type to by_schema_id (it is {!r})"
    )
    bad({"table.topic.route.by": "record_name"}, message.format("raw"))
    bad(
        {
            "automq.table.topic.route.by": "record_name",
            "table.topic.convert.value.type": "by_latest_schema",
        },
        message.format("by_latest_schema"),
    )
    bad({"table.topic.route.by": "record"}, "table.topic.route.by")
    assert ok(
        automq__table__topic__route__by="record_name",
        table__topic__convert__value__type="by_schema_id",
    )
    cfg = tt.resolve_table_topic(
        {
            "automq.table.topic.route.by": "record_name",
            "table.topic.convert.value.type": "by_schema_id",
        }
    )
    assert cfg.routes and cfg.route_by == "record_name"
    assert not tt.resolve_table_topic({}).routes


def test_table_keys_validated_with_ordinary_topic_keys() -> None:
    out = validate_topic_configs(
        {"retention.ms": "5", "table.topic.enable": "on", "table.topic.namespace": "lake"}
    )
    assert out == {
        "retention.ms": "5",
        "table.topic.enable": "true",
        "table.topic.namespace": "lake",
    }


# ---- resolution ------------------------------------------------------------------------


def test_resolve_defaults_and_broker_namespace() -> None:
    cfg = tt.resolve_table_topic({"retention.ms": "5"})
    assert cfg == tt.TableTopicConfig(
        enable=False,
        commit_interval_ms=60000,
        namespace="default",
        convert_value_type="raw",
        convert_key_type="string",
        value_subject="",
        value_message_full_name="",
        key_subject="",
        key_message_full_name="",
        transform_value_type="none",
        errors_tolerance="invalid_data",
    )
    assert cfg.value_subject_for("clicks") == "clicks-value"
    assert cfg.key_subject_for("clicks") == "clicks-key"
    assert tt.resolve_table_topic({}, {"table.topic.namespace": "lake"}).namespace == "lake"
    topic_ns = {"automq.table.topic.namespace": "own"}
    assert tt.resolve_table_topic(topic_ns, {"table.topic.namespace": "lake"}).namespace == "own"


def test_resolve_both_spellings_canonical_wins() -> None:
    cfg = tt.resolve_table_topic(
        {"table.topic.commit.interval.ms": "2000", "automq.table.topic.commit.interval.ms": "3000"}
    )
    assert cfg.commit_interval_ms == 2000
    cfg = tt.resolve_table_topic(
        {"automq.table.topic.enable": "true", "automq.table.topic.convert.value.type": "string"}
    )
    assert cfg.enable
    assert cfg.convert_value_type == "string"


# ---- broker: [catalog] and [spark] -----------------------------------------------------


def test_catalog_defaults_under_data_dir(tmp_path: Path) -> None:
    config = load_config(None, {"data.dir": str(tmp_path)}, environ={})
    cat = CatalogSettings.from_config(config)
    assert cat.name == "floe"
    assert cat.type == "jdbc"
    db = tmp_path / "catalog" / "iceberg.db"
    assert cat.uri == f"jdbc:sqlite:{db}?journal_mode=WAL&busy_timeout=10000"
    assert cat.warehouse == str(tmp_path / "warehouse")
    assert cat.sqlite_path == db
    spark = cat.spark_confs()
    assert spark["spark.sql.catalog.floe"] == "org.apache.iceberg.spark.SparkCatalog"
    assert spark["spark.sql.catalog.floe.type"] == "jdbc"
    assert spark["spark.sql.catalog.floe.uri"] == cat.uri
    assert spark["spark.sql.catalog.floe.jdbc.init-catalog-tables"] == "false"
    assert spark["spark.sql.catalog.floe.cache-enabled"] == "false"
    py = cat.pyiceberg_catalog_properties()
    assert py == {
        "type": "sql",
        "uri": f"sqlite:///{db}?timeout=10",
        "warehouse": str(tmp_path / "warehouse"),
    }


def test_catalog_properties_pass_through(tmp_path: Path) -> None:
    toml = tmp_path / "floe.toml"
    toml.write_text(
        """
data.dir = "/d"
[catalog]
name = "lake"
type = "rest"
uri = "http://127.0.0.1:8333/iceberg"
warehouse = "s3://warehouse"
[catalog.properties]
credential = "k:s"
"oauth2-server-uri" = "http://127.0.0.1:8333/iceberg/v1/oauth/tokens"
[catalog.spark]
io-impl = "org.apache.iceberg.hadoop.HadoopFileIO"
[catalog.pyiceberg]
s3.endpoint = "http://127.0.0.1:8333"
[spark]
master = "local[1]"
driver.memory = "2g"
sql.shuffle.partitions = 4
[spark.hadoop]
"fs.s3a.path.style.access" = true
"""
    )
    config = load_config(toml, None, {})
    cat = CatalogSettings.from_config(config)
    spark = cat.spark_confs()
    assert spark["spark.sql.catalog.lake.type"] == "rest"
    assert spark["spark.sql.catalog.lake.credential"] == "k:s"
    assert spark["spark.sql.catalog.lake.io-impl"] == "org.apache.iceberg.hadoop.HadoopFileIO"
    assert "spark.sql.catalog.lake.s3.endpoint" not in spark
    assert "spark.sql.catalog.lake.jdbc.init-catalog-tables" not in spark
    py = cat.pyiceberg_catalog_properties()
    assert py["type"] == "rest"
    assert py["uri"] == "http://127.0.0.1:8333/iceberg"
    assert py["credential"] == "k:s"
    assert py["s3.endpoint"] == "http://127.0.0.1:8333"
    assert "io-impl" not in py

    s = SparkSettings.from_config(config)
    assert (s.master, s.driver_memory) == ("local[1]", "2g")
    confs = s.confs()
    assert confs["spark.sql.shuffle.partitions"] == "4"
    assert confs["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert confs["spark.local.dir"] == "/d/spark/tmp"
    assert "iceberg-spark-runtime-3.5_2.12-" in confs["spark.jars"]
    assert config.sources["spark.sql.shuffle.partitions"] == str(toml)


def test_unknown_catalog_and_bad_values_rejected(tmp_path: Path) -> None:
    toml = tmp_path / "floe.toml"
    toml.write_text('[catalog]\nwarehous = "/w"\n')
    with pytest.raises(ConfigError, match=re.escape("unknown config key 'catalog.warehous'")):
        load_config(toml, None, {})
    with pytest.raises(ConfigError, match=re.escape("catalog.type: 'glue' is not one of")):
        load_config(None, {"catalog.type": "glue"}, {})
    with pytest.raises(ConfigError, match=re.escape("catalog.name: 'my-cat' is not an ident")):
        load_config(None, {"catalog.name": "my-cat"}, {})
    with pytest.raises(ConfigError, match=re.escape("spark.driver.memory: use a size like 1g")):
        load_config(None, {"spark.driver.memory": "lots"}, {})
    with pytest.raises(ConfigError, match=re.escape("table.topic.namespace: the broker's")):
        load_config(None, {"table.topic.namespace": ""}, {})
    toml.write_text("[spark]\nsql = [1, 2]\n")
    with pytest.raises(ConfigError, match=re.escape("spark.sql: expected a string")):
        load_config(toml, None, {})


def test_packages_replace_bundled_jar_and_postgres_url(tmp_path: Path) -> None:
    config = load_config(
        None,
        {
            "data.dir": str(tmp_path),
            "spark.jars.packages": "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.0",
            "catalog.uri": "jdbc:postgresql://127.0.0.1:5433/lake",
            "catalog.properties.jdbc.user": "floe",
            "catalog.properties.jdbc.password": "p@ss",
        },
        environ={},
    )
    confs = SparkSettings.from_config(config).confs()
    assert confs["spark.jars.packages"].startswith("org.apache.iceberg:")
    assert "iceberg-spark-runtime" not in confs["spark.jars"]
    cat = CatalogSettings.from_config(config)
    assert cat.sqlite_path is None
    assert cat.pyiceberg_catalog_properties()["uri"] == (
        "postgresql+psycopg://floe:p%40ss@127.0.0.1:5433/lake"
    )
    hadoop = load_config(None, {"catalog.type": "hadoop"}, environ={})
    with pytest.raises(ConfigError, match="pyiceberg has no Hadoop catalog"):
        CatalogSettings.from_config(hadoop).pyiceberg_catalog_properties()


def test_docs_list_every_key_with_its_default() -> None:
    from floe.config import broker as b

    doc = (Path(__file__).parents[3] / "docs" / "table-topics.md").read_text()
    rows: dict[str, list[str]] = {}
    for line in doc.splitlines():
        if line.startswith("| `"):
            rows.setdefault(line.split("|")[1].strip(), []).append(line)
    broker_keys = [
        b.TABLE_TOPIC_NAMESPACE,
        b.SPARK_MASTER,
        b.SPARK_DRIVER_MEMORY,
        b.SPARK_JARS_PACKAGES,
        b.CATALOG_NAME,
        b.CATALOG_TYPE,
        b.CATALOG_URI,
        b.CATALOG_WAREHOUSE,
    ]
    for key in [*tt.TABLE_TOPIC_KEYS, *broker_keys]:
        found = rows.get(f"`{key.name}`", [])
        assert found, f"{key.name} missing from docs/table-topics.md"
        default = key.render(key.default)
        shown = f"`{default}`" if default else "(empty)"
        assert any(shown in row and all(c in row for c in key.choices) for row in found), (
            f"docs/table-topics.md: {key.name} does not show default {shown} and its choices"
        )


def test_a_dead_letter_topic_is_named_and_needs_records_to_skip() -> None:
    assert tt.resolve_table_topic({}).dead_letter_topic("clicks") is None
    default = tt.resolve_table_topic({"table.topic.errors.dlq.topic": "true"})
    assert default.dead_letter_topic("clicks") == "clicks.dlq"
    named = tt.resolve_table_topic({"automq.table.topic.errors.dlq.topic": "bad-clicks"})
    assert named.dead_letter_topic("clicks") == "bad-clicks"
    bad({"table.topic.errors.dlq.topic": "no spaces"}, "is not a topic name")
    bad(
        {"table.topic.errors.dlq.topic": "true", "table.topic.errors.tolerance": "none"},
        "a dead-letter topic needs skipped records",
    )
