"""Config declarations and loading: precedence, parsing, validation messages."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from floe.config import load_config
from floe.config.broker import (
    BROKER_KEYS,
    KAFKA_PORT,
    LOG_LEVEL,
    LOG_SEGMENT_BYTES,
    STORAGE_S3_CACHE_MAX_BYTES,
    log_levels,
)
from floe.config.topic import ResolvedTopicConfig, validate_topic_configs
from floe.errors import ConfigError


def test_precedence_default_file_env_override(tmp_path: Path) -> None:
    toml = tmp_path / "floe.toml"
    toml.write_text("kafka.port = 9000\n[log]\nsegment.bytes = 2048\nretention.ms = 5\n")
    env = {"FLOE_LOG_SEGMENT_BYTES": "4096", "FLOE_LOG_RETENTION_MS": "7"}
    config = load_config(toml, {"log.retention.ms": "9"}, env)
    assert config[KAFKA_PORT] == 9000
    assert config.sources["kafka.port"] == str(toml)
    assert config[LOG_SEGMENT_BYTES] == 4096
    assert config.sources["log.segment.bytes"] == "FLOE_LOG_SEGMENT_BYTES"
    assert config.values["log.retention.ms"] == 9
    assert config.sources["log.retention.ms"] == "command line"
    assert config.values["num.partitions"] == 1
    assert config.sources["num.partitions"] == "default"


def test_every_key_is_documented_and_its_default_valid() -> None:
    for key in BROKER_KEYS:
        assert key.doc.strip(), key.name
        assert key.parse(key.render(key.default)) == key.default


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"kafka.port": "70000"}, "kafka.port: 70000 is above the maximum 65535"),
        ({"kafka.port": "abc"}, "kafka.port: expected int, got 'abc'"),
        ({"auto.create.topics.enable": "maybe"}, "expected bool"),
        ({"log.flush.policy": "never"}, "not one of acks, interval"),
        ({"no.such.key": "1"}, "unknown config key 'no.such.key'"),
    ],
)
def test_invalid_values_name_the_key(overrides: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(None, overrides, {})


def test_unknown_key_in_file_is_rejected(tmp_path: Path) -> None:
    toml = tmp_path / "floe.toml"
    toml.write_text("kafka.prot = 1\n")
    with pytest.raises(ConfigError, match=re.escape("unknown config key 'kafka.prot'")):
        load_config(toml, None, {})


def test_topic_configs_validated_and_canonical() -> None:
    assert validate_topic_configs(
        {"retention.ms": " 1000 ", "cleanup.policy": "compact,delete"}
    ) == {
        "retention.ms": "1000",
        "cleanup.policy": "compact,delete",
    }
    with pytest.raises(ConfigError, match=re.escape("unknown topic config 'retention.msx'")):
        validate_topic_configs({"retention.msx": "1"})
    with pytest.raises(ConfigError, match=re.escape("cleanup.policy: 'purge'")):
        validate_topic_configs({"cleanup.policy": "purge"})
    # table-topic keys are accepted verbatim; their own declarations validate them
    assert validate_topic_configs({"automq.table.topic.enable": "true"}) == {
        "automq.table.topic.enable": "true"
    }


def test_topic_values_resolve_topic_then_broker_then_default() -> None:
    resolved = ResolvedTopicConfig({"retention.ms": "5"}, {"log.segment.bytes": 2048})
    assert resolved.retention_ms == 5
    assert resolved.source("retention.ms") == "topic"
    assert resolved.segment_bytes == 2048
    assert resolved.source("segment.bytes") == "broker"
    assert resolved.max_message_bytes == 1048588
    assert resolved.source("max.message.bytes") == "default"
    assert not resolved.compact


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("INFO", ("INFO", {})),
        ("debug", ("DEBUG", {})),
        (
            "WARNING, pyiceberg=DEBUG ,floe.tabletopic=debug",
            ("WARNING", {"pyiceberg": "DEBUG", "floe.tabletopic": "DEBUG"}),
        ),
        ("py4j=ERROR,INFO", ("INFO", {"py4j": "ERROR"})),
    ],
)
def test_log_level_names_floes_level_and_logger_families(
    value: str, expected: tuple[str, dict[str, str]]
) -> None:
    assert log_levels(value) == expected
    assert load_config(None, {"log.level": value}, environ={})[LOG_LEVEL] == value


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("LOUD", "'LOUD' is not one of DEBUG, INFO, WARNING, ERROR"),
        ("INFO,=DEBUG", "'=DEBUG' names no logger"),
        ("pyiceberg=DEBUG", "no level for Floe's own logs"),
        ("INFO,py4j=chatty", "'py4j=chatty' is not one of"),
    ],
)
def test_a_bad_log_level_is_refused_with_one_line(value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(None, {"log.level": value}, environ={})


def test_a_cluster_bounds_the_cache_unless_told_otherwise(tmp_path: Path) -> None:
    """``storage.s3.cache.max.bytes`` defaults to 8 GiB in a cluster, -1 on one node;
    the value a broker uses is the one it reports (DescribeConfigs, floe config)."""
    url = {"cluster.metadata.url": f"sqlite:///{tmp_path}/meta.db"}
    assert load_config(None, {}, {})[STORAGE_S3_CACHE_MAX_BYTES] == -1
    cluster = load_config(None, url, {})
    assert cluster[STORAGE_S3_CACHE_MAX_BYTES] == 8 * 1024**3
    assert cluster.sources[STORAGE_S3_CACHE_MAX_BYTES.name] == "default"
    told = load_config(None, {**url, "storage.s3.cache.max.bytes": "-1"}, {})
    assert told[STORAGE_S3_CACHE_MAX_BYTES] == -1
