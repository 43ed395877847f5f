"""A real ``floe up`` process for integration, crash and robustness tests.

One :class:`Broker` owns one child process at a time, its stderr log file and its data
directory. It is always cleaned up by :meth:`Broker.close` (the fixtures call it in a
``finally``), which SIGKILLs a process still running. ``FLOE_BIN`` overrides the
executable (default: the ``floe`` script next to the running interpreter).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from floe.testing.ports import free_ports

START_DEADLINE_S = 30.0
STOP_DEADLINE_S = 30.0


_HANDED_OUT: set[int] = set()
"""Ports given to a broker of this test process: never given twice, as a broker that is
not running (killed, or a standby's admin port) leaves its ports free for the OS to hand
out again."""


def fresh_ports(n: int) -> list[int]:
    """``n`` distinct loopback ports that were free a moment ago and that this process
    never handed out before."""
    while True:
        ports = free_ports(n)
        if not _HANDED_OUT.intersection(ports):
            _HANDED_OUT.update(ports)
            return ports


def free_port() -> int:
    """A loopback port that was free a moment ago (the OS picks it)."""
    return fresh_ports(1)[0]


def floe_bin() -> str:
    return os.environ.get("FLOE_BIN") or str(Path(sys.executable).with_name("floe"))


class BrokerError(AssertionError):
    """The broker process did not start, stop or run as the contract says."""


class Broker:
    """One ``floe up`` child on 127.0.0.1, restartable on the same port and data dir."""

    def __init__(self, data_dir: Path, settings: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.settings = dict(settings or {})
        # held together while picked, so the three differ
        self.port, self.registry_port, self.admin_port = fresh_ports(3)
        self.host = "127.0.0.1"
        self.log_path = data_dir.parent / f"{data_dir.name}.stderr.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def registry_url(self) -> str:
        return f"http://{self.host}:{self.registry_port}"

    @property
    def admin_url(self) -> str:
        return f"http://{self.host}:{self.admin_port}"

    def command(self) -> list[str]:
        cmd = [
            floe_bin(),
            "up",
            "--data-dir",
            str(self.data_dir),
            "--host",
            self.host,
            "--kafka-port",
            str(self.port),
            "--set",
            f"registry.port={self.registry_port}",
            "--set",
            f"admin.port={self.admin_port}",
        ]
        for key, value in self.settings.items():
            cmd += ["--set", f"{key}={value}"]
        return cmd

    def start(self, wait: bool = True) -> Broker:
        """Start the process and (``wait``) wait until the Kafka port accepts
        connections (:meth:`wait_ready`).

        Raises:
            BrokerError: the process exited, or the port was not ready in 30 s.
        """
        assert not self.running, "broker already running"
        self.starts += 1
        with self.log_path.open("ab") as log:
            log.write(f"\n----- floe test harness: start #{self.starts} -----\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        return self.wait_ready() if wait else self

    def wait_ready(self, timeout_s: float = START_DEADLINE_S) -> Broker:
        """Wait until the Kafka port of the started process accepts connections.

        Raises:
            BrokerError: the process exited, or the port was not ready in ``timeout_s``.
        """
        assert self.proc is not None, "broker not started"
        deadline = time.monotonic() + timeout_s
        while True:
            rc = self.proc.poll()
            if rc is not None:
                raise BrokerError(
                    f"floe up exited with {rc} during start-up:\n{self.stderr_tail()}"
                )
            try:
                with socket.create_connection((self.host, self.port), timeout=0.5):
                    return self
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.kill()
                raise BrokerError(
                    f"port {self.port} not ready after {timeout_s} s:\n{self.stderr_tail()}"
                )
            time.sleep(0.05)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        """SIGTERM, wait, and assert a clean exit (code 0)."""
        proc = self._require_proc()
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(STOP_DEADLINE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise BrokerError(
                f"floe up ignored SIGTERM for {STOP_DEADLINE_S} s:\n{self.stderr_tail()}"
            ) from None
        if rc != 0:
            raise BrokerError(f"floe up exited with {rc} after SIGTERM:\n{self.stderr_tail()}")

    def signal(self, signum: int) -> None:
        """Send ``signum`` to the running process (SIGSTOP/SIGCONT to freeze it)."""
        self._require_proc().send_signal(signum)

    def kill(self) -> None:
        """SIGKILL (``kill -9``) and reap, no questions asked."""
        proc = self._require_proc()
        if proc.poll() is None:
            proc.kill()
        proc.wait()

    @property
    def on_object_storage(self) -> bool:
        return self.settings.get("storage.type") == "s3"

    def lose_disk(self) -> None:
        """After a kill: the whole data directory is gone (a lost disk, a new machine).
        Only an object-storage broker survives it (the bucket has everything)."""
        assert not self.running, "kill the broker first"
        assert self.on_object_storage, "a local-disk broker cannot survive losing its disk"
        shutil.rmtree(self.data_dir)
        self.data_dir.mkdir()

    def restart(self) -> Broker:
        """Stop cleanly if running, then start again on the same port and data dir."""
        if self.running:
            self.stop()
        return self.start()

    def assert_alive(self) -> None:
        proc = self._require_proc()
        rc = proc.poll()
        if rc is not None:
            raise BrokerError(f"floe up died with exit code {rc}:\n{self.stderr_tail()}")

    def stderr_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def stderr_tail(self, lines: int = 40) -> str:
        return "\n".join(self.stderr_text().splitlines()[-lines:])

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def _require_proc(self) -> subprocess.Popen[bytes]:
        assert self.proc is not None, "broker was never started"
        return self.proc
