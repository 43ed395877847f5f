"""The ``maintenance`` suite: a table written every second, before and after maintenance.

Layout of one run (one ``floe up``, registry and Spark included, as the table suite):

1. serialize a pool of clickstream records (fixed seed; ``table_load.serialize``) and
   create one 3-partition table topic (``by_schema_id`` + ``flatten``, commit interval
   1 s, scheduled maintenance off: ``table.topic.maintenance.interval.ms=0``; snapshot
   expiry allowed to expire every snapshot but the newest: max age 0, retain last 1);
2. produce at a steady rate (200 records/s by default) for ``--maintenance-seconds``
   (1 hour by default), the records cycling through the pool, and wait until the
   table's committed offsets reach the log end: every round of the hour is a commit;
3. **before**: count the table's snapshots, data and delete files, manifests and bytes
   (pyiceberg), the files in its directory, and time a fixed query (:data:`QUERY`) N
   times in Spark SQL through the broker's admin API (``POST /api/v1/sql``) and in
   DuckDB (``iceberg_scan`` on the current metadata file), alternating;
4. run the maintenance now (``POST /api/v1/tables/<topic>/maintenance``, what
   ``floe table maintain --now`` calls) and time it;
5. **after**: the same measurements; the query's rows must be the same before and
   after, in each engine and across engines, and the row count the records produced.

The after/before ratios are in ``figures["after_over_before"]`` of the JSON. The broker
is always stopped in a ``finally``; the producer runs in a worker process that ends
with its pool.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks import table_load
from benchmarks.harness import (
    Progress,
    SuiteResult,
    Workload,
    floe_version_label,
    loadavg,
    machine_info,
    worker_pool,
)
from benchmarks.table import _Admin, _Floe, rounds_of

NAME = "maintenance"
TITLE = "Table maintenance: a table committed every second, before and after"
TOPIC = "bench_maintenance"
FLOE = "floe"
TABLE_SQL = f"floe.default.{TOPIC}"
QUERY = (
    "SELECT event_type, count(*) AS n, count(DISTINCT user_id) AS users, "
    "sum(_kafka_metadata.offset) AS offsets FROM {table} "
    "WHERE device LIKE 'mobile-%' AND referrer IS NOT NULL "
    "GROUP BY event_type ORDER BY event_type"
)
"""The fixed query: an aggregate over the whole table with a filter. Integers and
strings only, so Spark's JSON rows and DuckDB's tuples compare equal; the sum of the
offsets changes if any row is lost, duplicated or moved."""
COUNT = "SELECT count(*) AS n FROM {table}"
METRICS = (
    "snapshots", "data_files", "delete_files", "manifests", "data_mb", "rows",
    "dir_files", "dir_mb", "metadata_files",
)  # fmt: skip
"""What :func:`_table_facts` counts; each gets an after/before ratio."""
_CATCH_UP_TIMEOUT_S = 900.0
_SQL_TIMEOUT_S = 300.0
_MAINTAIN_TIMEOUT_S = 3600.0
_POOL_RECORDS = 20_000
_REPORT_EVERY_S = 60.0
_LOAD_EVERY_S = 5.0
_WARM_TOPIC = "bench_maintenance_warmup"
_WARM_RECORDS = 300


@dataclass(frozen=True)
class Settings:
    seconds: float
    rate: int
    partitions: int
    query_reps: int
    retain_last: int
    max_age_ms: int
    seed: int
    quick: bool = False


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The suite's own options, all prefixed ``--maintenance-``."""
    g = parser.add_argument_group("maintenance suite")
    g.add_argument(
        "--maintenance-seconds",
        type=float,
        help="seconds of produce at 1-s commits before maintenance (3600; quick 30)",
    )
    g.add_argument("--maintenance-rate", type=int, default=200, help="records/s (200)")
    g.add_argument(
        "--maintenance-query-reps", type=int, help="runs of the query per engine (5; quick 3)"
    )


def settings_from(args: argparse.Namespace) -> Settings:
    """Build the settings, applying the ``--quick`` preset to what was not given.

    Raises:
        ValueError: a size is not positive.
    """
    quick = bool(args.quick)
    s = Settings(
        seconds=args.maintenance_seconds or (30.0 if quick else 3600.0),
        rate=args.maintenance_rate,
        partitions=3,
        query_reps=args.maintenance_query_reps or args.reps or (3 if quick else 5),
        retain_last=1,
        max_age_ms=0,
        seed=args.seed,
        quick=quick,
    )
    if s.seconds <= 0 or min(s.rate, s.query_reps) < 1:
        raise ValueError("seconds, rate and query reps must be positive")
    return s


def topic_config(s: Settings) -> dict[str, str]:
    """The table topic: Avro clickstream flattened, a commit a second, maintenance only
    on demand, and expiry free to drop every snapshot but the newest."""
    return {
        "table.topic.enable": "true",
        "table.topic.commit.interval.ms": "1000",
        "table.topic.convert.value.type": "by_schema_id",
        "table.topic.transform.value.type": "flatten",
        "table.topic.maintenance.interval.ms": "0",
        "table.topic.maintenance.snapshots.retain.last": str(s.retain_last),
        "table.topic.maintenance.snapshots.max.age.ms": str(s.max_age_ms),
    }


# -- reading the table -----------------------------------------------------------------------


def _table_facts(table: Any) -> dict[str, float]:
    """Snapshots, files, manifests and sizes of ``table`` (pyiceberg, current snapshot),
    and the files on disk under its location (data and metadata, referenced or not)."""
    files = table.inspect.files()
    content = files.column("content").to_pylist()
    sizes = files.column("file_size_in_bytes").to_pylist()
    records = files.column("record_count").to_pylist()
    data = [i for i, c in enumerate(content) if c == 0]
    root = Path(table.location().removeprefix("file:"))
    on_disk = [p for p in root.rglob("*") if p.is_file()]
    return {
        "snapshots": float(len(table.metadata.snapshots)),
        "data_files": float(len(data)),
        "delete_files": float(len(content) - len(data)),
        "manifests": float(table.inspect.manifests().num_rows),
        "data_mb": sum(sizes[i] for i in data) / 1e6,
        "rows": float(sum(records[i] for i in data)),
        "dir_files": float(len(on_disk)),
        "dir_mb": sum(p.stat().st_size for p in on_disk) / 1e6,
        "metadata_files": float(sum(1 for p in on_disk if p.parent.name == "metadata")),
    }


def _post(url: str, body: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """POST ``body`` as JSON, return the JSON answer.

    Raises:
        RuntimeError: the API answered an error (its message included).
    """
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST",
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as resp:
            answer: dict[str, Any] = json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        raise RuntimeError(f"{url}: HTTP {exc.code}: {exc.read()[:500]!r}") from None
    return answer


def duckdb_connect() -> Any:
    """DuckDB with its avro and iceberg extensions loaded from their wheels (offline:
    nothing is installed or auto-loaded)."""
    import importlib.resources

    import duckdb

    con = duckdb.connect()
    con.execute("SET autoinstall_known_extensions=false")
    con.execute("SET autoload_known_extensions=false")
    for ext in ("avro", "iceberg"):
        pkg = importlib.resources.files(f"duckdb_extension_{ext}")
        con.execute(f"LOAD '{next(Path(str(pkg)).rglob(f'{ext}.duckdb_extension'))}'")
    return con


@dataclass
class _Reading:
    """One phase's (before or after) measurements."""

    facts: dict[str, float]
    spark_s: list[float]
    duckdb_s: list[float]
    spark_rows: list[list[Any]]
    duckdb_rows: list[list[Any]]
    spark_count: int
    duckdb_count: int


class _Runner:
    """Drives the broker's admin API, the catalog and DuckDB; owned by the suite's
    thread."""

    def __init__(self, floe: _Floe, admin: _Admin, s: Settings, prog: Progress) -> None:
        self.floe, self.admin, self.s, self.prog = floe, admin, s, prog
        self.api = f"http://127.0.0.1:{floe.admin_port}/api/v1"
        self.loads: list[float] = []
        """1-min loadavg sampled while producing (other work on the machine)."""

    def spark(self, statement: str) -> tuple[list[list[Any]], float]:
        """Rows of ``statement`` run by the broker's Spark, and the call's wall time.

        Raises:
            RuntimeError: the API refused or the query failed.
        """
        t0 = time.perf_counter()
        answer = _post(
            f"{self.api}/sql",
            {"statement": statement, "limit": 10_000, "timeout_s": _SQL_TIMEOUT_S},
            _SQL_TIMEOUT_S + 30,
        )
        seconds = time.perf_counter() - t0
        if answer["truncated"]:
            raise RuntimeError(f"truncated answer to {statement!r}")
        return answer["rows"], seconds

    def read(self, phase: str) -> _Reading:
        """Count the table's parts, then run the query ``query_reps`` times per engine."""
        table = self.admin.table(TOPIC)
        if table is None:
            raise RuntimeError(f"{TOPIC}: no table")
        t0 = time.perf_counter()
        facts = _table_facts(table)
        facts["inspect_s"] = time.perf_counter() - t0
        self.prog.log(f"{phase}: " + ", ".join(f"{k}={v:,.6g}" for k, v in facts.items()))
        meta = table.metadata_location
        query, count = QUERY.format(table=TABLE_SQL), COUNT.format(table=TABLE_SQL)
        scan = "iceberg_scan(?)"
        con = duckdb_connect()
        try:
            # one untimed run each first (Spark's plan and JIT, the page cache): a cold
            # first run would only ever count against the "before" phase
            facts["spark_first_s"] = self.spark(query)[1]
            t1 = time.perf_counter()
            con.execute(QUERY.format(table=scan), [meta]).fetchall()
            facts["duckdb_first_s"] = time.perf_counter() - t1
            spark_s: list[float] = []
            duck_s: list[float] = []
            spark_rows: list[list[Any]] = []
            duck_rows: list[list[Any]] = []
            for rep in range(self.s.query_reps):
                # alternate which engine goes first, so neither always has warm caches
                for engine in ("spark", "duckdb") if rep % 2 == 0 else ("duckdb", "spark"):
                    if engine == "spark":
                        spark_rows, seconds = self.spark(query)
                        spark_s.append(seconds)
                    else:
                        t1 = time.perf_counter()
                        got = con.execute(QUERY.format(table=scan), [meta]).fetchall()
                        duck_s.append(time.perf_counter() - t1)
                        duck_rows = [list(r) for r in got]
            spark_n = int(self.spark(count)[0][0][0])
            duck_n = int(con.execute(COUNT.format(table=scan), [meta]).fetchall()[0][0])
        finally:
            con.close()
        self.prog.log(
            f"{phase}: query Spark {statistics.median(spark_s):.2f} s, "
            f"DuckDB {statistics.median(duck_s):.2f} s (median of {self.s.query_reps})"
        )
        return _Reading(facts, spark_s, duck_s, spark_rows, duck_rows, spark_n, duck_n)

    def maintain(self) -> dict[str, float]:
        """Run the maintenance now through the admin API; its counts and wall time.

        Raises:
            RuntimeError: the API refused or a step failed.
        """
        t0 = time.perf_counter()
        answer = _post(f"{self.api}/tables/{TOPIC}/maintenance", {}, _MAINTAIN_TIMEOUT_S)
        seconds = time.perf_counter() - t0
        out = {"seconds": seconds}
        out |= {k: float(v) for k, v in answer.items() if isinstance(v, int | float)}
        return out

    def warm_up(self, pool: Any, data: table_load.Dataset) -> float:
        """Start Spark and run its first round on a throw-away table topic, so the
        measured table's rounds are all warm; return first record -> commit seen."""
        self.admin.create(_WARM_TOPIC, 1, topic_config(self.s))
        t0 = time.time()
        out = pool.submit(
            table_load.produce_at_rate, self.floe.bootstrap, _WARM_TOPIC, data, 1,
            rate=_WARM_RECORDS, seconds=1.0,
        ).result()  # fmt: skip
        seen = self.admin.wait_committed(_WARM_TOPIC, {0: len(out.offsets)}, _CATCH_UP_TIMEOUT_S)
        self.admin.delete(_WARM_TOPIC)
        return seen - t0

    def produce(self, pool: Any, data: table_load.Dataset) -> table_load.RateResult:
        """Produce at the steady rate for the settings' seconds, logging commits as they
        go; return the producer's result.

        Raises:
            RuntimeError: produce errors, or the broker died.
        """
        s = self.s
        future = pool.submit(
            table_load.produce_at_rate, self.floe.bootstrap, TOPIC, data, s.partitions,
            rate=s.rate, seconds=s.seconds,
        )  # fmt: skip
        t0 = last_log = time.monotonic()
        while True:
            try:
                out: table_load.RateResult = future.result(timeout=_LOAD_EVERY_S)
                break
            except TimeoutError:
                pass
            if not self.floe.alive():
                raise RuntimeError(f"floe exited: {self.floe.tail(5)}")
            self.loads.append(float(loadavg().split()[0]))
            if time.monotonic() - last_log >= _REPORT_EVERY_S:
                last_log = time.monotonic()
                rounds = rounds_of(self.floe.stderr_path, TOPIC)
                self.prog.log(
                    f"producing {last_log - t0:.0f}/{s.seconds:.0f} s: {len(rounds)} commits, "
                    f"last round {rounds[-1]['seconds'] if rounds else 0:.2f} s, "
                    f"loadavg {loadavg()}"
                )
        if out.errors:
            raise RuntimeError(f"{out.errors} produce errors on {TOPIC}")
        return out


def _same(a: list[list[Any]], b: list[list[Any]]) -> float:
    return 1.0 if a == b else 0.0


def _phase_workloads(before: _Reading, after: _Reading, s: Settings) -> list[Workload]:
    """The table facts and the query times of both phases as workloads."""
    out = []
    for phase, r in (("before", before), ("after", after)):
        out.append(
            Workload(
                key=f"table-{phase}", group="table", title=f"Table {phase} maintenance",
                target=FLOE, params={}, reps=[r.facts],
            )
        )  # fmt: skip
        for engine, times in (("spark", r.spark_s), ("duckdb", r.duckdb_s)):
            out.append(
                Workload(
                    key=f"query-{engine}-{phase}", group="query",
                    title=f"Fixed query, {engine}, {phase} maintenance", target=FLOE,
                    params={"runs": s.query_reps}, reps=[{"seconds": t} for t in times],
                )
            )  # fmt: skip
    return out


def _ratios(before: _Reading, after: _Reading) -> dict[str, float]:
    """after / before of every table fact and of the query times' medians."""
    out = {}
    for k in METRICS:
        if before.facts.get(k):
            out[k] = after.facts[k] / before.facts[k]
    for engine, b, a in (
        ("spark", before.spark_s, after.spark_s),
        ("duckdb", before.duckdb_s, after.duckdb_s),
    ):
        out[f"query_{engine}_s"] = statistics.median(a) / statistics.median(b)
    return out


def _round_trend(rounds: list[dict[str, float]]) -> dict[str, float]:
    """Round durations: median of all, of the first and of the last tenth of the run
    (each commit adds to the metadata the next one rewrites)."""
    if not rounds:
        return {}
    secs = [r["seconds"] for r in rounds]
    tenth = max(1, len(secs) // 10)
    return {
        "round_s_median": statistics.median(secs),
        "round_s_first_tenth": statistics.median(secs[:tenth]),
        "round_s_last_tenth": statistics.median(secs[-tenth:]),
        "round_s_max": max(secs),
    }


def run(args: argparse.Namespace, command: str) -> SuiteResult:
    """Run the suite and return the measurements.

    Raises:
        ValueError: bad settings.
        RuntimeError: the broker did not start or died, or an API call failed.
        TimeoutError: the table did not catch up in time.
    """
    s = settings_from(args)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="floe-bench-maint-") as tmp, Progress() as prog:
        root = Path(tmp)
        result = SuiteResult(
            suite=NAME,
            machine=machine_info(root),
            settings=asdict(s) | {"topic_config": topic_config(s), "query": QUERY},
            command=command,
            started=time.strftime("%Y-%m-%d %H:%M %Z"),
        )
        floe = _Floe(root / "floe")
        result.targets = {
            FLOE: {
                "label": "Floe table topic",
                "description": "floe up (Spark local[2], 1 GiB driver), by_schema_id + "
                "flatten, commit interval 1000 ms, maintenance on demand",
                "version": floe_version_label(),
            }
        }
        prog.total(7)
        admin: _Admin | None = None
        try:
            floe.start()
            prog.log(f"floe up on {floe.bootstrap} (pid {floe.pid})")
            admin = _Admin(floe)
            runner = _Runner(floe, admin, s, prog)
            with worker_pool() as pool:
                prog.step("serialize the clickstream")
                n = min(_POOL_RECORDS, max(1, int(s.rate * s.seconds)))
                data = pool.submit(
                    table_load.serialize, floe.registry_url, TOPIC, n, s.seed,
                    str(root / "clicks.bin"),
                ).result()  # fmt: skip
                prog.step("warm-up (Spark start, first round) on a topic of its own")
                warm = runner.warm_up(pool, data)
                prog.log(f"warm-up: first commit {warm:.1f} s after the first record")
                admin.create(TOPIC, s.partitions, topic_config(s))
                prog.step(f"produce {s.rate:,} records/s for {s.seconds:.0f} s")
                produce_t0 = time.time()
                out = runner.produce(pool, data)
            result.machine["loadavg_after_produce"] = loadavg()
            ends: dict[int, int] = {}
            for p, o in zip(out.partitions, out.offsets, strict=True):
                ends[p] = max(ends.get(p, 0), o + 1)
            prog.step("wait for the last commit")
            admin.wait_committed(TOPIC, ends, _CATCH_UP_TIMEOUT_S)
            caught_up_s = time.time() - produce_t0 - out.seconds
            time.sleep(3.0)  # the round's log line may trail its commit
            rounds = rounds_of(floe.stderr_path, TOPIC)
            produced = len(out.offsets)
            result.workloads.append(
                Workload(
                    key="produce", group="produce",
                    title=f"{s.rate:,} records/s for {s.seconds:.0f} s, 1-s commits",
                    target=FLOE, params={"rate": s.rate, "seconds": s.seconds},
                    reps=[{
                        "records": float(produced), "seconds": out.seconds,
                        "records_s": produced / out.seconds, "commits": float(len(rounds)),
                        "rows_committed": float(sum(r["rows"] for r in rounds)),
                        "catch_up_s": caught_up_s,
                        "loadavg_1m_mean": statistics.fmean(runner.loads or [0.0]),
                        "loadavg_1m_max": max(runner.loads or [0.0]),
                    } | _round_trend(rounds)],
                )
            )  # fmt: skip
            prog.step("before: table facts, query times")
            before = runner.read("before")
            prog.step("maintenance now")
            m = runner.maintain()
            prog.log("maintenance: " + ", ".join(f"{k}={v:,.6g}" for k, v in m.items()))
            result.workloads.append(
                Workload(
                    key="maintain", group="maintain", title="Maintenance now", target=FLOE,
                    params={}, reps=[m],
                )
            )  # fmt: skip
            prog.step("after: table facts, query times")
            after = runner.read("after")
            result.machine["loadavg_after_workloads"] = loadavg()
            result.workloads += _phase_workloads(before, after, s)
            checks = {
                "records_produced": float(produced),
                "rows_spark_before": float(before.spark_count),
                "rows_duckdb_before": float(before.duckdb_count),
                "rows_spark_after": float(after.spark_count),
                "rows_duckdb_after": float(after.duckdb_count),
                "spark_same_rows": _same(before.spark_rows, after.spark_rows),
                "duckdb_same_rows": _same(before.duckdb_rows, after.duckdb_rows),
                "engines_agree": _same(before.spark_rows, before.duckdb_rows)
                * _same(after.spark_rows, after.duckdb_rows),
            }
            counts = [checks[k] for k in checks if k.startswith("rows_")]
            checks["row_counts_ok"] = 1.0 if set(counts) == {float(produced)} else 0.0
            result.workloads.append(
                Workload(
                    key="correctness", group="correctness", title="Query results",
                    target=FLOE, params={"query": QUERY}, reps=[checks],
                )
            )  # fmt: skip
            result.figures["after_over_before"] = _ratios(before, after)
            result.figures["query_rows"] = {"rows": float(len(after.spark_rows))}
            result.notes += [
                f"{k}: {v:.0f} (expected 1)"
                for k, v in checks.items()
                if k.endswith(("_ok", "_same_rows", "_agree")) and v != 1.0
            ]
        finally:
            if admin is not None:
                admin.close()
            code = floe.stop()
            prog.log(f"floe stopped (exit code {code})")
    result.duration_s = time.monotonic() - t0
    return result


def render(result: SuiteResult, charts: list[tuple[str, Path]], page_dir: Path) -> list[str]:
    """The suite's Markdown section (see ``benchmarks.maintenance_report``)."""
    from benchmarks import maintenance_report

    return maintenance_report.render(result, charts, page_dir)


def charts(result: SuiteResult, img_dir: Path) -> list[tuple[str, Path]]:
    """Draw the suite's PNG chart into ``img_dir``; return (title, path) pairs."""
    from benchmarks import maintenance_report

    return maintenance_report.charts(result, img_dir)
