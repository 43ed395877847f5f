"""Table names for topics, and the fixed parts of the row layout."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st
from pyiceberg.types import BinaryType, StringType

from floe.tabletopic.convert import ROW_LAYOUT_VERSION, table_identifier, table_schema
from floe.tabletopic.convert.layout import sql_name

KAFKA_TOPIC = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-",
    min_size=1,
    max_size=249,
)


def test_valid_identifiers_are_kept() -> None:
    assert table_identifier("default", "orders") == ("default", "orders")
    assert sql_name("_x9") == "_x9"


def test_invalid_names_map_deterministically_with_a_hash() -> None:
    assert re.fullmatch(r"page_views_[0-9a-f]{8}", sql_name("page-views"))
    assert re.fullmatch(r"orders_v1_[0-9a-f]{8}", sql_name("Orders.v1"))
    assert re.fullmatch(r"t_1abc_[0-9a-f]{8}", sql_name("1abc"))
    assert sql_name("page-views") == sql_name("page-views")
    ns, table = table_identifier("Analytics-EU", "a.b")
    assert ns.startswith("analytics_eu_") and table.startswith("a_b_")


def test_names_that_would_collide_stay_apart() -> None:
    names = {sql_name(t) for t in ("a-b", "a.b", "a_b", "A_b", "A-B")}
    assert len(names) == 5


@given(KAFKA_TOPIC, KAFKA_TOPIC)
def test_mapping_is_valid_and_injective(a: str, b: str) -> None:
    for name in (a, b):
        assert re.fullmatch(r"[a-z_][a-z0-9_]*", sql_name(name))
    if a != b:
        assert sql_name(a) != sql_name(b)


def test_fixed_layout_columns_and_version() -> None:
    assert ROW_LAYOUT_VERSION == 1
    schema = table_schema(BinaryType(), StringType(), flatten=False)
    assert [f.name for f in schema.fields] == [
        "_kafka_value",
        "_kafka_key",
        "_kafka_header",
        "_kafka_metadata",
    ]
    assert all(not f.required for f in schema.fields)
    assert str(schema.find_type("_kafka_header")) == "map<string, binary>"
    assert str(schema.find_type("_kafka_metadata")) == (
        "struct<7: partition: optional int, 8: offset: optional long, "
        "9: timestamp: optional timestamptz, 10: timestamp_type: optional string>"
    )
