"""One fuzz run from start to verdict: broker, seeds, sentinel, frames, attacks, oracles.

Phases (each printed as it starts):

1. start a private ``floe up``; read ApiVersions; create the fuzz topics;
2. start the sentinel process; build kio seeds for every advertised (api key, version)
   and capture real clients' requests (a throwaway broker behind a recording proxy);
3. baseline: RSS and descriptors once the sentinel is producing and committing;
4. send the mutated frames; a connection flood and slow clients run beside them at
   a third of the way; a monitor samples the broker every 50 ms (alive, RSS budget);
5. close everything; descriptors must come back to the baseline;
6. stop the sentinel; its produce and end-to-end p99 must stay under the limit in every
   window; kill -9 the broker, start it again: every acknowledged sentinel record and
   the group's committed offsets must be there.

A failure anywhere is kept as a :class:`~fuzz.lanes.Finding` (with the frames to
replay it); the run goes on where it can and exits 1 at the end, 0 when clean.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fuzz import attacks, batches, capture, oracles, report, sentinel, target, topics
from fuzz.lanes import Engine, Finding, FrameRecord
from fuzz.mutate import Mutator
from fuzz.seeds import Topic, kio_seeds

BIG_TOPIC_MIB = 8
BROKER_SETTINGS = {
    # Short enough that slow clients are cut off inside a run, and a file cache small
    # enough that "descriptors back to baseline" is a meaningful bound.
    "socket.request.read.timeout.ms": "5000",
    "socket.response.write.timeout.ms": "5000",
    "log.max.open.files": "256",
}


@dataclass
class RunConfig:
    """Everything a run needs; the command line fills it (``fuzz.__main__``)."""

    frames: int
    seed: int
    mode: str = "short"
    rss_budget_mb: int = 1024
    fd_slack: int = 256 + 64
    lanes: int = 6
    window: int = 16
    capture: bool = True
    flood: int = 500
    trickle: int = 20
    never_read: int = 8
    bomb_mib: int = 2048
    p99_ms: float = 1000.0
    latency_window_s: float = 10.0
    stall_s: float = 10.0
    json_path: Path | None = None
    repro_path: Path | None = None
    workdir: Path | None = None
    keep: bool = False
    broker_settings: dict[str, str] = field(default_factory=dict)


def say(message: str) -> None:
    print(f"[fuzz {time.strftime('%H:%M:%S')}] {message}", flush=True)


def raise_nofile() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = 1 << 20
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class Run:
    """State of one run; ``execute`` returns the exit code."""

    def __init__(self, cfg: RunConfig) -> None:
        self.cfg = cfg
        self.failures: list[str] = []
        self.findings: list[Finding] = []
        self.summary: dict[str, Any] = {"mode": cfg.mode, "seed": cfg.seed}
        self.peak_rss = 0
        self.peak_fds = 0
        self.rss_killed = False
        self.fuzz_started = time.time()
        self.frames_started = time.monotonic()
        self.frames_elapsed = 0.0

    # --- helpers --------------------------------------------------------------------

    def fail(self, kind: str, detail: str, frames: list[FrameRecord] | None = None) -> None:
        self.failures.append(f"{kind}: {detail}")
        self.findings.append(Finding(kind, detail, frames or []))
        say(f"FAIL {kind}: {detail}")

    def execute(self) -> int:
        cfg = self.cfg
        raise_nofile()
        workdir = cfg.workdir or Path(tempfile.mkdtemp(prefix="floe-fuzz-"))
        workdir.mkdir(parents=True, exist_ok=True)
        broker = target.FloeProcess(workdir / "broker", {**BROKER_SETTINGS, **cfg.broker_settings})
        sentinel_proc: sentinel.SentinelProcess | None = None
        t0 = time.monotonic()
        try:
            sentinel_proc = self._phases(broker, workdir)
        except Exception as exc:  # the report must come out whatever broke
            self.fail("harness", f"{type(exc).__name__}: {exc}")
        finally:
            if sentinel_proc is not None:
                sentinel_proc.kill()
            broker.close()
        self.summary["seconds"] = round(time.monotonic() - t0, 1)
        self.summary["failures"] = self.failures
        if cfg.json_path is not None:
            report.write_json(cfg.json_path, self.summary, self.findings)
        wrote = cfg.repro_path is not None and report.write_repro(cfg.repro_path, self.findings)
        keep = cfg.keep or bool(self.failures)
        if keep:
            say(f"work dir kept: {workdir} (broker log: {broker.log_path})")
        elif cfg.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
        report.print_summary(
            self.summary, self.findings, len(self.failures), cfg.repro_path if wrote else None
        )
        return 1 if self.failures else 0

    # --- phases ---------------------------------------------------------------------

    def _phases(self, broker: target.FloeProcess, workdir: Path) -> sentinel.SentinelProcess | None:
        cfg = self.cfg
        say(f"starting floe up ({cfg.mode} mode, {cfg.frames:,} frames, seed {cfg.seed})")
        self.summary["broker_start_s"] = round(broker.start(), 2)
        host, port = broker.host, broker.port
        advertised = topics.advertised(host, port)
        topics.create_fuzz_topics(host, port)
        topics.fill_big_topic(host, port, BIG_TOPIC_MIB)
        sentinel_proc = sentinel.SentinelProcess(broker.bootstrap, workdir / "sentinel")
        names = [*topics.FUZZ_TOPICS, *(t.name for t in topics.targets({}) if t.kind == "internal")]
        ids = topics.topic_ids(host, port, names)
        targets = topics.targets(ids)
        seeds = kio_seeds(advertised, targets)
        seed_report: dict[str, Any] = {
            "advertised_versions": sum(h - low + 1 for low, h in advertised.values()),
            "kio": len(seeds),
            "covered_versions": len({(s.api_key, s.version) for s in seeds}),
        }
        if cfg.capture:
            say("capturing real clients (confluent-kafka, kafka-python, aiokafka)")
            partitions = {n: p for n, (p, _) in topics.FUZZ_TOPICS.items()}
            captured, cap_report = capture.capture(
                workdir / "capture", partitions, ids, topics.create_fuzz_topics
            )
            seeds += captured
            seed_report["captured"] = len(captured)
            seed_report["capture"] = cap_report
        self.summary["seeds"] = seed_report
        say(
            f"seeds: {seed_report['kio']} from kio for {seed_report['covered_versions']}/"
            f"{seed_report['advertised_versions']} advertised versions, "
            f"{seed_report.get('captured', 0)} captured"
        )
        if not sentinel_proc.wait_ready(60):
            self.fail("sentinel", f"never became ready:\n{sentinel_proc.tail()}")
            return sentinel_proc
        time.sleep(1.0)
        baseline = target.sample(broker.pid)
        self.summary["baseline"] = {
            "rss_mb": round(baseline.rss_bytes / 2**20, 1),
            "fds": baseline.fds,
            "sockets": baseline.sockets,
        }
        say(
            f"baseline: RSS {baseline.rss_bytes / 2**20:.0f} MiB, {baseline.fds} fds "
            f"({baseline.sockets} sockets)"
        )
        bombs = batches.Bombs(cfg.bomb_mib) if cfg.bomb_mib else None
        mutator = Mutator(seeds, advertised, targets, bombs, cfg.seed)
        engine = Engine(
            host, port, mutator, cfg.frames, lanes=cfg.lanes, window=cfg.window, stall_s=cfg.stall_s
        )
        self.frames_started = time.monotonic()
        self.fuzz_started = time.time()
        import uvloop

        uvloop.run(self._fuzz(broker, engine, targets))
        self._collect(engine, self.frames_elapsed or time.monotonic() - self.frames_started)
        alive = broker.alive()
        if not alive and not any(
            f.kind in ("broker-died", "rss-over-budget") for f in self.findings
        ):
            self.fail(
                "broker-died", f"floe up exited with {broker.exit_code()}:\n{broker.tail(15)}"
            )
        if alive:
            self._check_fds(broker, baseline, sentinel_proc.proc.pid)
        say("stopping the sentinel")
        sentinel_proc.stop(timeout=90 if alive else 5)
        if alive:
            self._check_latency(sentinel_proc)
        # Even after a crash: whatever was acknowledged must survive a restart.
        self._restart_and_verify(broker, sentinel_proc)
        self._broker_exceptions(broker, engine)
        return sentinel_proc

    async def _fuzz(self, broker: target.FloeProcess, engine: Engine, targets: list[Any]) -> None:
        cfg = self.cfg
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        frames_done = asyncio.Event()
        tasks = [
            loop.create_task(self._monitor(broker, engine, stop)),
            loop.create_task(self._progress(engine, stop)),
            loop.create_task(self._maintain(broker, stop)),
            loop.create_task(self._attacks(broker, engine, targets, frames_done)),
        ]
        say(f"fuzzing: {cfg.lanes} lanes x {cfg.window} in flight")
        try:
            await engine.run()
            self.frames_elapsed = time.monotonic() - self.frames_started
            frames_done.set()
            await asyncio.wait_for(tasks[3], 120)  # the attacks, watched by the monitor
        finally:
            stop.set()
            frames_done.set()
            for task in tasks:
                try:
                    await asyncio.wait_for(task, 60)
                except Exception as exc:
                    self.fail("harness", f"{type(exc).__name__}: {exc}")

    async def _monitor(
        self, broker: target.FloeProcess, engine: Engine, stop: asyncio.Event
    ) -> None:
        budget = self.cfg.rss_budget_mb << 20
        tick = 0
        while not stop.is_set():
            if not broker.alive():
                frames = [FrameRecord.of(engine.mutator, i, f) for i, f in engine.in_flight()]
                if not frames:
                    frames = [FrameRecord.of(engine.mutator, i, f) for i, f in engine.recent]
                self.fail(
                    "broker-died",
                    f"floe up exited with {broker.exit_code()}; {len(frames)} frames in "
                    f"flight:\n{broker.tail(15)}",
                    frames,
                )
                engine.stop()
                return
            try:
                s = target.sample(broker.pid) if tick % 20 == 0 else None
                rss = s.rss_bytes if s else _rss(broker.pid)
            except OSError:
                await asyncio.sleep(0.05)
                continue
            if s is not None:
                self.peak_fds = max(self.peak_fds, s.fds)
            self.peak_rss = max(self.peak_rss, rss)
            if rss > budget:
                frames = [FrameRecord.of(engine.mutator, i, f) for i, f in engine.in_flight()]
                self.rss_killed = True
                broker.kill()
                self.fail(
                    "rss-over-budget",
                    f"RSS {rss / 2**20:.0f} MiB > budget {self.cfg.rss_budget_mb} MiB "
                    f"(broker killed); {len(frames)} frames in flight",
                    frames,
                )
                engine.stop()
                return
            tick += 1
            await asyncio.sleep(0.05)

    async def _progress(self, engine: Engine, stop: asyncio.Event) -> None:
        t0 = time.monotonic()
        last = 0
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 5)
            s = engine.stats
            dt = time.monotonic() - t0
            say(
                f"{s.frames:,}/{engine.total:,} frames ({(s.frames - last) / 5:.0f}/s now, "
                f"{s.frames / dt:.0f}/s avg), {s.batches:,} batches, {s.closes:,} closes, "
                f"peak RSS {self.peak_rss / 2**20:.0f} MiB, findings {dict(engine.finding_counts)}"
            )
            last = s.frames

    async def _maintain(self, broker: target.FloeProcess, stop: asyncio.Event) -> None:
        """Recreate the fuzz topics every few seconds (frames delete them)."""
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 3)
            if broker.alive():
                try:
                    await loop.run_in_executor(
                        None, topics.create_fuzz_topics, broker.host, broker.port
                    )
                except Exception:
                    continue  # a busy or dying broker: the monitor reports what matters

    async def _attacks(
        self, broker: target.FloeProcess, engine: Engine, targets: list[Any], stop: asyncio.Event
    ) -> None:
        """At a third of the frames: flood, trickle and never-read clients, together."""
        cfg = self.cfg
        while not stop.is_set() and engine.stats.frames < engine.total // 3:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.5)
        if stop.is_set():
            return
        say(
            f"attacks: flood of {cfg.flood}, {cfg.trickle} trickling, "
            f"{cfg.never_read} never-reading clients"
        )
        big = Topic(topics.BIG_TOPIC, "plain")
        host, port = broker.host, broker.port
        results = await asyncio.gather(
            attacks.flood(host, port, cfg.flood, 3.0),
            attacks.trickle(host, port, cfg.trickle, 8.0),
            attacks.never_read(host, port, big, n=cfg.never_read, requests=200, duration_s=8.0),
            return_exceptions=True,
        )
        names = ("flood", "trickle", "never_read")
        self.summary["attacks"] = {
            n: (r if isinstance(r, dict) else f"{type(r).__name__}: {r}")
            for n, r in zip(names, results, strict=True)
        }
        say(f"attacks done: {self.summary['attacks']}")

    # --- oracles --------------------------------------------------------------------

    def _collect(self, engine: Engine, elapsed: float) -> None:
        s = engine.stats
        for finding in engine.findings:
            self.findings.append(finding)
        for kind, count in engine.finding_counts.items():
            self.failures.append(f"{kind}: {count} frame(s)")
        self.summary.update(
            frames=s.frames,
            fuzz_seconds=round(elapsed, 1),
            frames_per_s=round(s.frames / elapsed) if elapsed else 0,
            batches=s.batches,
            bombs=s.bombs,
            connections=s.connections,
            closes=s.closes,
            parked=s.parked,
            crashes=sum(1 for f in self.findings if f.kind == "broker-died"),
            peak_rss_mb=round(self.peak_rss / 2**20, 1),
            rss_budget_mb=self.cfg.rss_budget_mb,
            findings=dict(engine.finding_counts),
            sent_by_family=dict(s.sent_by_family),
            closed_by_family=dict(s.closed_by_family),
        )
        say(f"sent {s.frames:,} frames in {elapsed:.1f} s ({s.frames / elapsed:.0f}/s)")

    def _check_fds(
        self, broker: target.FloeProcess, baseline: target.ProcSample, sentinel_pid: int
    ) -> None:
        end = oracles.settle_fds(lambda: target.sample(broker.pid), baseline, self.cfg.fd_slack)
        summary, problems = oracles.fds(baseline, end, self.peak_fds, self.cfg.fd_slack)
        self.summary["fds"] = summary
        say(
            f"fds: baseline {baseline.fds}, peak {self.peak_fds}, end {end.fds} "
            f"(sockets {baseline.sockets} -> {end.sockets})"
        )
        if problems:  # which sockets: a client's (the sentinel's own?) or a dead peer's
            sentinel_ports = {local for _, local, _ in target.tcp_sockets(sentinel_pid)}
            held = [
                f"{state} {local}<-{remote}{' (sentinel)' if remote in sentinel_ports else ''}"
                for state, local, remote in target.tcp_sockets(broker.pid)
                if state != "LISTEN"
            ]
            problems = [f"{p}; broker sockets now: {', '.join(held)}" for p in problems]
        for problem in problems:
            self.fail("fd-leak", problem)

    def _check_latency(self, sp: sentinel.SentinelProcess) -> None:
        cfg = self.cfg
        summary, problems = oracles.latency(
            sp.lines, self.fuzz_started, cfg.latency_window_s, cfg.p99_ms
        )
        self.summary["sentinel"] = summary
        say(f"sentinel: {summary}")
        for problem in problems:
            self.fail("sentinel", problem if "finish" not in problem else f"{problem}: {sp.tail()}")

    def _restart_and_verify(self, broker: target.FloeProcess, sp: sentinel.SentinelProcess) -> None:
        say("kill -9 the broker and start it again")
        broker.kill()
        try:
            took = broker.start(timeout=90)
        except RuntimeError as exc:
            self.fail("restart", f"the broker did not come back after kill -9: {exc}")
            return
        self.summary["restart_s"] = round(took, 2)
        problems = sentinel.verify(broker.bootstrap, sentinel.TOPIC, sentinel.GROUP, sp.out)
        self.summary["restart_problems"] = problems
        for problem in problems:
            self.fail("data-after-restart", problem)
        if not problems:
            say(f"restart in {took:.1f} s: every acknowledged record and committed offset intact")

    def _broker_exceptions(self, broker: target.FloeProcess, engine: Engine | None) -> None:
        """Unexpected exceptions in the broker's log, each a failure with the frames that
        caused it (found through the peer port the broker logs)."""
        try:
            text = broker.log_path.read_text(errors="replace")
        except OSError:
            return
        found = oracles.broker_exceptions(text)
        self.summary["broker_tracebacks"] = {
            "count": sum(e.count for e in found),
            "top": [(e.error, e.count) for e in found[:10]],
        }
        for e in found[:10]:
            frames = []
            if engine is not None:
                for port, when in e.seen[:50]:
                    index = _nearest(engine.closed_by_port.get(port, []), when)
                    if index is not None:
                        frames.append((index, engine.mutator.make(index, 1)))
                    if len(frames) >= 3:
                        break
            requests = ", ".join(f"{n} x {r}" for r, n in e.requests.most_common(4))
            self.fail(
                "broker-exception",
                f"{e.count} x {e.error} (requests: {requests})",
                [FrameRecord.of(engine.mutator, i, f) for i, f in frames] if engine else [],
            )


def _nearest(closes: list[tuple[float, int]], when: float, within: float = 2.0) -> int | None:
    """The frame index closed nearest to ``when`` on one port, if within ``within`` s."""
    best = min(closes, key=lambda c: abs(c[0] - when), default=None)
    if best is None or abs(best[0] - when) > within:
        return None
    return best[1]


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
