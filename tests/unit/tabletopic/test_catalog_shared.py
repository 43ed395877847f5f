"""A broker of a cluster warns when its catalog is its own: the default ``jdbc`` catalog
is a SQLite file in each broker's data dir, so a table topic whose rounds move to
another broker would start its table over there; a REST, Hive or JDBC-server catalog is
shared."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from floe.config import load_config
from floe.tabletopic.catalog import CatalogSettings, warn_if_not_shared


def settings(tmp_path: Path, **values: str) -> CatalogSettings:
    return CatalogSettings.from_config(
        load_config(None, {"data.dir": str(tmp_path), **values}, environ={})
    )


@pytest.mark.parametrize(
    ("values", "own"),
    [
        ({}, True),  # the default: <data.dir>/catalog/iceberg.db
        ({"catalog.uri": "jdbc:sqlite:/shared/iceberg.db"}, True),
        ({"catalog.uri": "jdbc:postgresql://db:5432/iceberg"}, False),
        ({"catalog.type": "rest", "catalog.uri": "http://catalog:8181"}, False),
        ({"catalog.type": "hive", "catalog.uri": "thrift://metastore:9083"}, False),
    ],
)
def test_only_a_sqlite_catalog_is_a_brokers_own(
    tmp_path: Path, values: dict[str, str], own: bool, caplog: pytest.LogCaptureFixture
) -> None:
    found = settings(tmp_path, **values)
    assert (found.local_to_broker is not None) is own
    with caplog.at_level(logging.WARNING, "floe.tabletopic.catalog"):
        warn_if_not_shared(found)
    warned = [r.getMessage() for r in caplog.records if "catalog_not_shared" in r.getMessage()]
    assert len(warned) == (1 if own else 0)
    if own:
        assert "SQLite file" in warned[0] and "same catalog" in warned[0]
