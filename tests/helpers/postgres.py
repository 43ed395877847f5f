"""A throwaway PostgreSQL server for tests (Debian's ``postgresql`` package).

:func:`postgres_server` runs ``initdb`` into a fresh directory as the ``postgres`` OS
user (tests run as root, and PostgreSQL refuses to run as root), starts it with
``pg_ctl`` on a free port bound to 127.0.0.1 only (its Unix socket in that directory),
creates a database and a password-authenticated user (``scram-sha-256`` over TCP),
and always stops it with ``pg_ctl stop -m immediate`` and removes the directory.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg

OS_USER = "postgres"
BIN_GLOB = "/usr/lib/postgresql/*/bin"


@dataclass(frozen=True)
class PostgresServer:
    """A running server and how to reach its database."""

    host: str
    port: int
    database: str
    user: str
    password: str

    @property
    def jdbc_url(self) -> str:
        return f"jdbc:postgresql://{self.host}:{self.port}/{self.database}"

    @property
    def sqlalchemy_url(self) -> str:
        return (
            f"postgresql+psycopg://{self.user}:{self.password}"
            f"@{self.host}:{self.port}/{self.database}"
        )


def find_bin_dir() -> Path:
    """The newest ``/usr/lib/postgresql/<v>/bin`` holding ``initdb`` and ``pg_ctl``.

    Raises:
        RuntimeError: no server installed (``make test`` installs it).
    """
    found = sorted(
        (Path(d) for d in glob.glob(BIN_GLOB) if (Path(d) / "pg_ctl").exists()),
        key=lambda d: int(d.parent.name) if d.parent.name.isdigit() else 0,
    )
    if not found or not (found[-1] / "initdb").exists():
        raise RuntimeError(
            f"no PostgreSQL server binaries under {BIN_GLOB}: run `make test` "
            "(scripts/ensure-system-deps.sh test installs the Debian postgresql package)"
        )
    return found[-1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _as_postgres(*args: str | Path) -> subprocess.CompletedProcess[str]:
    cmd = [str(a) for a in args]
    if os.geteuid() == 0:
        cmd = ["runuser", "-u", OS_USER, "--", *cmd]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


@contextmanager
def postgres_server(
    database: str = "floe", user: str = "floe", password: str = "floe-secret"
) -> Iterator[PostgresServer]:
    """Start a private server, yield it, and always stop it and delete its files."""
    bin_dir = find_bin_dir()
    root = Path(tempfile.mkdtemp(prefix="floe-pg-"))  # under /tmp: postgres can reach it
    data, sock = root / "data", root / "sock"
    sock.mkdir()
    if os.geteuid() == 0:
        for p in (root, sock):
            shutil.chown(p, OS_USER, OS_USER)
    port = _free_port()
    started = False
    try:
        _as_postgres(
            bin_dir / "initdb",
            "-D",
            data,
            "-U",
            OS_USER,
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
            "--encoding=UTF8",
            "--no-sync",
        )
        opts = f"-p {port} -k {sock} -c listen_addresses=127.0.0.1 -c fsync=off"
        _as_postgres(
            bin_dir / "pg_ctl",
            "start",
            "-w",
            "-t",
            "30",
            "-D",
            data,
            "-l",
            root / "log",
            "-o",
            opts,
        )
        started = True
        # the superuser over the Unix socket (trust), to create the user and database
        with psycopg.connect(
            host=str(sock), port=port, user=OS_USER, dbname="postgres", autocommit=True
        ) as admin:
            admin.execute(f"CREATE USER {user} PASSWORD '{password}'")
            admin.execute(f"CREATE DATABASE {database} OWNER {user}")
        yield PostgresServer("127.0.0.1", port, database, user, password)
    finally:
        if started:
            _as_postgres(bin_dir / "pg_ctl", "stop", "-m", "immediate", "-D", data)
        shutil.rmtree(root, ignore_errors=True)
