"""The ``cluster`` suite's takeover workload: does a member's takeover grow with the bucket?

Issue 29 asks that "a takeover's time does not grow with the bucket (measured at 1k and
50k partition objects)". For each size in ``--cluster-takeover-objects`` (default
:data:`OBJECTS`, quick :data:`QUICK_OBJECTS`), one after the other in the same run, on one
SeaweedFS and one etcd (each size its own bucket prefix and etcd namespace):

1. **Fill.** Three brokers sharing partitions (``cluster.share.partitions``, etcd
   metadata store) get a topic of :data:`PARTITIONS` partitions, two per broker, and a
   producer writes ``objects / PARTITIONS`` one-record batches to each partition, then
   one :data:`FENCE_BYTES` record; once the bucket's partition objects hold every record
   the brokers are stopped (SIGTERM).
2. **Split.** With the brokers down, each partition's objects are read back and written
   again one batch per object, with the keys the broker itself would give them
   (``layout.PartObject.of``), the partition's manifests made to name them, and the
   originals deleted: the same bytes, offsets, committed ends in etcd and key layout,
   in ``objects`` partition objects. (The broker
   writes objects of at least ``storage.s3.object.target.bytes``, 64 KiB at the least,
   so 50,000 of them through it would take gigabytes; the takeover's requests are per
   object, its bytes are not what is measured.) The trailing fence object is at least the
   target size, so the upload pass's merge of a partition's trailing small objects never
   reaches back into the split history.
3. **Take over.** The brokers start again (each one's ``storage.object.opened ... ms`` is
   the writer's and members' start-up read), the topic is spread two per broker again,
   a probe producer sends :data:`PROBE_RATE` records/s to each partition (acks=all,
   idempotent); once every partition has acknowledged (a broker that starts leading a
   partition at runtime restores it first: the seconds from the restart are reported)
   and ``steady_s`` later, a member leading two partitions is killed (SIGKILL to its
   process group). Measured: from the kill to the writer's Metadata
   naming a live leader for both, and to the probe's first acknowledgement on each of
   them (read more than ``IN_FLIGHT_S`` after the kill); the writer's own
   ``storage.object.acquired ... ms`` (restore of each partition, from the start of the
   takeover's bucket read) and ``cluster.partitions_taken_over ... ms`` (from fencing
   the dead stream to the partitions opened) log lines; and every request the writer
   made to the bucket between the kill and the last first acknowledgement, by operation,
   key kind and call site (the brokers run under ``benchmarks/bucket_trace.py``). With
   py-spy on PATH the writer is sampled over the same window (idle threads included: a
   restore mostly waits for the bucket). The requests go to the JSON's ``figures``
   (``takeover-<n>.restart.*`` and ``takeover-<n>.takeover.*``); the samples, the
   writer's trace and every broker's log to ``--profile DIR`` when given.

Everything else is the product's default (the session timeout: ``--cluster-session-
timeout-ms``), but ``storage.s3.object.target.bytes`` (its minimum, see above) and, in
the fill only, ``storage.s3.upload.interval.ms`` (:data:`FILL_UPLOAD_MS`).
"""

from __future__ import annotations

import contextlib
import functools
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks import bucket_trace
from benchmarks.cluster_base import BUCKET, Cluster, Member, leaders, led
from benchmarks.etcd_server import ETCD_EXITED, Etcd, etcd_server
from benchmarks.failover_clients import IN_FLIGHT_S
from benchmarks.harness import REPO, Progress, SuiteResult, Workload
from benchmarks.profile import PySpy, summarise
from floe.config.loader import load_config
from floe.storage.local.meta import topics_from_doc
from floe.storage.object import layout
from floe.storage.object.bucket import Bucket
from floe.storage.object.state import list_partition_objects
from floe.testing.seaweed import SeaweedServer

TAKEOVER_KEY = "takeover"
TOPIC = "bench-takeover"
PARTITIONS = 6
"""Two per broker of three."""
OBJECTS = (1_000, 50_000)
QUICK_OBJECTS = (200, 2_000)
FENCE_BYTES = 80 * 1024
TARGET_BYTES = 64 * 1024
"""``storage.s3.object.target.bytes``: its minimum."""
FILL_UPLOAD_MS = 500
PROBE_RATE = 20
"""Records/s of the probe producer to each partition."""
STEADY_S = 5.0
QUICK_STEADY_S = 2.0
TRACE_FILE = "bucket-trace.jsonl"
ETCD_ATTEMPTS = 2
"""Runs of a size whose etcd exits under it (the first failure is kept as a note)."""
_TIMEOUT_S = 600.0
_POLL_S = 0.05
_PUTTERS = 32
_PROFILE_RATE_HZ = 100
_OPENED = re.compile(rb"storage\.object\.opened .*? ms=(\d+)")
_ACQUIRED = re.compile(
    rb"storage\.object\.acquired partition=(\S+)-(\d+) log_end_offset=\d+ bytes=(\d+) "
    rb"from_snapshot=\S+ (?:objects=\d+ )?(?:staged=\S+ )?ms=(\d+)"
)
_TAKEN = re.compile(rb"cluster\.partitions_taken_over .*? partitions=(\d+) ms=(\d+)")


@dataclass(frozen=True)
class TakeoverSettings:
    """What the takeover workload runs; stored in the JSON under ``takeover``."""

    objects: tuple[int, ...]
    session_timeout_ms: int
    steady_s: float
    rate: int = PROBE_RATE
    partitions: int = PARTITIONS


def parse_objects(text: str) -> tuple[int, ...]:
    """``1000,50000`` -> ``(1000, 50000)``.

    Raises:
        ValueError: not a comma-separated list of sizes of at least one object per
            partition.
    """
    sizes = tuple(int(part) for part in text.split(",") if part.strip())
    if not sizes or min(sizes) < 2 * PARTITIONS:
        raise ValueError(f"--cluster-takeover-objects: sizes of at least {2 * PARTITIONS}")
    return sizes


class TracedMember(Member):
    """A member started through ``benchmarks/bucket_trace.py``: every bucket request it
    makes goes to ``trace_path``. Its waits fail at once when ``etcd`` exits."""

    def __init__(self, name: str, node_id: int, workdir: Path, sets: dict[str, str],
                 etcd: Etcd) -> None:  # fmt: skip
        super().__init__(name, node_id, workdir, sets)
        self.etcd = etcd

    def serving(self) -> bool:
        """Raises: RuntimeError: etcd exited."""
        self.etcd.check()
        return super().serving()

    @property
    def trace_path(self) -> Path:
        return self.workdir / TRACE_FILE

    def command(self) -> list[str]:
        floe_args = super().command()[1:]
        script = REPO / "benchmarks" / "bucket_trace.py"
        return [sys.executable, str(script), str(self.trace_path), *floe_args]

    def trace(self) -> list[bucket_trace.Event]:
        return bucket_trace.read(self.trace_path)

    def wait(self, what: str, check: Callable[[], bool], timeout_s: float = _TIMEOUT_S) -> float:
        """:meth:`Member.wait`, by default as long as a loaded machine needs (three
        brokers importing at once on two busy cores took over a minute to serve).

        Raises:
            RuntimeError: see :meth:`Member.wait`; etcd exited.
        """

        def checked() -> bool:
            self.etcd.check()
            return check()

        return super().wait(what, checked, timeout_s)


class TracedCluster(Cluster):
    """A :class:`Cluster` of :class:`TracedMember`, as patient as they are."""

    def __init__(self, name: str, workdir: Path, size: int, sets: dict[str, str],
                 etcd: Etcd) -> None:  # fmt: skip
        self.etcd = etcd  # before the members are made
        super().__init__(name, workdir, size, sets)

    def member(self, node_id: int) -> Member:
        return TracedMember(f"{self.name}/{node_id}", node_id, self.workdir / f"broker-{node_id}",
                            self.sets, self.etcd)  # fmt: skip

    def writer(self, exclude: Member | None = None, timeout_s: float = _TIMEOUT_S) -> Member:
        return super().writer(exclude, timeout_s)


def bucket_of(server: SeaweedServer, prefix: str) -> Bucket:
    """Floe's own bucket client for ``prefix`` (the fill's split and checks)."""
    return Bucket.from_config(load_config(None, server.log_settings(BUCKET, prefix), environ={}))


def takeovers(
    server: SeaweedServer, root: Path, t: TakeoverSettings, prog: Progress, result: SuiteResult,
    *, profile_dir: Path | None = None,
) -> None:  # fmt: skip
    """Each size of ``t.objects`` in turn (module docstring); a size that fails is a
    failure of its workload, and the next size still runs. The writer's py-spy samples
    and bucket trace of each takeover are kept in ``profile_dir`` (None: dropped with
    ``root``).

    Raises:
        RuntimeError: etcd did not start.
    """
    result.settings["takeover"] = asdict(t)
    keep = profile_dir or root
    keep.mkdir(parents=True, exist_ok=True)
    for n in t.objects:  # an etcd each: one that dies takes one size with it
        for attempt in range(ETCD_ATTEMPTS):
            with etcd_server(root / f"etcd-{n}-{attempt}") as etcd:
                w = _one_size(server, etcd, root, n, t, prog=prog, result=result, keep=keep,
                              attempt=attempt)  # fmt: skip
            if not any(f.startswith(ETCD_EXITED) for f in w.failures):
                break
            if attempt + 1 < ETCD_ATTEMPTS:
                result.workloads.remove(w)
                result.notes.append(f"{w.target}: {w.failures[-1]}; run again on a new etcd")
                prog.log(f"{w.target}: etcd exited; run again on a new etcd and prefix")


def _sets(server: SeaweedServer, etcd: Etcd, prefix: str, t: TakeoverSettings
          ) -> dict[str, str]:  # fmt: skip
    return {
        **server.log_settings(BUCKET, prefix),
        "cluster.metadata.url": f"etcd://{etcd.endpoint}",
        "cluster.metadata.namespace": prefix,
        "cluster.session.timeout.ms": str(t.session_timeout_ms),
        "cluster.share.partitions": "true",
        "storage.s3.object.target.bytes": str(TARGET_BYTES),
    }


def _one_size(
    server: SeaweedServer, etcd: Etcd, root: Path, n: int, t: TakeoverSettings, *,
    prog: Progress, result: SuiteResult, keep: Path, attempt: int = 0,
) -> Workload:  # fmt: skip
    """One size (module docstring) on its own prefix; its workload, appended to
    ``result``, holds the failure if there was one."""
    name = f"takeover-{n}"
    again = f"_{attempt}" if attempt else ""
    prefix = f"bench_takeover_{n}{again}"
    per = max(1, (n - t.partitions) // t.partitions)
    w = Workload(
        key=TAKEOVER_KEY, group="takeover", target=name,
        title=f"Kill -9 of a member leading 2 of {t.partitions} partitions, bucket of "
        f"~{n:,} partition objects",
        params={"objects_asked": n, "records_per_partition": per + 1, **asdict(t)},
    )  # fmt: skip
    result.workloads.append(w)
    result.targets[name] = {
        "label": f"{n:,} objects",
        "version": "",
        "description": f"3 brokers sharing partitions, etcd, prefix {prefix}",
    }
    sets = _sets(server, etcd, prefix, t)
    workdir = root / f"{name}{again}"
    fill = TracedCluster(name, workdir, 3, {**sets,
                         "storage.s3.upload.interval.ms": str(FILL_UPLOAD_MS)}, etcd)  # fmt: skip
    cluster = TracedCluster(name, workdir, 3, sets, etcd)
    bucket = bucket_of(server, prefix)
    try:
        prog.step(f"{name}: fill")
        t0 = time.monotonic()
        fill.start()
        up = time.monotonic() - t0
        _spread(fill)
        t1 = time.monotonic()
        _fill(fill.writer().bootstrap, t.partitions, per)
        t2 = time.monotonic()
        topic_id = _wait_uploaded(bucket, t.partitions, per + 1)
        prog.log(f"{name}: up in {up:.0f} s, spread in {t1 - t0 - up:.0f} s, {per + 1:,} "
                 f"records per partition produced in {t2 - t1:.0f} s, in partition objects "
                 f"{time.monotonic() - t2:.0f} s later; stopping (exit {fill.stop()})")  # fmt: skip
        t0 = time.monotonic()
        objects = _split(bucket, topic_id, t.partitions)
        prog.log(f"{name}: split into {objects:,} partition objects in "
                 f"{time.monotonic() - t0:.0f} s")  # fmt: skip
        prog.step(f"{name}: take over")
        rep, tallies, profile = _take_over(cluster, t, prog, name, keep)
        rep["objects"] = float(objects)
        w.reps.append(rep)
        for row, counts in tallies.items():
            result.figures[f"{name}.{row}"] = counts
        if profile is not None:
            result.profiles.append(profile)
        prog.log(f"{name}: {_said(rep)}")
    except (RuntimeError, TimeoutError) as exc:
        w.failures.append(str(exc))
        prog.log(f"{name} FAILED: {exc}")
    finally:
        for c in (fill, cluster):
            c.stop()
        for m in cluster.members:  # one log per broker, both phases
            with contextlib.suppress(OSError):
                shutil.copyfile(m.log_path, keep / f"{name}{again}-broker-{m.node_id}.log")
    return w


def _spread(cluster: Cluster) -> None:
    """Create the topic (if needed) and wait until each broker leads two partitions.

    Raises:
        RuntimeError: it was not spread in time.
    """
    from confluent_kafka.admin import AdminClient

    from benchmarks import loadgen

    writer = cluster.writer()
    admin = AdminClient({"bootstrap.servers": writer.bootstrap, "log_level": 2})
    if TOPIC not in admin.list_topics(timeout=10).topics:
        loadgen.create_topics(writer.bootstrap, [loadgen.TopicSpec(TOPIC, PARTITIONS)], 30)
    ids = {m.node_id for m in cluster.members}
    writer.wait("spread the topic over the three",
                lambda: led(admin, TOPIC) == dict.fromkeys(ids, PARTITIONS // 3),
                timeout_s=_TIMEOUT_S)  # fmt: skip


def _fill(bootstrap: str, partitions: int, per: int) -> None:
    """``per`` one-record batches to each partition, then one :data:`FENCE_BYTES` record.

    Raises:
        RuntimeError: a record was not acknowledged.
    """
    from confluent_kafka import Producer

    failed: list[str] = []

    def report(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(str(err))

    producer = Producer({
        "bootstrap.servers": bootstrap, "broker.address.family": "v4", "log_level": 2,
        "acks": 1, "linger.ms": 0, "batch.num.messages": 1,
        "queue.buffering.max.messages": 200_000,
    })  # fmt: skip

    def send(value: bytes, p: int) -> None:
        while True:
            try:
                producer.produce(TOPIC, value, partition=p, on_delivery=report)
                return
            except BufferError:
                producer.poll(0.05)

    for i in range(per):
        for p in range(partitions):
            send(b"fill-%d" % i, p)
        producer.poll(0)
    for p in range(partitions):
        send(bytes(FENCE_BYTES), p)
    left = producer.flush(_TIMEOUT_S)
    if left or failed:
        raise RuntimeError(f"fill: {left} records unacknowledged, {len(failed)} failed "
                           f"({failed[:1]})")  # fmt: skip


def _wait_uploaded(bucket: Bucket, partitions: int, records: int) -> Any:
    """Wait until every partition's objects reach ``records``; the topic's id.

    Raises:
        TimeoutError: they did not within :data:`_TIMEOUT_S`.
    """
    meta = topics_from_doc(bucket.get(layout.TOPICS_KEY))[TOPIC]  # type: ignore[index]
    deadline = time.monotonic() + _TIMEOUT_S
    while time.monotonic() < deadline:
        ends = [
            max((o.end for o in list_partition_objects(bucket, (meta.topic_id, p))), default=0)
            for p in range(partitions)
        ]
        if min(ends) >= records:
            return meta.topic_id
        time.sleep(0.5)
    raise TimeoutError(f"the partition objects did not reach {records} records: {ends}")


def _split(bucket: Bucket, topic_id: Any, partitions: int) -> int:
    """Write each partition's batches one per object and delete the objects they came
    from (the brokers are down); returns the partition objects the topic has now."""
    total = 0
    with ThreadPoolExecutor(_PUTTERS, thread_name_prefix="bench-split") as pool:
        for p in range(partitions):
            old = list_partition_objects(bucket, (topic_id, p))
            data = memoryview(b"".join(pool.map(bucket.get, [o.key for o in old])))
            fresh: dict[str, bytes] = {}
            split: list[layout.PartObject] = []
            for run in layout.batch_runs(data, 1, 1):  # one whole batch per run
                blob = bytes(run)
                base = int.from_bytes(blob[:8], "big", signed=True)
                obj = layout.PartObject.of(topic_id, p, blob, base, layout.end_offset(blob))
                fresh[obj.key] = blob
                split.append(obj)
            list(pool.map(lambda item: bucket.put(*item), fresh.items()))
            _rename_in_manifests(bucket, topic_id, p, split)
            bucket.delete([o.key for o in old if o.key not in fresh])
            total += len(list_partition_objects(bucket, (topic_id, p)))
    return total


def _rename_in_manifests(
    bucket: Bucket, topic_id: Any, partition: int, objects: list[layout.PartObject]
) -> None:
    """Make every manifest of the partition name ``objects`` (its snapshots kept), in
    place: the metadata store names one of them, and a restore reads what it names."""
    for item in bucket.list(layout.partition_prefix(topic_id, partition)):
        if item.key.endswith(layout.MANIFEST_SUFFIX):
            _, snapshots = layout.decode_manifest(bucket.get(item.key), topic_id, partition)
            bucket.put(item.key, layout.encode_manifest(objects, snapshots))


class _Probe:
    """A producer sending ``rate`` records/s to each partition from its own thread,
    keeping each acknowledgement's arrival time per partition (appended by librdkafka's
    callback, in the same thread, read by the suite's under the lock)."""

    def __init__(self, bootstrap: str, partitions: int, rate: int) -> None:
        self.bootstrap, self.partitions, self.rate = bootstrap, partitions, rate
        self.lock = threading.Lock()
        self.acks: dict[int, list[float]] = {p: [] for p in range(partitions)}
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="takeover-probe", daemon=True)

    def __enter__(self) -> _Probe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)

    def _run(self) -> None:
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap, "log_level": 2,
                             "broker.address.family": "v4", "acks": "all",
                             "enable.idempotence": True, "linger.ms": 5})  # fmt: skip
        step = 1 / self.rate
        due = time.monotonic()
        while not self._stop.is_set():
            for p in range(self.partitions):
                producer.produce(TOPIC, b"probe", partition=p, on_delivery=self._report)
            due += step
            producer.poll(max(0.0, due - time.monotonic()))
        producer.flush(30)

    def _report(self, err: Any, msg: Any) -> None:
        now = time.monotonic()
        with self.lock:
            if err is None:
                self.acks[msg.partition()].append(now)
            else:
                self.errors += 1

    def first_after(self, at: float, partition: int) -> float | None:
        with self.lock:
            return next((a for a in self.acks[partition] if a >= at), None)


def _take_over(
    cluster: TracedCluster, t: TakeoverSettings, prog: Progress, name: str, keep: Path
) -> tuple[dict[str, float], dict[str, dict[str, float]], Any]:
    """Start the brokers on the split bucket, kill a member leading two partitions and
    time the writer taking them over (module docstring); returns the rep's metrics, the
    bucket requests by ``<window>.<op kind <- site>`` and the profile summary if any.

    Raises:
        RuntimeError: a broker failed, or a partition was not taken over in time.
    """
    from confluent_kafka.admin import AdminClient

    launched = time.monotonic()
    cluster.start()
    writer = cluster.writer()
    rep: dict[str, float] = {"restart_s": time.monotonic() - launched}
    for m in cluster.members:
        m.wait("open its store", functools.partial(_has, _OPENED, m), timeout_s=_TIMEOUT_S)
    opened = {m.node_id: _last(_OPENED, m.since_start()) or (-1,) for m in cluster.members}
    rep["open_writer_ms"] = float(opened[writer.node_id][0])
    rep["open_member_ms_max"] = max(float(o[0]) for b, o in opened.items() if b != writer.node_id)
    tallies = {f"restart.{k}": v for k, v in bucket_trace.tally(
        _trace(writer), launched, time.monotonic()).items()}  # fmt: skip
    _spread(cluster)
    admin = AdminClient({"bootstrap.servers": writer.bootstrap, "log_level": 2})
    victim = next(m for m in cluster.members if m is not writer)
    parts: list[int] = []

    def victim_leads_two() -> bool:
        parts[:] = sorted(p for p, b in leaders(admin, TOPIC).items() if b == victim.node_id)
        return len(parts) == PARTITIONS // 3

    writer.wait("name the victim's partitions", victim_leads_two, timeout_s=_TIMEOUT_S)
    profile_out = keep / f"{name}-writer.pyspy.txt"
    with _Probe(cluster.bootstrap, t.partitions, t.rate) as probe:
        # every partition served first: a broker that starts leading a partition at
        # runtime (the writer, after the restart) restores its whole history, and a kill
        # meanwhile would wait behind that restore
        started = time.monotonic()
        writer.wait("serve every partition", lambda: all(
            probe.first_after(started, p) is not None for p in range(t.partitions)))  # fmt: skip
        rep["served_s"] = time.monotonic() - launched
        time.sleep(t.steady_s)
        logged_before = len(writer.since_start())
        with _profiled(writer.pid, profile_out) as profiling:
            killed = time.monotonic()
            victim.crash()
            acks, led_at = _wait_taken(
                probe, parts, killed, writer, admin=admin, dead=victim.node_id
            )
            writer.wait(
                "log the takeover",
                lambda: _TAKEN.search(writer.since_start()[logged_before:]) is not None,
                timeout_s=_TIMEOUT_S,
            )
            time.sleep(2 * bucket_trace.FLUSH_S)
    rep["probe_errors"] = float(probe.errors)
    per = [a - killed for a in acks]
    rep.update({"ack_p50_s": statistics.median(per), "ack_max_s": max(per),
                "led_s": led_at - killed})  # fmt: skip
    logged = writer.since_start()[logged_before:]
    acquired = [m for m in _ACQUIRED.finditer(logged) if m.group(1) == TOPIC.encode()]
    restore = [float(m.group(4)) for m in acquired if int(m.group(2)) in parts]
    rep["restore_ms_max"] = max(restore, default=-1.0)
    rep["restore_bytes"] = float(sum(int(m.group(3)) for m in acquired if int(m.group(2)) in parts))
    taken = _TAKEN.search(logged)
    rep["taken_over_ms"] = float(taken.group(2)) if taken else -1.0
    rep["taken_over_partitions"] = float(taken.group(1)) if taken else -1.0
    window = bucket_trace.tally(_trace(writer), killed, max(acks))
    if isinstance(writer, TracedMember):
        shutil.copyfile(writer.trace_path, keep / f"{name}-writer-{TRACE_FILE}")
    tallies.update({f"takeover.{k}": v for k, v in window.items()})
    for op, rows in (("lists", ("list",)), ("gets", ("get ", "get_range "))):
        rep[op] = float(sum(v["requests"] for k, v in window.items() if k.startswith(rows)))
    rep["list_keys"] = float(sum(v["keys"] for k, v in window.items() if k.startswith("list")))
    rep["get_bytes"] = float(sum(v["bytes"] for k, v in window.items() if k.startswith("get")))
    prog.log(f"{name}: victim {victim.node_id} led {parts}; writer {writer.node_id}; "
             f"open ms writer {rep['open_writer_ms']:.0f}")  # fmt: skip
    return rep, tallies, summarise(name, profile_out) if profiling else None


def _trace(m: Member) -> list[bucket_trace.Event]:
    return m.trace() if isinstance(m, TracedMember) else []


def _has(pattern: re.Pattern[bytes], m: Member) -> bool:
    return pattern.search(m.since_start()) is not None


def _last(pattern: re.Pattern[bytes], text: bytes) -> tuple[int, ...] | None:
    found = list(pattern.finditer(text))
    return tuple(int(g) for g in found[-1].groups()) if found else None


def _wait_taken(
    probe: _Probe, parts: list[int], killed: float, writer: Member, *, admin: Any, dead: int
) -> tuple[list[float], float]:
    """The probe's first acknowledgement on each of ``parts`` read more than
    ``IN_FLIGHT_S`` after ``killed``, and when the writer's Metadata first named a live
    leader for all of them (whichever comes last is waited for).

    Raises:
        RuntimeError: that did not happen within :data:`_TIMEOUT_S`, or the writer died.
    """
    found: dict[int, float] = {}
    led_at: float | None = None
    while len(found) < len(parts) or led_at is None:
        for p in parts:
            if p not in found and (at := probe.first_after(killed + IN_FLIGHT_S, p)) is not None:
                found[p] = at
        if led_at is None:
            now = leaders(admin, TOPIC)
            if all(now.get(p, -1) not in (-1, dead) for p in parts):
                led_at = time.monotonic()
        if not writer.alive():
            raise RuntimeError(f"the writer exited during the takeover: {writer.tail()}")
        if isinstance(writer, TracedMember):
            writer.etcd.check()
        if time.monotonic() - killed > _TIMEOUT_S:
            raise RuntimeError(f"partitions {sorted(set(parts) - set(found))} not acknowledged "
                               f"or not led within {_TIMEOUT_S:g} s")  # fmt: skip
        time.sleep(_POLL_S)
    return [found[p] for p in parts], led_at


@contextlib.contextmanager
def _profiled(pid: int, out: Path) -> Iterator[bool]:
    """``py-spy record`` of ``pid`` (idle threads included) for the block, when py-spy is
    on PATH or beside the interpreter; yields whether it runs."""
    exe = PySpy.executable()
    if exe is None:
        yield False
        return
    cmd = [exe, "record", "--format", "raw", "--function", "--idle", "--nonblocking",
           "--rate", str(_PROFILE_RATE_HZ), "-o", str(out), "-p", str(pid)]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL)  # fmt: skip
    try:
        yield True
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)


def _said(rep: dict[str, float]) -> str:
    return (
        f"{int(rep['objects']):,} objects; kill -> first ack p50 {rep['ack_p50_s']:.2f} s, "
        f"max {rep['ack_max_s']:.2f} s; restore ms max {rep['restore_ms_max']:.0f}; "
        f"taken over ms {rep['taken_over_ms']:.0f}; {rep['lists']:.0f} LIST, "
        f"{rep['gets']:.0f} GET requests by the writer; writer open {rep['open_writer_ms']:.0f} ms"
    )


ROWS = [
    ("objects", "partition objects in the bucket", "{:,.0f}"),
    ("ack_p50_s", "kill -> first ack on a taken partition, p50 s", "{:.2f}"),
    ("ack_max_s", "kill -> first ack on a taken partition, max s", "{:.2f}"),
    ("led_s", "kill -> writer's Metadata names the new leader, s", "{:.2f}"),
    ("taken_over_ms", "fence + claim + restore (cluster.partitions_taken_over ms)", "{:,.0f}"),
    ("restore_ms_max", "restore, slowest partition (storage.object.acquired ms)", "{:,.0f}"),
    ("lists", "LIST requests by the writer, kill -> last first ack", "{:,.0f}"),
    ("list_keys", "keys listed", "{:,.0f}"),
    ("gets", "GET requests (whole and ranged)", "{:,.0f}"),
    ("get_bytes", "bytes read", "{:,.0f}"),
    ("open_writer_ms", "restart: writer's store open (storage.object.opened ms)", "{:,.0f}"),
    ("open_member_ms_max", "restart: a member's store open, max ms", "{:,.0f}"),
    ("served_s", "restart -> every partition acknowledges, s", "{:.1f}"),
]
"""(metric, label, format) of each row of the takeover table."""


def render(result: SuiteResult) -> list[str]:
    """The takeover section's Markdown (nothing when the workload did not run)."""
    ws = [w for w in result.workloads if w.key == TAKEOVER_KEY]
    if not ws:
        return []
    head = "| measure | " + " | ".join(result.targets.get(w.target, {}).get("label", w.target)
                                        for w in ws) + " | last / first |"  # fmt: skip
    rows = [head, "| --- |" + " --- |" * (len(ws) + 1)]
    for metric, label, fmt in ROWS:
        values = [w.reps[0].get(metric) if w.reps else None for w in ws]
        cells = [fmt.format(v) if v is not None else "**failed**" for v in values]
        first, last = values[0], values[-1]
        ratio = f"{last / first:.2f}x" if first and last is not None and first > 0 else "-"
        rows.append(f"| {label} | " + " | ".join(cells) + f" | {ratio} |")
    return [
        "One run, the sizes one after the other (module docstring of "
        "`benchmarks/cluster_takeover.py`): three brokers sharing partitions on SeaweedFS "
        "and etcd, a topic of six partitions whose history is the bucket's partition "
        "objects (one batch each), a member leading two of them killed under a probe "
        "producer. Single measurements on a shared machine: read the ratios. The "
        "requests by key kind and call site are in the JSON's figures "
        "(`takeover-<n>.takeover.*`, `takeover-<n>.restart.*`).",
        "",
        *rows,
        "",
        *(f"- {w.target}: failed: `{w.failures[0][:300]}`" for w in ws if w.failures),
        "",
    ]
