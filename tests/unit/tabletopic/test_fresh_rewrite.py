"""A fresh read swaps exactly the spans Spark's parser gave the table names."""

from __future__ import annotations

from floe.tabletopic.spark.fresh import Relation, rewrite


def relation(statement: str, text: str, aliased: bool = False, nth: int = 0) -> Relation:
    start = -1
    for _ in range(nth + 1):
        start = statement.index(text, start + 1)
    parts = tuple(p.strip("`") for p in text.split("."))
    return Relation(parts, ".".join(parts), start, start + len(text) - 1, aliased)


def test_names_without_alias_keep_their_table_name_as_one() -> None:
    sql = "SELECT clicks.page FROM floe.default.clicks WHERE clicks.page <> 'x'"
    got = rewrite(sql, [(relation(sql, "floe.default.clicks"), "v0")])
    assert got == "SELECT clicks.page FROM v0 AS `clicks` WHERE clicks.page <> 'x'"


def test_aliased_names_and_repeated_names_are_each_swapped() -> None:
    sql = "SELECT * FROM floe.default.`t` a JOIN floe.default.t b ON a.k = b.k"
    swaps = [
        (relation(sql, "floe.default.t", aliased=True, nth=0), "v1"),
        (relation(sql, "floe.default.`t`", aliased=True), "v0"),
    ]
    assert rewrite(sql, swaps) == "SELECT * FROM v0 a JOIN v1 b ON a.k = b.k"


def test_text_around_and_between_the_names_is_unchanged() -> None:
    sql = "-- floe.default.t in a comment\nSELECT 'floe.default.t' FROM floe.default.t"
    at = sql.rindex("floe.default.t")
    swap = Relation(("floe", "default", "t"), "floe.default.t", at, at + 13, False)
    assert rewrite(sql, [(swap, "v")]) == (
        "-- floe.default.t in a comment\nSELECT 'floe.default.t' FROM v AS `t`"
    )
