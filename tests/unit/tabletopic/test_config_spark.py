"""Spark settings without starting Spark: the jar, Java checks, log config, one owner."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from floe.config import load_config
from floe.tabletopic.spark import SparkManager, SparkUnavailableError
from floe.tabletopic.spark import session as sess


def test_bundled_iceberg_runtime_jar_is_the_scala_212_one() -> None:
    jar = sess.iceberg_runtime_jar()
    assert jar.exists()
    assert re.fullmatch(r"iceberg-spark-runtime-3\.5_2\.12-1\.10\.2\.jar", jar.name)


def test_missing_java_is_one_clear_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "nojava"))
    assert sess.java_major_version() is None
    with pytest.raises(SparkUnavailableError) as info:
        sess.check_java()
    message = str(info.value)
    assert "\n" not in message
    assert "Java 17" in message
    assert "openjdk-17-jre-headless" in message

    manager = SparkManager.from_config(load_config(None, {"data.dir": str(tmp_path)}, {}))
    with pytest.raises(SparkUnavailableError, match="no java found"):
        asyncio.run(manager.get_session())
    assert not manager.started


def test_old_java_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sess, "java_major_version", lambda: 11)
    with pytest.raises(SparkUnavailableError, match="found Java 11"):
        sess.check_java()


def test_confs_put_logs_and_scratch_under_data_dir(tmp_path: Path) -> None:
    settings = SparkManager.from_config(
        load_config(None, {"data.dir": str(tmp_path), "spark.master": "local[1]"}, {})
    ).settings
    confs = settings.confs()
    work = tmp_path.resolve() / "spark"
    assert settings.work_dir == work
    assert confs["spark.local.dir"] == str(work / "tmp")
    assert (
        f"-Dlog4j.configurationFile=file:{work / 'log4j2.properties'}"
        in (confs["spark.driver.extraJavaOptions"])
    )
    assert (
        "-Djava.library.path=/usr/lib/x86_64-linux-gnu/jni"
        in (confs["spark.driver.extraJavaOptions"])
    )
    assert confs["spark.ui.enabled"] == "false"
    assert confs["spark.sql.extensions"] == sess.ICEBERG_EXTENSIONS
    assert confs["spark.master"] == "local[1]"
    assert confs["spark.sql.catalog.floe"] == "org.apache.iceberg.spark.SparkCatalog"
    log4j = sess.LOG4J2_TEMPLATE.format(log_file=settings.log_file)
    assert f"appender.file.fileName = {work / 'spark.log'}" in log4j
    assert "rootLogger.level = warn" in log4j
