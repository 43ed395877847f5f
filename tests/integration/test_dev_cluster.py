"""``floe dev cluster``, end to end with real processes: it starts SeaweedFS, a SQLite
metadata store and two ``floe up`` brokers, prints the bootstrap list; a real client
(confluent-kafka) given the whole list produces and consumes through the writer; the
writer is ``kill -9``-ed, the command reports the standby taking over, and the same
client configuration goes on working; ``--restart`` starts the killed broker again as a
standby; SIGINT stops everything, with exit code 0, no broker or ``weed`` left and the
directory removed.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from helpers.broker import floe_bin
from helpers.cluster import consume_values, produce_values

pytestmark = pytest.mark.timeout(300)

SUMMARY_TIMEOUT_S = 120.0
WAIT_S = 30.0
EXIT_TIMEOUT_S = 60.0
SUMMARY_END = "Ctrl-C stops everything."
LOG_TAIL_LINES = 80
BOOTSTRAP = re.compile(r"^  Bootstrap: (\S+)$", re.M)
BROKER = re.compile(
    r"^  Broker (\d+):\s+pid (\d+) (writer|standby|member)\s+kafka (\S+)\s+admin (\S+)", re.M
)
SEAWEED = re.compile(r"^  SeaweedFS: (\S+)", re.M)


@dataclass(frozen=True)
class Member:
    node_id: int
    pid: int
    role: str
    kafka: str
    admin: str


@dataclass
class DevCluster:
    """The running command, its stdout file, and what its summary said."""

    proc: subprocess.Popen[bytes]
    out: Path
    directory: Path
    share: bool
    """The other broker is a member leading partitions too (the default; ``--standbys``
    makes it a standby)."""
    bootstrap: str = ""
    members: tuple[Member, ...] = ()
    seaweed_dir: str = ""

    def text(self) -> str:
        return self.out.read_text(errors="replace")

    def wait_for(self, what: str, timeout_s: float) -> str:
        """The output once it contains ``what``; fails if the command exited first."""
        deadline = time.monotonic() + timeout_s
        while what not in (text := self.text()):
            assert self.proc.poll() is None, f"floe dev cluster exited early:\n{text}"
            assert time.monotonic() < deadline, f"no {what!r} in {timeout_s} s:\n{text}"
            time.sleep(0.2)
        return text

    def report(self) -> str:
        """The command's output and the end of each broker's log: what a failed
        assertion shows."""
        parts = [self.text()]
        for log in sorted(self.directory.glob("broker-*.log")):
            lines = log.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
            parts.append(f"--- {log.name} (last {len(lines)} lines)\n" + "\n".join(lines))
        return "\n".join(parts)

    def writer(self) -> Member:
        [writer] = [m for m in self.members if m.role == "writer"]
        return writer


def pids_alive(pids: list[int]) -> list[int]:
    """Of ``pids``, those still running (a zombie counts as gone)."""
    alive = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            continue
        if state != "Z":
            alive.append(pid)
    return alive


def processes_mentioning(text: str) -> list[int]:
    """Live pids whose command line contains ``text`` (the brokers of a directory,
    the ``weed`` of SeaweedFS's directory)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in cmdline:
            found.append(int(proc.name))
    return pids_alive(found)


@pytest.fixture(params=["standbys", "members"])
def dev_cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[DevCluster]:
    """``floe dev cluster --brokers 2 --restart`` (with ``--standbys`` too) up and
    its summary parsed; whatever is left of it is killed at the end (its process group,
    the brokers', SeaweedFS)."""
    out = tmp_path / "dev-cluster.out"
    share = request.param == "members"
    cmd = [floe_bin(), "dev", "cluster", "--brokers", "2", "--dir", str(tmp_path / "c")]
    cmd += ["--session-timeout-ms", "3000", "--restart"]
    cmd += [] if share else ["--standbys"]
    with out.open("wb") as sink:
        proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=sink, stderr=sink, start_new_session=True
        )
    cluster = DevCluster(proc, out, tmp_path / "c", share)
    try:
        text = cluster.wait_for(SUMMARY_END, SUMMARY_TIMEOUT_S)
        bootstrap = BOOTSTRAP.search(text)
        seaweed = SEAWEED.search(text)
        assert bootstrap is not None and seaweed is not None, text
        cluster.bootstrap, cluster.seaweed_dir = bootstrap.group(1), seaweed.group(1)
        cluster.members = tuple(
            Member(int(n), int(pid), role, kafka, admin)
            for n, pid, role, kafka, admin in BROKER.findall(text)
        )
        yield cluster
    finally:
        for pgid in [proc.pid, *(m.pid for m in cluster.members)]:
            with suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
        leftovers = processes_mentioning(str(cluster.directory))
        if cluster.seaweed_dir:
            leftovers += processes_mentioning(cluster.seaweed_dir)
        for pid in leftovers:
            os.kill(pid, signal.SIGKILL)
        proc.wait(timeout=30)


def cluster_status(admin_url: str) -> dict[str, object]:
    done = subprocess.run(
        [floe_bin(), "cluster", "status", "-o", "json", "--admin", admin_url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    doc: dict[str, object] = json.loads(done.stdout)
    return doc


def accepts(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=1):
            return True
    except OSError:
        return False


def test_a_dev_cluster_serves_fails_over_and_stops_cleanly(dev_cluster: DevCluster) -> None:
    c = dev_cluster
    assert [m.node_id for m in c.members] == [1, 2]
    assert c.bootstrap == ",".join(m.kafka for m in c.members)
    writer = c.writer()
    [standby] = [m for m in c.members if m is not writer]
    assert standby.role == ("member" if c.share else "standby")
    # a standby answers Metadata on its Kafka port (clients find the writer through it),
    # a member its own partitions too; each answers floe cluster status in its own role
    assert accepts(writer.kafka) and accepts(standby.kafka)
    theirs = cluster_status(standby.admin)["membership"]
    assert isinstance(theirs, dict) and theirs["role"] == standby.role

    status = cluster_status(writer.admin)
    assert isinstance(status["membership"], dict) and status["membership"]["role"] == "writer"
    brokers = status["brokers"]
    assert isinstance(brokers, list)
    assert sorted(b["node_id"] for b in brokers) == [1, 2]  # the standby is registered
    assert [b["node_id"] for b in brokers if b["self"]] == [writer.node_id]

    topic = f"t-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(WAIT_S)
    before = [f"before-{i}".encode() for i in range(30)]
    assert sorted(produce_values(c.bootstrap, topic, before)) == sorted(before)
    assert sorted(consume_values(c.bootstrap, topic, 30)) == sorted(before)
    ownership = cluster_status(writer.admin)["ownership"]
    assert isinstance(ownership, list)
    owners = {o["owner"] for o in ownership if o["topic"] == topic}
    assert owners == ({1, 2} if c.share else {writer.node_id})  # spread over both, or not

    os.kill(writer.pid, signal.SIGKILL)
    c.wait_for(f"broker {standby.node_id} (pid {standby.pid}) is the writer now", WAIT_S)
    after = [f"after-{i}".encode() for i in range(30)]
    # the same bootstrap list reaches the new writer
    assert sorted(produce_values(c.bootstrap, topic, after)) == sorted(after), c.report()
    got = consume_values(c.bootstrap, topic, 60)
    assert sorted(got) == sorted(before + after), c.report()
    c.wait_for(f"broker {writer.node_id} restarted", WAIT_S)
    restarted = re.search(rf"broker {writer.node_id} restarted \(pid (\d+)\)", c.text())
    assert restarted is not None

    c.proc.send_signal(signal.SIGINT)
    assert c.proc.wait(EXIT_TIMEOUT_S) == 0, c.text()
    assert c.text().rstrip().endswith("floe dev cluster: stopped")
    pids = [m.pid for m in c.members] + [int(restarted.group(1))]
    assert pids_alive(pids) == []
    assert processes_mentioning(str(c.directory)) == []
    assert processes_mentioning(c.seaweed_dir) == []
    assert not c.directory.exists()  # no --keep
