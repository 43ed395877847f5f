"""A Spark standalone cluster from the pyspark wheel: one master and one worker on
127.0.0.1, for tests that run table-topic rounds on executors instead of in local mode.

The wheel has no ``sbin`` scripts: both daemons run through ``bin/spark-class``, with
every port chosen free (the web UIs default to 8080/8081, so theirs are set too), small
daemon heaps, and logs, work dir and current directory under the cluster's own
directory. Each daemon is the leader of its own process group; executors are children
of the worker JVM, in its group. :meth:`SparkCluster.stop` (the fixtures call it in a
``finally``) sends SIGTERM to both groups, then SIGKILL to what is left.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pyspark

from helpers.broker import free_port

START_DEADLINE_S = 60.0
STOP_DEADLINE_S = 15.0
SPARK_HOME = Path(pyspark.__file__).parent


class SparkCluster:
    """One master and one worker (``cores`` cores, ``memory`` for executors) under
    ``base``; :meth:`start` waits until the worker has registered."""

    def __init__(self, base: Path, cores: int = 2, memory: str = "2g") -> None:
        self.base = base
        self.base.mkdir(parents=True, exist_ok=True)
        self.cores = cores
        self.memory = memory
        self.port = free_port()
        self.ui_port = free_port()
        self.procs: list[subprocess.Popen[bytes]] = []

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def app_confs(self) -> dict[str, str]:
        """The Spark confs of an application on this cluster (``floe up --set``): driver
        on loopback, two one-core executors of 512 MiB."""
        return {
            "spark.master": self.url,
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.executor.memory": "512m",
            "spark.executor.cores": "1",
            "spark.cores.max": str(self.cores),
        }

    def _spawn(self, name: str, *args: str) -> None:
        env = {
            **os.environ,
            "SPARK_HOME": str(SPARK_HOME),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_DAEMON_MEMORY": "256m",
            "SPARK_LOG_DIR": str(self.base / "logs"),
        }
        with (self.base / f"{name}.log").open("ab") as log:
            self.procs.append(
                subprocess.Popen(
                    [str(SPARK_HOME / "bin" / "spark-class"), *args],
                    cwd=self.base,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    start_new_session=True,
                )
            )

    def state(self) -> dict[str, Any]:
        """The master's view (its web UI's ``/json``): workers, applications."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json", timeout=5) as r:
            found: dict[str, Any] = json.loads(r.read())
            return found

    def start(self) -> SparkCluster:
        """Start the master, then the worker, and wait for the worker to be ALIVE.

        Raises:
            AssertionError: a daemon exited or the worker did not register in time.
        """
        self._spawn(
            "master",
            "org.apache.spark.deploy.master.Master",
            *("--host", "127.0.0.1", "--port", str(self.port)),
            *("--webui-port", str(self.ui_port)),
        )
        work = self.base / "work"
        work.mkdir(exist_ok=True)
        self._spawn(
            "worker",
            "org.apache.spark.deploy.worker.Worker",
            *("--host", "127.0.0.1", "--cores", str(self.cores), "--memory", self.memory),
            *("--webui-port", str(free_port()), "--work-dir", str(work), self.url),
        )
        deadline = time.monotonic() + START_DEADLINE_S
        while True:
            for proc in self.procs:
                assert proc.poll() is None, f"a Spark daemon exited:\n{self.log_tail()}"
            try:
                if any(w.get("state") == "ALIVE" for w in self.state().get("workers", [])):
                    return self
            except OSError:
                pass  # the master's UI is not up yet
            assert time.monotonic() < deadline, f"no Spark worker in time:\n{self.log_tail()}"
            time.sleep(0.3)

    def log_tail(self, chars: int = 3000) -> str:
        return "\n".join(
            f"--- {p.name}:\n{p.read_text(errors='replace')[-chars:]}"
            for p in sorted(self.base.glob("*.log"))
        )

    def stop(self) -> None:
        """SIGTERM both process groups (daemons and executors), SIGKILL after
        :data:`STOP_DEADLINE_S`; idempotent."""
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_DEADLINE_S
        for proc in reversed(self.procs):
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        for proc in self.procs:  # executors outliving their worker, if any
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        self.procs.clear()
