"""The ``security`` suite: Kafka throughput with TLS on vs off, on one broker.

Layout of one run:

1. make a throwaway PKI in the run's temp dir (:func:`make_pki`: a self-signed CA and a
   server certificate for 127.0.0.1 and localhost);
2. start one ``floe up`` (defaults otherwise: ``log.flush.policy=acks``) with a listener
   per protocol: PLAINTEXT, SSL (no client certificates) and SASL_SSL (SCRAM-SHA-512,
   the bootstrap user). One broker for all three, so the PLAINTEXT baseline runs on the
   same process, disk and page cache, in the same run, as the TLS figures. Ask the SSL
   listener which TLS version and cipher it picks (Python's ``ssl``: the same OpenSSL
   as the broker);
3. produce: ``reps`` repetitions of the broker suite's base case (1 KiB values, no
   compression, acks=all, ``loadgen.PRODUCER_CONFIG``) through every listener, each
   into a fresh 1-partition topic (created and deleted over PLAINTEXT; its name as long
   as every other listener's) deleted right after it. Repetition r runs the listeners in
   an order rotated by r (``broker.Runner.order``), so none always goes first into a
   warm or a cold broker;
4. consume: one topic filled over PLAINTEXT (unmeasured, ``reps`` x the produce size),
   then read whole from offset 0 through every listener, ``reps`` times, rotated the
   same way: the same bytes from the same files for every listener;
5. always stop the broker.

Why a fresh topic per produce repetition: on the reference VM, once the broker had
taken about 2 GB of writes in a run (topics kept), later produce repetitions ran up to
about 40% slower with up to 2.5x the broker CPU per GB, all of it system time (user time
stayed flat), whichever listener they used: the later repetitions (and so the medians)
paid that and the first did not. Deleting each topic frees its pages, and repetitions of
one listener then measured the same within a few percent.

The broker suite's runner (``benchmarks.broker.Runner``) does the measuring: one
spawned load-generator process, the broker's own CPU seconds and RSS from ``/proc``
around each client call. Its targets here are the listeners (:class:`Listener`), views
of the one broker process.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import secrets
import socket
import ssl
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks import broker, loadgen
from benchmarks.harness import (
    Progress,
    SuiteResult,
    floe_version_label,
    free_port,
    loadavg,
    machine_info,
    worker_pool,
)
from benchmarks.targets import FloeTarget, Target

NAME = "security"
TITLE = "Security: TLS on vs off"

PLAINTEXT = "plaintext"
SSL = "ssl"
SASL_SSL = "sasl_ssl"
ALL_LISTENERS = (PLAINTEXT, SSL, SASL_SSL)
BASELINE = PLAINTEXT
PROTOCOLS = {PLAINTEXT: "PLAINTEXT", SSL: "SSL", SASL_SSL: "SASL_SSL"}
SASL_MECHANISM = "SCRAM-SHA-512"
SASL_USER = "bench"
CASE = broker.ProduceCase(1024, "none", "all", 1, consume=True)
"""The broker suite's base case: 1 KiB values, no compression, acks=all, 1 partition."""

_SETTLE_S = 2.0
_PROBE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Settings:
    """What to run; stored in the JSON as a dict (no secrets: the SASL password is
    made per run and never stored)."""

    records: int
    reps: int
    seed: int
    listeners: tuple[str, ...]
    quick: bool = False

    def runner_settings(self) -> broker.Settings:
        """The broker suite's settings for the same sizes (its runner reads ``reps``)."""
        return broker.Settings.throughput(
            self.records, self.reps, self.seed, self.listeners, self.quick
        )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The suite's own options (the common ones live in ``benchmarks.__main__``)."""
    g = parser.add_argument_group("security suite")
    g.add_argument("--security-records", type=int, help="1 KiB records per produce rep")
    g.add_argument(
        "--security-listeners",
        default=",".join(ALL_LISTENERS),
        help=f"comma-separated subset of {','.join(ALL_LISTENERS)}; {BASELINE} is always "
        "included (default: all)",
    )


def settings_from(args: argparse.Namespace) -> Settings:
    """Build the settings, applying the ``--quick`` preset to what was not given.

    Raises:
        ValueError: a size is not positive or a listener is unknown.
    """
    quick = bool(args.quick)
    chosen = {t.strip() for t in args.security_listeners.split(",") if t.strip()}
    unknown = chosen - set(ALL_LISTENERS)
    if unknown:
        raise ValueError(f"unknown listeners {sorted(unknown)}; choose from {ALL_LISTENERS}")
    s = Settings(
        records=args.security_records or (20_000 if quick else 500_000),
        reps=args.reps or (1 if quick else 3),
        seed=args.seed,
        listeners=tuple(n for n in ALL_LISTENERS if n in chosen | {BASELINE}),
        quick=quick,
    )
    if min(s.records, s.reps) < 1:
        raise ValueError("records and reps must be positive")
    return s


ORGANIZATION = "Floe Benchmarks"


@dataclass(frozen=True)
class Pki:
    """The files of a throwaway PKI (see :func:`make_pki`)."""

    ca_cert: Path
    server_cert: Path
    server_key: Path


def make_pki(directory: Path) -> Pki:
    """Write a self-signed CA and a server certificate for 127.0.0.1 and localhost
    (:mod:`floe.testing.pki`, as the TLS tests make theirs). The key file is 0600."""
    from floe.testing import pki

    directory.mkdir(parents=True, exist_ok=True)
    ca, ca_key = pki.ca("Floe Benchmark CA", ORGANIZATION)
    server, key = pki.server(ca, ca_key, ORGANIZATION)
    return Pki(
        pki.write_cert(directory / "ca.pem", ca),
        pki.write_cert(directory / "server.pem", server),
        pki.write_key(directory / "server.key", key),
    )


class SecureFloe(FloeTarget):
    """``floe up`` with one listener per protocol in ``listeners``; PLAINTEXT on
    ``port`` (so ``bootstrap`` is the PLAINTEXT address), the others on free ports."""

    def __init__(self, workdir: Path, pki: Pki, password: str, listeners: tuple[str, ...]) -> None:
        super().__init__("floe", workdir, ())
        self.ports = {n: self.port if n == PLAINTEXT else free_port() for n in listeners}
        spec = ",".join(f"{PROTOCOLS[n]}://127.0.0.1:{p}" for n, p in self.ports.items())
        self.sets = (
            f"listeners={spec}",
            f"ssl.certificate.location={pki.server_cert}",
            f"ssl.key.location={pki.server_key}",
            "ssl.client.auth=none",
            f"security.bootstrap.user={SASL_USER}",
            f"security.bootstrap.password={password}",
        )


class Listener(Target):
    """One listener of a running :class:`SecureFloe`, as a target of ``broker.Runner``:
    its own bootstrap address; the process, ``/proc`` samples and log of the broker.

    It owns nothing: the suite starts and stops the broker, never a listener.
    """

    def __init__(self, floe: SecureFloe, name: str) -> None:
        super().__init__(floe.workdir)  # the broker's stdout/stderr logs, for tail()
        self.name = name
        self.port = floe.ports[name]
        self._floe = floe

    @property
    def pid(self) -> int:
        return self._floe.pid

    def alive(self) -> bool:
        return self._floe.alive()

    def start(self) -> None:
        """Never: the suite starts the broker, with every listener.

        Raises:
            RuntimeError: always.
        """
        raise RuntimeError("a listener is started with its broker")


def client_settings(name: str, pki: Pki, password: str) -> dict[str, str]:
    """librdkafka settings for listener ``name`` (none for PLAINTEXT)."""
    if name == PLAINTEXT:
        return {}
    tls = {"security.protocol": PROTOCOLS[name], "ssl.ca.location": str(pki.ca_cert)}
    if name == SSL:
        return tls
    return tls | {
        "sasl.mechanism": SASL_MECHANISM,
        "sasl.username": SASL_USER,
        "sasl.password": password,
    }


def tls_probe(port: int, ca: Path) -> str:
    """The TLS version and cipher the listener on ``port`` picks for a default client.

    Raises:
        OSError: no TLS connection could be made (``ssl.SSLError`` included).
    """
    ctx = ssl.create_default_context(cafile=str(ca))
    with (
        socket.create_connection(("127.0.0.1", port), timeout=_PROBE_TIMEOUT_S) as raw,
        ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        cipher = tls.cipher()
        return f"{tls.version()} {cipher[0] if cipher else '?'}"


def _metrics(out: loadgen.TransferResult, cost: broker.BrokerCost) -> dict[str, float]:
    """The broker suite's metrics, plus the client's CPU per GB (TLS costs both ends)."""
    metrics = broker._transfer_metrics(out, cost)
    gb = out.value_bytes / 1e9
    metrics["client_cpu_s_per_gb"] = out.client_cpu_s / gb if gb else 0.0
    return metrics


class _Runner(broker.Runner):
    """The broker suite's runner over the listeners of one broker; owned by the suite's
    thread, like its base class."""

    def __init__(
        self,
        listeners: dict[str, Target],
        pool: concurrent.futures.Executor,
        prog: Progress,
        result: SuiteResult,
        s: Settings,
        *,
        clients: dict[str, dict[str, str]],
    ) -> None:
        super().__init__(listeners, pool, prog, result, s.runner_settings())
        self.clients = clients

    def _admin(self, fn: Callable[..., Any], *args: Any) -> str | None:
        """An admin call (create or delete topics) over PLAINTEXT; its error, if any."""
        return self.admin(BASELINE, fn, self.targets[BASELINE].bootstrap, *args)

    def _spec(self, name: str, topic: str, records: int, seed: int) -> loadgen.ProduceSpec:
        return loadgen.ProduceSpec(
            bootstrap=self.targets[name].bootstrap, topic=topic, partitions=CASE.partitions,
            records=records, compression=CASE.compression, seed=seed,
            timeout_s=broker._timeout_for(records * CASE.value_bytes),
            value_bytes=CASE.value_bytes, acks=CASE.acks, client=self.clients[name],
        )  # fmt: skip

    def produce(self, records: int) -> None:
        """Produce ``records`` per repetition through every listener, each repetition
        into a fresh topic deleted right after it, so every repetition meets a broker
        holding the same data (see the module docstring).

        The topic names of one repetition all have the same length: TLS produce
        throughput moves with the length of the topic name (``security_report.TOPIC_NAME``),
        PLAINTEXT's does not, so names of different lengths per listener would skew
        the ratio.
        """
        index = {name: i for i, name in enumerate(self.targets)}
        workloads = self.workloads(
            CASE.key, "produce", f"Produce {CASE.title}", records=records,
            value_bytes=CASE.value_bytes, compression=CASE.compression, acks=CASE.acks,
            partitions=CASE.partitions, topic_name_length=len(_produce_topic(0, 0)),
        )  # fmt: skip

        def once(name: str, rep: int) -> dict[str, float]:
            topic = _produce_topic(rep, index[name])
            err = self._admin(loadgen.create_topics, [loadgen.TopicSpec(topic, CASE.partitions)])
            if err is not None:
                raise broker._RunError(f"create topic failed: {err}")
            try:
                sp = self._spec(name, topic, records, self.s.seed + rep)
                out, cost = self.call(name, loadgen.produce, sp, timeout_s=sp.timeout_s)
            finally:
                err = self._admin(loadgen.delete_topics, [topic])
                if err is not None:
                    self.note(f"deleting {topic} failed ({err}); its data stays live.")
            return _metrics(out, cost)

        self.repeat(workloads, {}, once)

    def consume(self, records: int) -> None:
        """Fill one topic with ``records`` over PLAINTEXT (unmeasured), then read all of
        it from offset 0 through every listener, ``reps`` times: the same bytes from
        the same files for every listener."""
        topic = "bench-security-consume"
        self.prog.step(f"fill {topic} with {records:,} records over PLAINTEXT")
        workloads = self.workloads(
            CASE.key.replace("produce-", "consume-", 1), "consume", f"Consume {CASE.title}",
            records=records, value_bytes=CASE.value_bytes, partitions=CASE.partitions,
        )  # fmt: skip
        acked = 0
        err = self._admin(loadgen.create_topics, [loadgen.TopicSpec(topic, CASE.partitions)])
        if err is None:
            try:
                sp = self._spec(BASELINE, topic, records, self.s.seed)
                out, _ = self.call(BASELINE, loadgen.produce, sp, timeout_s=sp.timeout_s)
                acked = out.records
            except broker._RunError as exc:
                err = f"filling the topic failed: {exc}"
        blocked = {} if acked else dict.fromkeys(self.targets, err or "nothing acknowledged")
        if acked and acked != records:
            self.note(f"{acked:,} of {records:,} records acknowledged in `{topic}`.")
        for w in workloads.values():
            w.params["records"] = acked

        def once(name: str, _rep: int) -> dict[str, float]:
            sp = loadgen.ConsumeSpec(
                self.targets[name].bootstrap, topic, CASE.partitions,
                broker._timeout_for(acked * CASE.value_bytes), expected=acked,
                client=self.clients[name],
            )  # fmt: skip
            out, cost = self.call(name, loadgen.consume, sp, timeout_s=sp.timeout_s)
            return _metrics(out, cost)

        self.repeat(workloads, blocked, once)


def _produce_topic(rep: int, listener: int) -> str:
    """The produce topic of repetition ``rep`` for the listener at position ``listener``:
    27 characters for every listener (for fewer than 100 repetitions)."""
    return f"bench-security-produce-{rep:02d}-{listener}"


def _ratios(result: SuiteResult) -> dict[str, dict[str, float]]:
    """Each TLS listener's medians over PLAINTEXT's, per workload and metric."""
    out: dict[str, dict[str, float]] = {}
    for name in result.targets:
        if name == BASELINE:
            continue
        ratios: dict[str, float] = {}
        for w in result.workloads:
            base = result.find(w.key, BASELINE)
            if w.target != name or base is None:
                continue
            for metric in ("mb_s", "records_s", "broker_cpu_s_per_gb", "client_cpu_s_per_gb"):
                v, b = w.median(metric), base.median(metric)
                if v is not None and b:
                    ratios[f"{w.group}_{metric}"] = v / b
        out[f"{name}_over_{BASELINE}"] = ratios
    return out


def run(args: argparse.Namespace, command: str) -> SuiteResult:
    """Run produce and consume through every listener of one broker.

    Raises:
        ValueError: bad settings.
        RuntimeError: the broker failed to start.
        TimeoutError: the load generator hung.
    """
    s = settings_from(args)
    settle = _SETTLE_S / 2 if s.quick else _SETTLE_S
    t0 = time.monotonic()
    password = secrets.token_urlsafe(16)
    with tempfile.TemporaryDirectory(prefix="floe-bench-") as tmp, Progress() as prog:
        root = Path(tmp)
        result = SuiteResult(
            suite=NAME,
            machine=machine_info(root) | {"openssl": ssl.OPENSSL_VERSION},
            settings=asdict(s),
            command=command,
            started=time.strftime("%Y-%m-%d %H:%M %Z"),
        )
        pki = make_pki(root / "pki")
        floe = SecureFloe(root / "floe", pki, password, s.listeners)
        version = floe_version_label()
        try:
            floe.start()
            prog.log(f"floe up (pid {floe.pid}) with {floe.sets[0]}")
            time.sleep(settle)
            idle = floe.sample()
            result.memory["floe"] = {
                "idle_rss_start_mb": idle.rss_bytes / broker.MB,
                "startup_cpu_s": idle.cpu_seconds,
            }
            for name in s.listeners:
                result.targets[name] = {
                    "label": PROTOCOLS[name],
                    "description": _describe(name),
                    "version": version,
                }
            if SSL in floe.ports:
                try:
                    result.targets[SSL]["tls"] = tls_probe(floe.ports[SSL], pki.ca_cert)
                    prog.log(f"SSL listener negotiates {result.targets[SSL]['tls']}")
                except OSError as exc:
                    result.notes.append(f"The TLS version and cipher probe failed: {exc}.")
            listeners: dict[str, Target] = {n: Listener(floe, n) for n in s.listeners}
            clients = {n: client_settings(n, pki, password) for n in s.listeners}
            prog.total(2 * s.reps * len(listeners) + 1)
            with worker_pool() as pool:
                runner = _Runner(listeners, pool, prog, result, s, clients=clients)
                runner.produce(s.records)
                runner.consume(s.records * s.reps)
            time.sleep(settle)
            if floe.alive():
                after = floe.sample()
                result.memory["floe"]["idle_rss_after_mb"] = after.rss_bytes / broker.MB
                result.memory["floe"]["peak_rss_mb"] = after.peak_rss_bytes / broker.MB
                result.memory["floe"]["total_cpu_s"] = after.cpu_seconds
            result.machine["loadavg_after_workloads"] = loadavg()
        finally:
            code = floe.stop()
            prog.log(f"floe stopped (exit code {code})")
    result.figures = _ratios(result)
    result.duration_s = time.monotonic() - t0
    return result


def _describe(name: str) -> str:
    """How a listener is set up, for the report."""
    if name == PLAINTEXT:
        return "no TLS, no authentication"
    if name == SSL:
        return "TLS, server certificate only (`ssl.client.auth=none`), no authentication"
    return f"TLS + SASL {SASL_MECHANISM} as the bootstrap user (one exchange per connection)"


def render(result: SuiteResult, charts: list[tuple[str, Path]], page_dir: Path) -> list[str]:
    """The suite's Markdown section (see ``benchmarks.security_report``)."""
    from benchmarks import security_report

    return security_report.render(result, charts, page_dir)


def charts(result: SuiteResult, img_dir: Path) -> list[tuple[str, Path]]:
    """Draw the suite's PNG chart into ``img_dir``; return (title, path) pairs."""
    from benchmarks import security_report

    return security_report.charts(result, img_dir)
