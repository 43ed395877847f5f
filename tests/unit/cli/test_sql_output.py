"""``floe sql``'s three output formats on the Python values Spark's rows carry (the
subprocess test in tests/integration/test_cli_sql_topic.py prints one real result)."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from decimal import Decimal

import pytest

COLUMNS = ["id", "name", "ts", "raw", "price", "tags", "ok", "day"]
ROWS = [
    (1, "alpha", datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC), b"alpha", Decimal("1.50"),
     ["a", "b"], True, date(2024, 5, 6)),
    (2, None, None, None, None, None, None, None),
    (10, "a name long enough to be cut by the table printer", None, b"", Decimal("-0.01"),
     [], False, None),
]  # fmt: skip


def test_the_text_table_aligns_cuts_and_says_null() -> None:
    from floe.cli.sql import to_table

    assert to_table(COLUMNS, ROWS) == (
        "id  name                                      ts                         raw       "
        "price  tags        ok     day\n"
        "--  ----------------------------------------  -------------------------  --------  "
        "-----  ----------  -----  ----------\n"
        " 1  alpha                                     2024-05-06T07:08:09+00:00  YWxwaGE=  "
        ' 1.50  ["a", "b"]  true   2024-05-06\n'
        " 2  NULL                                      NULL                       NULL      "
        " NULL  NULL        NULL   NULL\n"
        "10  a name long enough to be cut by the tab…  NULL                                 "
        "-0.01  []          false  NULL\n"
        "(3 rows)"
    )
    assert to_table(["n"], [(1,)]).endswith("(1 row)")
    assert to_table(["n"], []) == "n\n-\n(0 rows)"


def test_csv_leaves_null_empty(capsys: pytest.CaptureFixture[str]) -> None:
    from floe.cli.sql import write_csv

    write_csv(COLUMNS, ROWS[:2])
    assert capsys.readouterr().out == (
        "id,name,ts,raw,price,tags,ok,day\n"
        '1,alpha,2024-05-06T07:08:09+00:00,YWxwaGE=,1.50,"[""a"", ""b""]",true,2024-05-06\n'
        "2,,,,,,,\n"
    )


def test_json_keeps_types_and_precision() -> None:
    from floe.cli.sql import to_json

    assert json.loads(to_json(COLUMNS, ROWS[:2])) == [
        {"id": 1, "name": "alpha", "ts": "2024-05-06T07:08:09+00:00", "raw": "YWxwaGE=",
         "price": "1.50", "tags": ["a", "b"], "ok": True, "day": "2024-05-06"},
        {"id": 2, "name": None, "ts": None, "raw": None, "price": None, "tags": None,
         "ok": None, "day": None},
    ]  # fmt: skip
