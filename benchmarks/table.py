"""The ``table`` suite: Avro clickstream -> Iceberg, Floe table topics vs a Python ETL.

Layout of one run (one ``floe up`` for all of it, registry and Spark included):

1. serialize the clickstream once (fixed seed; ``benchmarks.table_load.serialize``);
2. warm-up: a small table topic, so Spark's cold start (JVM, first job) is measured once,
   apart from the ingest repetitions (``cold_start_s``);
3. ingest, per repetition, on a fresh 3-partition topic:
   (a) **Floe**: produce every record with the table topic disabled, then enable it
       (``by_schema_id`` + ``flatten``, commit interval 1 s) and time until a committed
       snapshot's ``floe.offsets`` reach the log end; CPU of the broker's process tree
       (``floe up`` + Spark JVM + Python workers, from ``/proc``), RSS sampled every
       0.2 s, round durations from the broker's ``tabletopic.committed`` log lines,
       data files from pyiceberg's ``inspect.files()``;
   (b) **ETL**: confluent-kafka consumer + fastavro + pyiceberg appends of 50k-record
       batches into a SQLite ``SqlCatalog``, in a fresh worker process (its own CPU and
       peak RSS), reading the same topic from Floe;
   (c) **floor**: pyarrow writing the same rows, decoded beforehand, to Parquet;
4. freshness: per commit interval, a warm table topic fed at a fixed rate; the table's
   snapshots are polled every 0.2 s; a record is visible once a snapshot whose
   ``floe.offsets`` cover it is seen; a sample of snapshots is checked with DuckDB;
5. the conversion path (Floe's converter on the same records) under cProfile.

The broker is always stopped in a ``finally``; worker processes end with their pools.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import re
import statistics
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks import clickstream, convert_speed, table_load
from benchmarks.harness import (
    Progress,
    SuiteResult,
    Workload,
    floe_version_label,
    free_port,
    loadavg,
    machine_info,
    percentile,
    worker_pool,
)
from benchmarks.profile import ProfileSummary
from benchmarks.table_report import POLL_S as _POLL_S
from benchmarks.table_report import ingest_key
from benchmarks.targets import FloeTarget

NAME = "table"
TITLE = "Table topics: Floe vs a Python ETL vs the Parquet floor"
MB = 1_000_000
FLOE, ETL, FLOOR = "floe", "etl", "floor"
_CATCH_UP_TIMEOUT_S = 600.0
_LOG_LINE_WAIT_S = 30.0
"""How long a round's ``tabletopic.committed`` line may trail its commit."""
_ADMIN_TIMEOUT_S = 30.0
_WARM_RECORDS = 300


@dataclass(frozen=True)
class Settings:
    records: int
    partitions: int
    reps: int
    etl_batch: int
    ingest_interval_ms: int
    fresh_rate: int
    fresh_intervals_s: tuple[int, ...]
    fresh_seconds: tuple[float, ...]
    profile_records: int
    seed: int
    profile_dir: str | None = None
    quick: bool = False
    formats: tuple[str, ...] = table_load.FORMATS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The suite's own options, all prefixed ``--table-``."""
    g = parser.add_argument_group("table suite")
    g.add_argument("--table-records", type=int, help="records per ingest rep (1M; quick 50k)")
    g.add_argument("--table-etl-batch", type=int, default=50_000, help="ETL append batch")
    g.add_argument("--table-fresh-rate", type=int, default=2_000, help="records/s (2000)")
    g.add_argument(
        "--table-formats",
        default=",".join(table_load.FORMATS),
        help="value formats ingested, comma-separated (default avro,json,string; the goals "
        "and the freshness runs use avro)",
    )
    g.add_argument(
        "--table-fresh-intervals",
        help="commit intervals in s, comma-separated (default 1,5,60; quick 1,5)",
    )
    g.add_argument(
        "--table-fresh-seconds",
        help="produce seconds per interval, comma-separated (default 30,40,150; quick 15,15)",
    )


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def settings_from(args: argparse.Namespace) -> Settings:
    """Build the settings, applying the ``--quick`` preset to what was not given.

    Raises:
        ValueError: a size is not positive, or intervals and seconds do not pair up.
    """
    quick = bool(args.quick)
    intervals = _ints(args.table_fresh_intervals or ("1,5" if quick else "1,5,60"))
    default_seconds = ",".join(
        str(15 if quick else (150 if i >= 60 else 30 if i < 5 else 40)) for i in intervals
    )
    seconds = tuple(float(x) for x in (args.table_fresh_seconds or default_seconds).split(","))
    if len(seconds) != len(intervals):
        raise ValueError("--table-fresh-seconds needs one value per commit interval")
    records = args.table_records or (50_000 if quick else 1_000_000)
    s = Settings(
        records=records,
        partitions=3,
        reps=args.reps or (1 if quick else 3),
        etl_batch=args.table_etl_batch,
        ingest_interval_ms=1000,
        fresh_rate=args.table_fresh_rate,
        fresh_intervals_s=intervals,
        fresh_seconds=seconds,
        profile_records=min(records, 100_000),
        seed=args.seed,
        profile_dir=str(args.profile) if args.profile else None,
        quick=quick,
        formats=tuple(f.strip() for f in args.table_formats.split(",") if f.strip()),
    )
    if s.formats[:1] != (table_load.AVRO,) or not set(s.formats) <= set(table_load.FORMATS):
        raise ValueError(f"--table-formats must start with avro, of {table_load.FORMATS}")
    if min(s.records, s.reps, s.etl_batch, s.fresh_rate, *s.fresh_intervals_s, 1) < 1:
        raise ValueError("records, reps, batch, rate and intervals must be positive")
    if min(s.fresh_intervals_s, default=1) < 1 or min(s.fresh_seconds, default=1) <= 0:
        raise ValueError("commit intervals must be >= 1 s and produce seconds positive")
    return s


# -- the broker: floe up with a known registry port, its process tree ---------------------


class _Floe(FloeTarget):
    """``floe up`` whose registry port the suite knows (the clients need it)."""

    def __init__(self, workdir: Path) -> None:
        super().__init__(FLOE, workdir, ())
        self.registry_port = free_port()
        self.admin_port = free_port()

    @property
    def registry_url(self) -> str:
        return f"http://127.0.0.1:{self.registry_port}"

    def command(self) -> list[str]:
        cmd = super().command()
        # FloeTarget picks its own registry/admin ports: replace them with ours.
        for i, item in enumerate(cmd):
            if item.startswith("registry.port="):
                cmd[i] = f"registry.port={self.registry_port}"
            elif item.startswith("admin.port="):
                cmd[i] = f"admin.port={self.admin_port}"
        return cmd


_CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class TreeSample:
    """CPU seconds (own + reaped children) and RSS of a process tree and of its Spark
    part (the ``java`` process and its descendants: the JVM and the Python workers)."""

    cpu_s: float
    rss_mb: float
    spark_rss_mb: float


def _proc_table() -> dict[int, tuple[int, str, float, int]]:
    """pid -> (ppid, comm, cpu seconds incl. reaped children, RSS KiB) for every process."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
            comm = text[text.index("(") + 1 : text.rindex(")")]
            f = text[text.rindex(")") + 2 :].split()
            ticks = int(f[11]) + int(f[12]) + int(f[13]) + int(f[14])
            rss = int(f[21]) * os.sysconf("SC_PAGE_SIZE") // 1024
            out[int(entry.name)] = (int(f[1]), comm, ticks / _CLK_TCK, rss)
        except (OSError, ValueError, IndexError):
            continue
    return out


def tree_sample(root: int) -> TreeSample:
    """Sample ``root``'s tree. Reaped children's CPU is in their parent's cutime/cstime,
    so Python workers that exited between two samples still count."""
    procs = _proc_table()
    children: dict[int, list[int]] = {}
    for pid, (ppid, *_rest) in procs.items():
        children.setdefault(ppid, []).append(pid)
    cpu = rss = spark = 0.0

    def walk(pid: int, in_spark: bool) -> None:
        nonlocal cpu, rss, spark
        _, comm, c, r = procs[pid]
        in_spark = in_spark or comm == "java"
        cpu += c
        rss += r
        spark += r if in_spark else 0
        for child in children.get(pid, []):
            walk(child, in_spark)

    if root in procs:
        walk(root, False)
    return TreeSample(cpu, rss * 1024 / MB, spark * 1024 / MB)


class _RssPeak(threading.Thread):
    """Samples a process tree every 0.2 s until stopped; keeps the peaks. Owned by the
    suite's thread, which starts and joins it around one measurement."""

    def __init__(self, root: int) -> None:
        super().__init__(daemon=True)
        self.root = root
        self.peak_rss_mb = 0.0
        self.peak_spark_mb = 0.0
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.wait(_POLL_S):
            s = tree_sample(self.root)
            self.peak_rss_mb = max(self.peak_rss_mb, s.rss_mb)
            self.peak_spark_mb = max(self.peak_spark_mb, s.spark_rss_mb)

    def stop(self) -> None:
        self._halt.set()
        self.join()


_COMMITTED = re.compile(
    r"^(\S+ \S+) INFO \S+ tabletopic\.committed topic=(\S+) .*?rows=(\d+) files=(\d+) "
    r".*?seconds=([\d.]+)"
)


def rounds_of(stderr_log: Path, topic: str) -> list[dict[str, float]]:
    """The ``tabletopic.committed`` rounds of ``topic`` in the broker's stderr log."""
    out = []
    for line in stderr_log.read_text(errors="replace").splitlines():
        m = _COMMITTED.match(line)
        if m and m.group(2) == topic:
            stamp = time.mktime(time.strptime(m.group(1).split(",")[0], "%Y-%m-%d %H:%M:%S"))
            at = stamp + int(m.group(1).split(",")[1]) / 1000
            out.append(
                {"at": at, "rows": int(m.group(3)), "files": int(m.group(4)),
                 "seconds": float(m.group(5))}
            )  # fmt: skip
    return out


# -- admin and table reads (in the suite's process: light calls) --------------------------


class _Admin:
    """An AdminClient and Floe's catalog; owned by the suite's thread."""

    def __init__(self, floe: _Floe) -> None:
        from confluent_kafka.admin import AdminClient

        from floe.config import load_config
        from floe.tabletopic import catalog as cat

        self.floe = floe
        self.client: Any = AdminClient(
            {"bootstrap.servers": floe.bootstrap, "broker.address.family": "v4", "log_level": 4}
        )
        config = load_config(None, {"data.dir": str(floe.data_dir)}, environ={})
        self.settings = cat.CatalogSettings.from_config(config)
        self._catalog: Any = None

    def create(self, topic: str, partitions: int, config: dict[str, str]) -> None:
        from confluent_kafka.admin import NewTopic

        futures = self.client.create_topics(
            [NewTopic(topic, partitions, 1, config=config)], request_timeout=_ADMIN_TIMEOUT_S
        )
        for f in futures.values():
            f.result(timeout=_ADMIN_TIMEOUT_S)

    def alter(self, topic: str, config: dict[str, str]) -> None:
        from confluent_kafka.admin import (
            AlterConfigOpType,
            ConfigEntry,
            ConfigResource,
            ResourceType,
        )

        entries = [
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
            for k, v in config.items()
        ]
        res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)
        for f in self.client.incremental_alter_configs([res]).values():
            f.result(timeout=_ADMIN_TIMEOUT_S)

    def close(self) -> None:
        """Drop the AdminClient before the broker stops (it would log reconnect errors)."""
        self.client = None

    def delete(self, topic: str) -> None:
        for f in self.client.delete_topics([topic], request_timeout=_ADMIN_TIMEOUT_S).values():
            f.result(timeout=_ADMIN_TIMEOUT_S)

    def table(self, topic: str) -> Any:
        """The topic's Iceberg table, or None while it does not exist."""
        from floe.tabletopic import catalog as cat
        from floe.tabletopic.convert.layout import table_identifier

        try:
            if self._catalog is None:  # idempotent, as the broker's own start-up call
                self._catalog = cat.bootstrap(self.settings)
            return cat.load_table(self._catalog, *table_identifier("default", topic))
        except Exception:  # not created yet (NoSuchTableError) or a catalog hiccup
            return None

    def committed(self, topic: str) -> tuple[dict[int, int], Any]:
        """The committed offsets Floe recorded in the table (empty before the first
        commit)."""
        from floe.tabletopic import catalog as cat

        table = self.table(topic)
        if table is None:
            return {}, table
        offsets = cat.read_recorded(table).committed
        return {int(p): int(o) for p, o in offsets.items()}, table

    def wait_committed(self, topic: str, ends: dict[int, int], timeout_s: float) -> float:
        """Poll until the committed offsets reach ``ends``; return the wall time seen.

        Raises:
            TimeoutError: not reached within ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        seen: dict[int, int] = {}
        while time.monotonic() < deadline:
            seen, _ = self.committed(topic)
            if all(seen.get(p, 0) >= e for p, e in ends.items()):
                return time.time()
            if not self.floe.alive():
                raise RuntimeError(f"floe exited: {self.floe.tail(5)}")
            time.sleep(_POLL_S)
        raise TimeoutError(f"{topic}: committed {seen} after {timeout_s:.0f} s, expected {ends}")


def _table_topic_config(
    interval_ms: int, enable: bool, fmt: str = table_load.AVRO
) -> dict[str, str]:
    config = {
        "table.topic.enable": "true" if enable else "false",
        "table.topic.commit.interval.ms": str(interval_ms),
    }
    if fmt == table_load.STRING:
        return config | {"table.topic.convert.value.type": "string"}
    return config | {
        "table.topic.convert.value.type": "by_schema_id",
        "table.topic.transform.value.type": "flatten",
    }


def _register(registry_url: str, topic: str, fmt: str = table_load.AVRO) -> None:
    """Register the clickstream schema of ``fmt`` as ``<topic>-value`` (same schema:
    same id); nothing for string mode."""
    import json

    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    if fmt == table_load.STRING:
        return
    text, kind = (
        (clickstream.CLICKSTREAM, "AVRO")
        if fmt == table_load.AVRO
        else (clickstream.CLICKSTREAM_JSON_SCHEMA, "JSON")
    )
    client = SchemaRegistryClient({"url": registry_url})
    client.register_schema(f"{topic}-value", Schema(json.dumps(text), kind))


# -- the workloads --------------------------------------------------------------------------


class _Runner:
    """Drives the broker, the admin client and the worker pools; owned by the suite's
    thread."""

    def __init__(
        self,
        *,
        floe: _Floe,
        admin: _Admin,
        pool: concurrent.futures.Executor,
        data: table_load.Dataset,
        root: Path,
        prog: Progress,
        result: SuiteResult,
        s: Settings,
    ) -> None:
        self.floe, self.admin, self.pool, self.data = floe, admin, pool, data
        self.root, self.prog, self.result, self.s = root, prog, result, s

    def note(self, text: str) -> None:
        if text not in self.result.notes:
            self.result.notes.append(text)
            self.prog.log(f"note: {text}")

    def warm_up(self) -> float:
        """A first table topic: start Spark and run its first job; return enable -> visible."""
        topic = "bench_warmup"
        _register(self.floe.registry_url, topic)
        self.admin.create(topic, 1, _table_topic_config(1000, enable=True))
        t0 = time.time()
        out = self.pool.submit(
            table_load.produce_all, self.floe.bootstrap, topic,
            _head(self.data, self.root, _WARM_RECORDS), 1,
        ).result()  # fmt: skip
        seen = self.admin.wait_committed(topic, out.ends, _CATCH_UP_TIMEOUT_S)
        return seen - t0

    def ingest_rep(
        self, rep: int, workloads: dict[str, Workload], data: table_load.Dataset
    ) -> None:
        """One repetition of Floe, the ETL and the floor on ``data``'s format."""
        s = self.s
        fmt = data.fmt
        topic = f"bench_ingest_{rep}" if fmt == table_load.AVRO else f"bench_ingest_{fmt}_{rep}"
        _register(self.floe.registry_url, topic, fmt)
        config = _table_topic_config(s.ingest_interval_ms, False, fmt)
        self.admin.create(topic, s.partitions, config)
        produced = self.pool.submit(
            table_load.produce_all, self.floe.bootstrap, topic, data, s.partitions
        ).result()
        if produced.errors:
            raise RuntimeError(f"{produced.errors} produce errors on {topic}")
        order = [FLOE, ETL, FLOOR] if rep % 2 == 0 else [ETL, FLOE, FLOOR]
        for name in order:
            self.prog.step(f"ingest {fmt} {name} rep {rep + 1}/{s.reps}")
            try:
                if name == FLOE:
                    m = self._floe_ingest(topic, produced.ends, data)
                elif name == ETL:
                    m = self._etl(topic, rep, data)
                else:
                    m = self._floor(rep, data)
            except (RuntimeError, TimeoutError, OSError) as exc:
                workloads[name].failures.append(f"{type(exc).__name__}: {exc}")
                self.prog.log(f"ingest {fmt} {name} rep {rep + 1} FAILED: {exc}")
                continue
            workloads[name].reps.append(m)
            self.prog.log(f"ingest {fmt} {name} rep {rep + 1}: {_describe(m)}")
        self.admin.delete(topic)

    def _logged_rounds(self, topic: str, rows: int) -> list[dict[str, float]]:
        """The committed rounds of ``topic`` once the broker's log lines account for
        ``rows`` (a reader can see the commit before the broker logs it)."""
        deadline = time.monotonic() + _LOG_LINE_WAIT_S
        while True:
            rounds = rounds_of(self.floe.stderr_path, topic)
            if sum(r["rows"] for r in rounds) >= rows:
                return rounds
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{topic}: the broker logged tabletopic.committed for "
                    f"{sum(r['rows'] for r in rounds)} of {rows} rows"
                )
            time.sleep(0.1)

    def _floe_ingest(
        self, topic: str, ends: dict[int, int], data: table_load.Dataset
    ) -> dict[str, float]:
        gb = data.value_bytes / 1e9
        os.sync()
        before = tree_sample(self.floe.pid)
        sampler = _RssPeak(self.floe.pid)
        sampler.start()
        try:
            t0 = time.time()
            self.admin.alter(topic, {"table.topic.enable": "true"})
            seen = self.admin.wait_committed(topic, ends, _CATCH_UP_TIMEOUT_S)
        finally:
            sampler.stop()
        after = tree_sample(self.floe.pid)
        rounds = self._logged_rounds(topic, data.count)
        first_start = rounds[0]["at"] - rounds[0]["seconds"]
        busy = rounds[-1]["at"] - first_start
        _, table = self.admin.committed(topic)
        files = table.inspect.files()
        sizes = files.column("file_size_in_bytes").to_pylist()
        cpu = after.cpu_s - before.cpu_s
        return {
            "records": float(data.count),
            "records_s": data.count / busy,
            "mb_s": data.value_bytes / MB / busy,
            "seconds": busy,
            "records_s_enable_to_visible": data.count / (seen - t0),
            "enable_to_visible_s": seen - t0,
            "rounds": float(len(rounds)),
            "round_s_max": max(r["seconds"] for r in rounds),
            "round_s_sum": sum(r["seconds"] for r in rounds),
            "cpu_s": cpu,
            "cpu_s_per_gb": cpu / gb,
            "files": float(len(sizes)),
            "file_mb_mean": statistics.fmean(sizes) / MB if sizes else 0.0,
            "file_mb_total": sum(sizes) / MB,
            "peak_rss_mb": sampler.peak_rss_mb,
            "spark_peak_rss_mb": sampler.peak_spark_mb,
        }

    def _etl(self, topic: str, rep: int, data: table_load.Dataset) -> dict[str, float]:
        spec = table_load.EtlSpec(
            bootstrap=self.floe.bootstrap,
            registry_url=self.floe.registry_url,
            topic=topic,
            partitions=self.s.partitions,
            expected=data.count,
            batch=self.s.etl_batch,
            workdir=str(self.root / f"etl-{data.fmt}-{rep}"),
            timeout_s=_CATCH_UP_TIMEOUT_S,
            fmt=data.fmt,
        )
        with worker_pool() as pool:  # a fresh process: its peak RSS is this run's
            out = pool.submit(table_load.etl, spec).result()
        if out.records != data.count:
            raise RuntimeError(f"ETL read {out.records} of {data.count} records")
        gb = out.value_bytes / 1e9
        return {
            "records": float(out.records),
            "records_s": out.records / out.seconds,
            "mb_s": out.value_bytes / MB / out.seconds,
            "seconds": out.seconds,
            "cpu_s": out.cpu_s,
            "cpu_s_per_gb": out.cpu_s / gb,
            "commits": float(out.commits),
            "commit_s_mean": statistics.fmean(out.commit_seconds) if out.commit_seconds else 0,
            "files": float(out.files),
            "file_mb_mean": out.file_bytes / MB / out.files if out.files else 0.0,
            "file_mb_total": out.file_bytes / MB,
            "peak_rss_mb": out.peak_rss_mb,
        }

    def _floor(self, rep: int, data: table_load.Dataset) -> dict[str, float]:
        where = str(self.root / f"floor-{data.fmt}-{rep}")
        with worker_pool() as pool:
            out = pool.submit(table_load.floor, data, self.s.partitions, where).result()
        gb = out.value_bytes / 1e9
        return {
            "records": float(out.records),
            "records_s": out.records / out.seconds,
            "mb_s": out.value_bytes / MB / out.seconds,
            "seconds": out.seconds,
            "cpu_s": out.cpu_s,
            "cpu_s_per_gb": out.cpu_s / gb,
            "files": float(out.files),
            "file_mb_mean": out.file_bytes / MB / out.files if out.files else 0.0,
            "file_mb_total": out.file_bytes / MB,
        }

    def freshness(self, interval_s: int, seconds: float) -> Workload:
        """Produce at a fixed rate into a warm table topic committing every ``interval_s``;
        time each record from its acknowledgment to the first snapshot seen that covers it.
        """
        s = self.s
        topic = f"bench_fresh_{interval_s}s"
        w = Workload(
            key=f"freshness-{interval_s}s", group="freshness",
            title=f"Freshness, commit every {interval_s} s, {s.fresh_rate:,} records/s",
            target=FLOE, params={"interval_s": interval_s, "rate": s.fresh_rate,
                                 "seconds": seconds, "partitions": s.partitions},
        )  # fmt: skip
        _register(self.floe.registry_url, topic)
        self.admin.create(topic, s.partitions, _table_topic_config(1000, enable=True))
        warm = self.pool.submit(
            table_load.produce_all, self.floe.bootstrap, topic,
            _head(self.data, self.root, _WARM_RECORDS), s.partitions,
        ).result()  # fmt: skip
        self.admin.wait_committed(topic, warm.ends, _CATCH_UP_TIMEOUT_S)
        if interval_s != 1:
            self.admin.alter(topic, {"table.topic.commit.interval.ms": str(interval_s * 1000)})
            time.sleep(2.0)  # the broker polls topic configs every second
        future = self.pool.submit(
            table_load.produce_at_rate, self.floe.bootstrap, topic, self.data,
            s.partitions, rate=s.fresh_rate, seconds=seconds,
        )  # fmt: skip
        seen: list[tuple[float, dict[int, int], int, str]] = []  # wall, offsets, ts_ms, meta
        last: dict[int, int] = {}
        deadline = time.monotonic() + seconds + interval_s * 3 + 120
        out: table_load.RateResult | None = None
        while time.monotonic() < deadline:
            offsets, table = self.admin.committed(topic)
            now = time.time()
            if offsets != last and table is not None:
                snap = table.current_snapshot()
                seen.append((now, offsets, snap.timestamp_ms, table.metadata_location))
                last = offsets
            if out is None and future.done():
                out = future.result()
            if out is not None:
                ends: dict[int, int] = {}
                for p, o in zip(out.partitions, out.offsets, strict=True):
                    ends[p] = max(ends.get(p, 0), o + 1)
                if all(last.get(p, 0) >= e for p, e in ends.items()):
                    break
            time.sleep(_POLL_S)
        else:
            raise TimeoutError(f"{topic}: not caught up (last committed {last})")
        assert out is not None
        visible, committed = [], []
        for p, o, acked in zip(out.partitions, out.offsets, out.acked_at, strict=True):
            snap = next(x for x in seen if x[1].get(p, 0) > o)
            visible.append(max(0.0, snap[0] - acked))
            committed.append(max(0.0, snap[2] / 1000 - acked))
        visible.sort()
        committed.sort()
        rounds = rounds_of(self.floe.stderr_path, topic)[1:]  # [0]: the warm-up round
        checked, mismatches = _duckdb_check(seen)
        w.reps.append(
            {
                "p50_s": percentile(visible, 50),
                "p99_s": percentile(visible, 99),
                "max_s": visible[-1],
                "commit_p50_s": percentile(committed, 50),
                "commit_p99_s": percentile(committed, 99),
                "records": float(len(visible)),
                "records_s": len(visible) / out.seconds,
                "errors": float(out.errors),
                "rounds": float(len(rounds)),
                "round_s_median": statistics.median(r["seconds"] for r in rounds)
                if rounds
                else 0.0,
                "duckdb_checked": float(checked),
                "duckdb_mismatches": float(mismatches),
            }
        )
        self.admin.delete(topic)
        return w

    def profile(self) -> None:
        out_dir = Path(self.s.profile_dir) if self.s.profile_dir else self.root
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / "table-convert-avro-flatten.prof"
        prof = self.pool.submit(
            table_load.profile_convert, self.data, self.s.profile_records, str(path)
        ).result()
        self.result.profiles.append(
            ProfileSummary(
                workload="convert-avro-flatten",
                samples=prof.records,
                top_self=prof.top_self,
                top_inclusive=prof.top_inclusive,
                path=str(path),
            )
        )
        self.result.memory.setdefault("convert", {})["records_s_one_core"] = prof.records_s
        self.result.memory["convert_formats"] = self.pool.submit(
            convert_speed.measure, self.s.profile_records, flattens=(True,)
        ).result()


def _head(data: table_load.Dataset, root: Path, n: int) -> table_load.Dataset:
    """The first ``n`` records of ``data`` as their own dataset file."""
    path = root / f"head-{n}.bin"
    if not path.exists():
        values = [v for _, v in zip(range(n), table_load.read_values(data.path), strict=False)]
        path.write_bytes(b"".join(len(v).to_bytes(4, "big") + v for v in values))
    values = list(table_load.read_values(str(path)))
    return table_load.Dataset(str(path), len(values), sum(map(len, values)), data.schema_id)


def _duckdb_check(seen: list[tuple[float, dict[int, int], int, str]]) -> tuple[int, int]:
    """Read up to 3 of the snapshots seen (first, middle, last) with DuckDB's
    ``iceberg_scan``: each partition's row count and max offset must match its
    ``floe.offsets``. Returns (checked, mismatches); (0, 0) without DuckDB."""
    try:
        import importlib.resources

        import duckdb
    except ImportError:
        return 0, 0
    con = duckdb.connect()
    con.execute("SET autoinstall_known_extensions=false")
    con.execute("SET autoload_known_extensions=false")
    for ext in ("avro", "iceberg"):
        pkg = importlib.resources.files(f"duckdb_extension_{ext}")
        con.execute(f"LOAD '{next(Path(str(pkg)).rglob(f'{ext}.duckdb_extension'))}'")
    picks = {0, len(seen) // 2, len(seen) - 1} if seen else set()
    mismatches = 0
    for i in sorted(picks):
        _, offsets, _, meta = seen[i]
        rows = con.execute(
            "SELECT _kafka_metadata.partition, count(*), max(_kafka_metadata.offset) "
            "FROM iceberg_scan(?) GROUP BY 1",
            [meta],
        ).fetchall()
        got = {int(p): (int(n), int(m) + 1) for p, n, m in rows}
        want = {p: (o, o) for p, o in offsets.items() if o > 0}
        mismatches += got != want
    con.close()
    return len(picks), mismatches


def _describe(m: dict[str, float]) -> str:
    keep = ("records_s", "mb_s", "seconds", "cpu_s_per_gb", "spark_peak_rss_mb", "p99_s")
    return ", ".join(f"{k}={v:.4g}" for k, v in m.items() if k in keep)


def run(args: argparse.Namespace, command: str) -> SuiteResult:
    """Run the suite and return the measurements.

    Raises:
        ValueError: bad settings.
        RuntimeError: the broker did not start or died.
        TimeoutError: a table did not catch up in time.
    """
    s = settings_from(args)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="floe-bench-table-") as tmp, Progress() as prog:
        root = Path(tmp)
        result = SuiteResult(
            suite=NAME,
            machine=machine_info(root),
            settings=asdict(s),
            command=command,
            started=time.strftime("%Y-%m-%d %H:%M %Z"),
        )
        floe = _Floe(root / "floe")
        result.targets = {
            FLOE: {
                "label": "Floe table topic",
                "description": "floe up (Spark local[2], 1 GiB driver), by_schema_id + "
                f"flatten, commit interval {s.ingest_interval_ms} ms",
                "version": floe_version_label(),
            },
            ETL: {
                "label": "Python ETL",
                "description": "confluent-kafka consumer + fastavro + pyiceberg append of "
                f"{s.etl_batch:,}-record batches (SqlCatalog on SQLite), one process",
                "version": _versions("confluent_kafka", "fastavro", "pyiceberg"),
            },
            FLOOR: {
                "label": "Parquet floor",
                "description": "pyarrow.parquet.write_table (zstd) of the already-decoded "
                "Arrow rows, one file per partition, one process",
                "version": _versions("pyarrow"),
            },
        }
        steps = (s.reps * 3 + 1) * len(s.formats) + len(s.fresh_intervals_s) + 2
        prog.total(steps)
        admin: _Admin | None = None
        try:
            floe.start()
            prog.log(f"floe up on {floe.bootstrap} (pid {floe.pid})")
            admin = _Admin(floe)
            with worker_pool() as pool:
                datasets = {}
                for fmt in s.formats:
                    prog.step(f"serialize {s.records:,} {fmt} records")
                    datasets[fmt] = pool.submit(
                        table_load.serialize, floe.registry_url, f"bench_clicks_{fmt}",
                        s.records, s.seed, str(root / f"clicks-{fmt}.bin"), fmt=fmt,
                    ).result()  # fmt: skip
                data = datasets[table_load.AVRO]
                result.settings["avg_value_bytes"] = data.value_bytes / data.count
                result.settings["avg_value_bytes_by_format"] = {
                    fmt: d.value_bytes / d.count for fmt, d in datasets.items()
                }
                runner = _Runner(
                    floe=floe, admin=admin, pool=pool, data=data, root=root, prog=prog,
                    result=result, s=s,
                )  # fmt: skip
                prog.step("warm-up (Spark start, first round)")
                cold = runner.warm_up()
                result.memory[FLOE] = {"cold_start_s": cold}
                prog.log(f"warm-up: first commit visible {cold:.1f} s after enabling")
                ingest = {
                    fmt: {
                        name: Workload(
                            key=ingest_key(fmt), group="ingest",
                            title=f"Ingest {s.records:,} {fmt} records, {s.partitions} partitions",
                            target=name, params={"records": s.records, "partitions": s.partitions,
                                                 "format": fmt},
                        )
                        for name in (FLOE, ETL, FLOOR)
                    }
                    for fmt in s.formats
                }  # fmt: skip
                for rep in range(s.reps):
                    for fmt in s.formats:
                        runner.ingest_rep(rep, ingest[fmt], datasets[fmt])
                for by_target in ingest.values():
                    result.workloads.extend(by_target.values())
                for interval, seconds in zip(s.fresh_intervals_s, s.fresh_seconds, strict=True):
                    prog.step(f"freshness, commit every {interval} s ({seconds:.0f} s)")
                    try:
                        w = runner.freshness(interval, seconds)
                        prog.log(f"{w.key}: {_describe(w.reps[0])}")
                    except (RuntimeError, TimeoutError) as exc:
                        w = Workload(
                            key=f"freshness-{interval}s", group="freshness",
                            title=f"Freshness, commit every {interval} s", target=FLOE,
                            params={"interval_s": interval}, failures=[str(exc)],
                        )  # fmt: skip
                        prog.log(f"freshness {interval} s FAILED: {exc}")
                    result.workloads.append(w)
                prog.step("profile the conversion path (cProfile)")
                runner.profile()
            end = tree_sample(floe.pid)
            result.memory[FLOE] |= {"rss_after_mb": end.rss_mb, "total_cpu_s": end.cpu_s,
                                    "spark_rss_after_mb": end.spark_rss_mb}  # fmt: skip
            result.machine["loadavg_after_workloads"] = loadavg()
        finally:
            if admin is not None:
                admin.close()
            code = floe.stop()
            prog.log(f"floe stopped (exit code {code})")
    result.duration_s = time.monotonic() - t0
    return result


def _versions(*modules: str) -> str:
    from importlib.metadata import version

    names = {"confluent_kafka": "confluent-kafka"}
    return ", ".join(f"{m} {version(names.get(m, m))}" for m in modules)


def render(result: SuiteResult, charts: list[tuple[str, Path]], page_dir: Path) -> list[str]:
    """The suite's Markdown section (see ``benchmarks.table_report``)."""
    from benchmarks import table_report

    return table_report.render(result, charts, page_dir)


def charts(result: SuiteResult, img_dir: Path) -> list[tuple[str, Path]]:
    """Draw the suite's PNG charts into ``img_dir``; return (title, path) pairs."""
    from benchmarks import table_report

    return table_report.charts(result, img_dir)
