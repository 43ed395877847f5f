"""One ``floe up`` shared by a test module (Spark starts once per module)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from helpers.admin import admin
from helpers.broker import Broker

SPARK_MODULE_SETTINGS = {"auto.create.topics.enable": "false", "spark.sql.shuffle.partitions": "2"}
"""Explicit topic creation only, and few shuffle partitions for the small test tables."""


@contextmanager
def module_broker(data_dir: Path, settings: dict[str, str] | None = None) -> Iterator[Broker]:
    """A started broker on ``data_dir``; on exit a clean stop (the test's own check that
    shutdown works), and a kill of whatever is left if the stop failed."""
    b = Broker(data_dir, {**SPARK_MODULE_SETTINGS, **(settings or {})})
    try:
        b.start()
        yield b
        admin.cache_clear()
        b.stop()
    finally:
        b.close()
