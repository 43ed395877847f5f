"""The chaos suite's cluster: three ``floe up`` brokers sharing partitions on SeaweedFS,
with etcd or PostgreSQL as the metadata store, each broker reaching the store and the
bucket through proxies of its own (:mod:`helpers.chaos_proxy`), so a test can cut one
link of one broker.

:func:`chaos_cluster` starts everything (the servers, the proxies, the brokers, a
writer and two members once all three are registered) and always stops everything:
brokers SIGKILLed (process group), proxies closed, servers stopped, on 127.0.0.1 only.
A broker can be restarted with a wall-clock offset (libfaketime), for the clock
nemesis.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka.admin import AdminClient

from helpers.broker import Broker
from helpers.chaos_proxy import Proxy, ProxyHub
from helpers.cluster import cluster_settings, crash, wait_for, wait_writer, writing
from helpers.cluster_etcd import EtcdServer, etcd_server
from helpers.cluster_postgres import dsn
from helpers.postgres import PostgresServer, find_bin_dir, postgres_server
from helpers.seaweed import SeaweedServer, seaweed_server

BUCKET = "floe-chaos"
BROKERS = 3
SESSION_S = 3.0
"""cluster.session.timeout.ms of the brokers (helpers.cluster.SESSION_MS), in seconds."""
FAKETIME_LIB = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1")


def faketime_available() -> bool:
    """libfaketime is installed (Debian ``faketime``): the clock nemesis can run."""
    return FAKETIME_LIB.exists()


class ChaosBroker(Broker):
    """A :class:`Broker` that can run with its clock ``clock_offset_s`` off
    (libfaketime)."""

    def __init__(self, data_dir: Path, settings: dict[str, str], node: int) -> None:
        super().__init__(data_dir, settings)
        self.node = node
        self.clock_offset_s = 0.0
        self.meta: Proxy | None = None
        self.s3: Proxy | None = None

    def command(self) -> list[str]:
        cmd = super().command()
        if not self.clock_offset_s:
            return cmd
        env = [
            "/usr/bin/env",
            f"LD_PRELOAD={FAKETIME_LIB}",
            f"FAKETIME={self.clock_offset_s:+.0f}s",
        ]  # (monotonic time shifted too: with FAKETIME_DONT_FAKE_MONOTONIC=1, libfaketime
        # 0.9.10 makes Python's time.sleep fail with EINVAL; a process's own monotonic
        # offset changes nothing it computes)
        return env + cmd

    def close_group(self) -> None:
        """SIGKILL the whole process group (frozen or not) and reap it."""
        if self.proc is not None and self.proc.poll() is None:
            with suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def __str__(self) -> str:
        return f"broker {self.node}"


@dataclass
class MetadataServer:
    """The metadata store behind the proxies, restartable: etcd (same data, same ports)
    or PostgreSQL (``pg_ctl restart -m immediate``: a crash of the server)."""

    kind: str
    etcd: EtcdServer | None = None
    postgres: PostgresServer | None = None

    @property
    def address(self) -> str:
        if self.etcd is not None:
            return self.etcd.endpoint
        assert self.postgres is not None
        return f"{self.postgres.host}:{self.postgres.port}"

    def url(self, address: str) -> str:
        """``cluster.metadata.url`` reaching this store at ``address`` (a proxy)."""
        if self.etcd is not None:
            return f"etcd://{address}"
        assert self.postgres is not None
        host, _, port = address.rpartition(":")
        direct = dsn(self.postgres)
        return direct.replace(f"@{self.postgres.host}:{self.postgres.port}/", f"@{host}:{port}/")

    def restart(self, down_s: float) -> None:
        """Crash and restart the store: etcd stopped, ``down_s`` later started again
        (same data, same ports); PostgreSQL ``pg_ctl restart -m immediate`` (a crash
        and recovery, keeping the server's options; ``down_s`` is not used)."""
        if self.etcd is not None:
            self.etcd.stop()
            time.sleep(down_s)
            self.etcd.start()
            return
        assert self.postgres is not None
        data = _postmaster_data_dir(self.postgres.port)
        cmd = [str(find_bin_dir() / "pg_ctl"), "restart", "-m", "immediate", "-w"]
        cmd += ["-t", "60", "-D", str(data), "-l", str(data.parent / "log")]
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        subprocess.run(cmd, check=True, capture_output=True, timeout=90)


_PG_DATA: dict[int, Path] = {}


def _postmaster_data_dir(port: int) -> Path:
    """The data directory of the PostgreSQL listening on ``port`` (its postmaster's
    ``-D``), found once while it runs and remembered for restarts."""
    if port in _PG_DATA:
        return _PG_DATA[port]
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with suppress(OSError):
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            words = [a.decode() for a in argv]
            if "-D" in words and "-p" in words and words[words.index("-p") + 1] == str(port):
                _PG_DATA[port] = Path(words[words.index("-D") + 1])
                return _PG_DATA[port]
    raise RuntimeError(f"no postmaster on port {port}")


@dataclass
class ChaosCluster:
    """The running cluster: its brokers, servers and proxies (owned by
    :func:`chaos_cluster`, which stops them all)."""

    store: MetadataServer
    s3: SeaweedServer
    hub: ProxyHub
    brokers: list[ChaosBroker] = field(default_factory=list)

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers)

    def writer(self) -> ChaosBroker | None:
        """The broker serving as the writer now, if exactly one answers so."""
        found = [b for b in self.brokers if writing(b)]
        return found[0] if len(found) == 1 else None

    def crash(self, b: ChaosBroker) -> None:
        """kill -9 of its process group (helpers.cluster.crash)."""
        if b.running:
            with suppress(ProcessLookupError):
                os.killpg(b.proc.pid, signal.SIGCONT)  # type: ignore[union-attr]
            crash(b)

    def freeze(self, b: ChaosBroker) -> None:
        with suppress(ProcessLookupError):  # it exited on its own: reap() reports it
            os.killpg(b.proc.pid, signal.SIGSTOP)  # type: ignore[union-attr]

    def thaw(self, b: ChaosBroker) -> None:
        with suppress(ProcessLookupError):
            os.killpg(b.proc.pid, signal.SIGCONT)  # type: ignore[union-attr]

    def reap(self) -> list[tuple[float, str]]:
        """Brokers that exited on their own (every nemesis restarts the brokers it
        kills before it returns): each one's exit, with its last error line, as
        (time.monotonic(), text); each is started again."""
        found = []
        for b in self.brokers:
            if b.proc is None or b.proc.poll() is None:
                continue
            code = b.proc.returncode
            errors = [x for x in b.stderr_text().splitlines() if x.startswith("floe: error")]
            why = errors[-1] if errors else b.stderr_tail(3)
            found.append((time.monotonic(), f"{b} (run #{b.starts}) exited {code}: {why}"))
            b.start(wait=False)
        return found


@contextmanager
def chaos_cluster(tmp_path: Path, store: str) -> Iterator[ChaosCluster]:
    """Three brokers sharing partitions, on SeaweedFS and ``store`` (``etcd`` or
    ``postgres``), each through its own proxies; yields once node 1 is the writer and
    it sees all three.

    Raises:
        AssertionError: the cluster did not form within a minute.
    """
    with ExitStack() as stack:
        s3 = stack.enter_context(seaweed_server(BUCKET))
        if store == "etcd":
            (tmp_path / "etcd").mkdir()
            meta = MetadataServer("etcd", etcd=stack.enter_context(etcd_server(tmp_path / "etcd")))
        else:
            meta = MetadataServer("postgres", postgres=stack.enter_context(postgres_server()))
            _postmaster_data_dir(meta.postgres.port)  # type: ignore[union-attr]
        hub = ProxyHub()
        stack.callback(hub.close)
        cluster = ChaosCluster(meta, s3, hub)
        prefix = f"chaos-{uuid.uuid4().hex[:8]}"
        s3_address = s3.s3_endpoint.removeprefix("http://")
        for node in range(1, BROKERS + 1):
            meta_proxy = hub.proxy(f"meta-{node}", meta.address)
            s3_proxy = hub.proxy(f"s3-{node}", s3_address)
            settings = cluster_settings(
                s3,
                BUCKET,
                prefix,
                meta.url(meta_proxy.address),
                **{
                    "node.id": str(node),
                    "cluster.share.partitions": "true",
                    "auto.create.topics.enable": "false",
                    "storage.s3.endpoint": f"http://{s3_proxy.address}",
                },
            )
            b = ChaosBroker(tmp_path / f"broker{node}" / "data", settings, node)
            b.meta, b.s3 = meta_proxy, s3_proxy
            cluster.brokers.append(b)
            stack.callback(b.close_group)
        first, *others = cluster.brokers
        wait_writer(first.start(wait=False))
        for b in others:
            b.start(wait=False)
        for b in others:
            wait_for("the member listens", lambda b=b: "member.listening" in b.stderr_text(), 60)
        wait_for("the writer sees every broker", lambda: _brokers_seen(first) == BROKERS, 60)
        yield cluster


def _brokers_seen(b: Broker) -> int:
    client = AdminClient({"bootstrap.servers": b.bootstrap, "broker.address.family": "v4"})
    return len(client.list_topics(timeout=10).brokers)


def log_lines(cluster: ChaosCluster, needle: str, limit: int = 40) -> list[str]:
    """The last ``limit`` WARNING and ERROR lines of the brokers' logs that contain
    ``needle``, each prefixed with its broker: evidence a failed run prints where its
    logs are not kept (CI)."""
    found: list[str] = []
    for b in cluster.brokers:
        with suppress(OSError):
            for line in b.log_path.read_text(errors="replace").splitlines():
                if needle in line and (" WARNING " in line or " ERROR " in line):
                    found.append(f"broker {b.node}: {line}")
    return sorted(found, key=lambda x: x.split(": ", 1)[1])[-limit:]


def keep_logs(cluster: ChaosCluster, where: Path) -> None:
    """Copy the brokers' logs to ``where`` (outside the repository), and each proxy's
    connection and reset counts to ``where/proxies.txt``."""
    where.mkdir(parents=True, exist_ok=True)
    for b in cluster.brokers:
        with suppress(OSError):
            shutil.copy(b.log_path, where / f"broker{b.node}.log")
    with (where / "proxies.txt").open("w") as out:
        for p in cluster.hub.proxies:
            out.write(f"{p.name} -> {p.target[0]}:{p.target[1]} connections={p.connections} "
                      f"resets={dict(p.resets)}\n")  # fmt: skip
