"""The admin SQL endpoint runs only read-only statements, as Spark's own parser and
analyzer see them (not a regex over the text), and the admin API bounds request bodies.

One ``floe up`` for the module (Spark starts once): a table topic gives a real Iceberg
table to read; every hostile statement gets a 400 with a one-line message, and at the
end the table, the catalog and the session are as they were.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from helpers.broker import Broker
from helpers.clients import confluent_produce
from helpers.module_broker import module_broker
from helpers.records import Record, recent_ts

pytestmark = pytest.mark.timeout(400)

ROWS = 12
DEADLINE_S = 150.0
LIMIT = 1024 * 1024  # admin.max.body.bytes, the default


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    with module_broker(tmp_path_factory.mktemp("sql-safety") / "data") as b:
        yield b


def call(broker: Broker, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"{broker.admin_url}/api/v1{path}",
        data=data,
        method=method,
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=150) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read())


def sql(broker: Broker, statement: str) -> tuple[int, Any]:
    return call(broker, "POST", "/sql", {"statement": statement})


@pytest.fixture(scope="module")
def table(broker: Broker) -> str:
    """``floe.default.<table>`` of a table topic holding :data:`ROWS` records."""
    status, _ = call(broker, "POST", "/topics", {"name": "safe", "partitions": 1})
    assert status == 201
    settings = {"commit.interval.ms": "1000", "convert.value.type": "string"}
    status, _ = call(broker, "PUT", "/topics/safe/table", {"enabled": True, "settings": settings})
    assert status == 200
    records = [Record(b"k", f"v{i}".encode(), (), recent_ts(), 0) for i in range(ROWS)]
    confluent_produce(broker.bootstrap, "safe", records)
    deadline = time.monotonic() + DEADLINE_S
    while True:
        _, status_body = call(broker, "GET", "/tables/safe")
        if sum(p["committed_offset"] or 0 for p in status_body["partitions"]) >= ROWS:
            break
        assert time.monotonic() < deadline, status_body
        time.sleep(0.5)
    _, history = call(broker, "GET", "/tables/safe/snapshots")
    return f"floe.{history['table']}"


@pytest.fixture(scope="module")
def session_state(broker: Broker, table: str) -> Any:
    """The SQL session's current catalog and namespace before any hostile statement."""
    status, body = sql(broker, "SELECT current_catalog(), current_database()")
    assert status == 200, body
    return body["rows"]


def count(broker: Broker, table: str) -> int:
    status, body = sql(broker, f"SELECT count(*) AS n FROM {table}")
    assert status == 200, body
    return int(body["rows"][0][0])


def test_read_only_statements_run(broker: Broker, table: str, session_state: Any) -> None:
    assert count(broker, table) == ROWS
    allowed = [
        f"SELECT count(*) FROM {table} WHERE _kafka_value IN (SELECT _kafka_value FROM {table})",
        f"WITH c AS (SELECT * FROM {table}) SELECT count(*) FROM c",
        f"SELECT * FROM {table}.snapshots",
        f"EXPLAIN SELECT * FROM {table}",
        f"DESCRIBE {table}",
        f"DESCRIBE QUERY SELECT * FROM {table}",
        f"SHOW TBLPROPERTIES {table}",
        "SHOW TABLES IN floe.default",
        "SHOW NAMESPACES IN floe",
        "SELECT * FROM range(3)",
        "VALUES (1, 'a')",
        "/* a comment; with a semicolon */ SELECT 1;",
        "SELECT '/* DROP TABLE x */' AS text",
    ]
    for statement in allowed:
        status, body = sql(broker, statement)
        assert status == 200, (statement, body)
        assert body["columns"], statement


def test_table_names_resolve_in_floes_catalog(broker: Broker, table: str) -> None:
    """Floe's catalog is the session's default: the namespace-qualified name and the
    bare one (in the default namespace) read the same table as the full one."""
    _, namespace, name = table.split(".")
    for form in (table, f"{namespace}.{name}", name):
        status, body = sql(broker, f"SELECT count(*) AS n FROM {form}")
        assert (status, body.get("rows")) == (200, [[ROWS]]), (form, body)
    status, body = sql(broker, f"SHOW TABLES IN {namespace}")
    assert status == 200, body
    assert name in {row[1] for row in body["rows"]}


HOSTILE = [
    # commands, DDL, DML: the plan is a command or a writing statement somewhere
    ("DROP TABLE {t}", "DropTable"),
    ("INSERT INTO {t} SELECT * FROM {t}", "InsertIntoStatement"),
    ("WITH c AS (SELECT * FROM {t}) INSERT INTO {t} SELECT * FROM c", "InsertIntoStatement"),
    ("DELETE FROM {t}", "DeleteFromTable"),
    ("CREATE TABLE floe.default.pwned (id INT) USING iceberg", "CreateTable"),
    ("CREATE TABLE floe.default.pwned USING iceberg AS SELECT 1 AS id", "CreateTableAsSelect"),
    ("ALTER TABLE {t} SET TBLPROPERTIES ('x' = 'y')", "SetTableProperties"),
    ("CALL floe.system.expire_snapshots('default.safe')", "CallStatement"),
    ("EXPLAIN INSERT INTO {t} SELECT * FROM {t}", "InsertIntoStatement"),
    ("SET spark.sql.runSQLOnFiles=true", "SetCommand"),
    ("RESET", "ResetCommand"),
    ("USE floe.default", "SetCatalogAndNamespace"),
    ("CACHE TABLE {t}", "CacheTable"),
    ("ADD JAR /tmp/evil.jar", "AddJarsCommand"),
    ("CREATE TEMPORARY VIEW v AS SELECT 1", "CreateViewCommand"),
    ("CREATE TEMPORARY FUNCTION f AS 'java.lang.Object'", "CreateFunctionCommand"),
    # comments that would fool a regex: Spark's lexer nests them
    ("/* /* */ */ DROP TABLE {t}", "DropTable"),
    ("/* outer /* inner */ still a comment */ INSERT INTO {t} SELECT * FROM {t}", "Insert"),
    # reading files directly
    ("SELECT * FROM text.`/etc/passwd`", "text.`/etc/passwd`"),
    ("SELECT * FROM csv.`/etc/passwd`", "csv.`/etc/passwd`"),
    ("SELECT * FROM {t} WHERE EXISTS (SELECT * FROM json.`/etc/hostname`)", "json."),
    ("SELECT * FROM `parquet`.`/tmp`", "parquet.`/tmp`"),
    # reflection and friends
    ("SELECT java_method('java.lang.System', 'getProperty', 'user.dir')", "reflection"),
    ("SELECT reflect('java.lang.Runtime', 'getRuntime')", "reflection"),
    ("SELECT * FROM {t} WHERE EXISTS (SELECT reflect('java.lang.System', 'exit', 1))", "refl"),
    ("SELECT xpath_string('<a>1</a>', 'a')", "XML"),
]


@pytest.mark.parametrize(("statement", "named"), HOSTILE, ids=[h[0][:40] for h in HOSTILE])
def test_hostile_statements_are_refused(
    broker: Broker, table: str, statement: str, named: str
) -> None:
    status, body = sql(broker, statement.format(t=table))
    assert status == 400, body
    assert body["error_code"] == 400
    message = body["message"]
    assert "\n" not in message and named in message, message
    assert message.startswith("not a read-only query: "), message


def test_several_statements_and_empty_ones(broker: Broker, table: str) -> None:
    status, body = sql(broker, f"SELECT 1; DROP TABLE {table}")
    assert status == 400 and "PARSE_SYNTAX_ERROR" in body["message"]
    for blank in ("", "  ", ";"):
        status, body = sql(broker, blank)
        assert status == 400 and body["message"] == "empty statement"


def test_nothing_changed(broker: Broker, table: str, session_state: Any) -> None:
    """Runs after the hostile statements (module order): the table, the catalog and the
    SQL session are as before."""
    assert count(broker, table) == ROWS
    status, body = sql(broker, "SHOW TABLES IN floe.default")
    assert status == 200 and "pwned" not in json.dumps(body)
    status, body = sql(broker, "SELECT current_catalog(), current_database()")
    assert body["rows"] == session_state  # USE did not stick
    status, body = sql(broker, "SELECT * FROM csv.`/etc/passwd`")  # SET did not stick
    assert status == 400


def test_request_body_limit(broker: Broker) -> None:
    big = "SELECT 1 /*" + "x" * LIMIT + "*/"
    status, body = sql(broker, big)
    assert status == 413, body
    assert body["error_code"] == 413 and "admin.max.body.bytes" in body["message"]
    status, body = call(broker, "PATCH", "/topics/safe/configs", {"set": {"x": "y" * LIMIT}})
    assert status == 413
    # a declared length far over the limit is answered at once, without the body
    with socket.create_connection((broker.host, broker.admin_port), timeout=30) as s:
        s.sendall(
            b"POST /api/v1/sql HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 1000000000\r\n\r\n{"
        )
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            chunk = s.recv(65536)
            if not chunk:
                break
            answer += chunk
    head, _, body = answer.decode("latin-1").partition("\r\n\r\n")
    assert head.startswith("HTTP/1.1 413"), answer
    assert json.loads(body)["error_code"] == 413
    # the API still answers normally
    assert sql(broker, "SELECT 1")[0] == 200
