"""``floe sql`` and ``floe topic``, run as subprocesses like a user would.

``floe sql`` starts a JVM per call (~5-8 s, 20 s under make test), so the SQL test makes
three: create a table with its rows, print it, and one bad query. The CSV and JSON
formats are unit-tested on the same values (tests/unit/cli/test_sql_output.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from helpers import jvm
from helpers.admin import unique_topic

TABLE = "floe.default.t"


def floe(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run the CLI; its stderr without the Java launcher's note on the tests' JVM
    options (helpers/jvm.py)."""
    exe = str(Path(sys.executable).with_name("floe"))
    done = subprocess.run(
        [exe, *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    done.stderr = jvm.without_note(done.stderr)
    return done


def test_sql_creates_a_table_and_prints_it(tmp_path: Path) -> None:
    def sql(statement: str, *extra: str) -> subprocess.CompletedProcess[str]:
        return floe("sql", statement, "--data-dir", str(tmp_path / "data"), *extra, timeout=120)

    created = sql(
        f"CREATE TABLE {TABLE} USING iceberg AS SELECT * FROM VALUES "
        "(1, 'alpha', TIMESTAMP '2024-05-06 07:08:09', CAST('alpha' AS BINARY)), "
        "(2, NULL, NULL, NULL), (10, 'a name long enough to be cut by the table printer', "
        "TIMESTAMP '2024-05-06 07:08:10', CAST('' AS BINARY)) AS v(id, name, ts, raw)"
    )
    assert (created.returncode, created.stdout, created.stderr) == (0, "", "")

    table = sql(f"SELECT id, name, ts, raw FROM {TABLE} ORDER BY id", "--limit", "3")
    assert (table.returncode, table.stderr) == (0, "")  # Spark's console noise stays in its log
    assert table.stdout == (
        "id  name                                      ts                         raw\n"
        "--  ----------------------------------------  -------------------------  --------\n"
        " 1  alpha                                     2024-05-06T07:08:09+00:00  YWxwaGE=\n"
        " 2  NULL                                      NULL                       NULL\n"
        "10  a name long enough to be cut by the tab…  2024-05-06T07:08:10+00:00\n"
        "(3 rows)\n"
    )

    bad = sql("SELECT * FROM floe.default.missing")
    assert bad.returncode == 1 and bad.stdout == ""
    assert bad.stderr.startswith("floe: error: [TABLE_OR_VIEW_NOT_FOUND] ")
    assert bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr


def test_topic_create_describe_alter_delete(broker: Any) -> None:
    b = ["--admin", broker.admin_url]
    name = unique_topic("cli-tt")
    created = floe(
        "topic", "create", name, "--partitions", "2", "--config", "retention.ms=3600000",
        "--table", *b,
    )  # fmt: skip
    assert created.returncode == 0, created.stderr

    listed = floe("topic", "list", *b).stdout.splitlines()
    assert [name, "2"] in [line.split() for line in listed]

    described = json.loads(floe("topic", "describe", name, *b, "--output", "json").stdout)
    assert described["configs"] == {"retention.ms": "3600000", "table.topic.enable": "true"}
    assert described["table_topic"] == {"enabled": True, "table": f"floe.default.{_sql(name)}"}
    assert [(p["partition"], p["log_start"], p["log_end"]) for p in described["partitions"]] == [
        (0, 0, 0),
        (1, 0, 0),
    ]
    text = floe("topic", "describe", name, *b).stdout
    assert "Table topic: yes" in text and "retention.ms" in text and "LOG-END" in text

    altered = floe(
        "topic", "alter", name, "--config", "table.topic.commit.interval.ms=5000",
        "--delete-config", "retention.ms", *b,
    )  # fmt: skip
    assert altered.returncode == 0, altered.stderr
    after = json.loads(floe("topic", "describe", name, *b, "--output", "json").stdout)
    assert after["configs"] == {
        "table.topic.commit.interval.ms": "5000",
        "table.topic.enable": "true",
    }

    invalid = floe("topic", "alter", name, "--config", "table.topic.commit.interval.ms=5", *b)
    assert invalid.returncode == 1
    assert invalid.stderr.startswith("floe: error: ")
    assert invalid.stderr.count("\n") == 1 and "1000" in invalid.stderr
    refused = floe("topic", "create", unique_topic(), "--config", "table.topic.enable=maybe", *b)
    assert refused.returncode == 1 and refused.stderr.startswith("floe: error: ")
    assert "table.topic.enable" in refused.stderr and refused.stderr.count("\n") == 1
    replicated = floe("topic", "create", unique_topic(), "--replication-factor", "3", *b)
    assert (replicated.returncode, replicated.stderr) == (
        1,
        "floe: error: replication factor must be 1 (one broker), got 3\n",
    )

    deleted = floe("topic", "delete", name, *b)
    assert deleted.returncode == 0, deleted.stderr
    assert name not in floe("topic", "list", *b).stdout
    gone = floe("topic", "describe", name, *b)
    assert (gone.returncode, gone.stderr) == (1, f"floe: error: unknown topic '{name}'\n")


def _sql(topic: str) -> str:
    from floe.tabletopic.convert.layout import sql_name

    return sql_name(topic)
