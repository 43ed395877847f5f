"""A throwaway Hive Metastore 2.3.9 for the Hive catalog test, run from PySpark's own jars
(``pyspark/jars``: hive-metastore, Derby, DataNucleus) with an embedded Derby database.

The metastore binds every interface and has no option against it, so it must only run
in a network namespace that has nothing but loopback: :func:`private_network` moves the
calling thread (and every process and thread it starts meanwhile: the metastore, a
``floe up`` broker and its Spark JVM, librdkafka's threads) into a new one, and back at
the end. :func:`hive_metastore` refuses to start outside such a namespace. Both need
root (CAP_SYS_ADMIN); the tests run as root.

The lock tables Iceberg's and pyiceberg's commits need (``HIVE_LOCKS``...) are not made by
DataNucleus's schema creation; Hive creates them itself only with ``hive.in.test=true``,
a mode that also refuses the locks Iceberg asks for (``operationType=UNSET``). So the
metastore starts once in that mode, is asked for its locks (which creates the tables),
and is restarted in the normal mode. Everything it writes (Derby, logs, warehouse) stays
in its directory, removed at the end.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyspark

CLONE_NEWNET = 0x40000000
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
SIOCSIFADDR = 0x8916
IFF_UP = 0x1
SECOND_LOOPBACK = "127.0.0.2"
"""An extra address on ``lo``: glibc's ``getaddrinfo`` with ``AI_ADDRCONFIG`` (librdkafka
uses it) resolves nothing, not even ``127.0.0.1``, while 127.0.0.1 is the only IPv4
address configured."""
READY_TIMEOUT_S = 90
STOP_TIMEOUT_S = 20

HIVE_SITE = """\
<configuration>
  <property><name>javax.jdo.option.ConnectionURL</name>
    <value>jdbc:derby:;databaseName={directory}/metastore_db;create=true</value></property>
  <property><name>datanucleus.schema.autoCreateAll</name><value>true</value></property>
  <property><name>hive.metastore.schema.verification</name><value>false</value></property>
  <property><name>hive.metastore.warehouse.dir</name><value>file://{warehouse}</value></property>
  <property><name>hive.async.log.enabled</name><value>false</value></property>
  <property><name>hive.in.test</name><value>{bootstrap}</value></property>
</configuration>
"""


@dataclass(frozen=True)
class HiveMetastore:
    """A running metastore: its Thrift URI and default warehouse directory."""

    uri: str
    warehouse: Path
    directory: Path


@contextmanager
def private_network() -> Iterator[None]:
    """Run the block in a new network namespace with only loopback, up.

    Namespaces belong to threads: only the calling thread moves, and what it starts
    inherits the namespace. It moves back when the block exits.

    Raises:
        OSError: not permitted (not root).
    """
    libc = ctypes.CDLL(None, use_errno=True)
    with open("/proc/thread-self/ns/net") as home:
        if libc.unshare(CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"unshare(CLONE_NEWNET) needs root: {os.strerror(err)}")
        try:
            _loopback_up()
            yield
        finally:
            if libc.setns(home.fileno(), CLONE_NEWNET) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"setns back to the host network: {os.strerror(err)}")


def _loopback_up() -> None:
    """``ip link set lo up`` and ``ip addr add 127.0.0.2 dev lo label lo:1`` (see
    :data:`SECOND_LOOPBACK`), with ioctls instead of iproute2."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(s, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | IFF_UP))
        address = socket.inet_aton(SECOND_LOOPBACK)
        fcntl.ioctl(s, SIOCSIFADDR, struct.pack("16sHH4s16x", b"lo:1", socket.AF_INET, 0, address))


@contextmanager
def hive_metastore() -> Iterator[HiveMetastore]:
    """Bootstrap and run a metastore until the block exits; call it inside
    :func:`private_network`.

    Raises:
        RuntimeError: outside a private network namespace, or the metastore did not
            come up.
    """
    interfaces = [name for _, name in socket.if_nameindex()]
    if interfaces != ["lo"]:
        raise RuntimeError(
            f"the metastore binds every interface; run it where only lo is: {interfaces}"
        )
    directory = Path(tempfile.mkdtemp(prefix="floe-hms-"))
    server = HiveMetastore(f"thrift://127.0.0.1:{_free_port()}", directory / "warehouse", directory)
    (directory / "tmp").mkdir()
    try:
        with _running(server, bootstrap=True):
            _show_locks(server)  # creates the lock tables in this mode
        with _running(server, bootstrap=False):
            yield server
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@contextmanager
def _running(server: HiveMetastore, *, bootstrap: bool) -> Iterator[None]:
    directory = server.directory
    (directory / "hive-site.xml").write_text(
        HIVE_SITE.format(
            directory=directory, warehouse=server.warehouse, bootstrap=str(bootstrap).lower()
        )
    )
    jars = Path(pyspark.__file__).parent / "jars"
    java = Path(os.environ["JAVA_HOME"], "bin", "java") if "JAVA_HOME" in os.environ else "java"
    cmd = [
        str(java),
        "-Xmx256m",
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",  # starts faster; it serves a handful of calls
        f"-Djava.io.tmpdir={directory / 'tmp'}",
        f"-Dhive.log.dir={directory}",  # else /tmp/<user>/hive.log
        f"-Dderby.system.home={directory}",
        "-cp",
        f"{directory}:{jars}/*",  # hive-site.xml first
        "org.apache.hadoop.hive.metastore.HiveMetaStore",
        "-p",
        server.uri.rsplit(":", 1)[1],
    ]
    with open(directory / "metastore.out", "ab") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, cwd=directory, start_new_session=True
        )
    try:
        _wait_ready(server, proc)
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _wait_ready(server: HiveMetastore, proc: subprocess.Popen[bytes]) -> None:
    port = int(server.uri.rsplit(":", 1)[1])
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log = (server.directory / "metastore.out").read_text(errors="replace")[-3000:]
            raise RuntimeError(f"the metastore exited with {proc.returncode}:\n{log}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"the metastore did not listen on {port} in {READY_TIMEOUT_S} s")


def _show_locks(server: HiveMetastore) -> None:
    """One call of the metastore's lock API, through pyiceberg's Thrift client."""
    from hive_metastore.ThriftHiveMetastore import Client
    from hive_metastore.ttypes import ShowLocksRequest
    from thrift.protocol import TBinaryProtocol
    from thrift.transport import TSocket, TTransport

    port = int(server.uri.rsplit(":", 1)[1])
    transport = TTransport.TBufferedTransport(TSocket.TSocket("127.0.0.1", port))
    transport.open()
    try:
        Client(TBinaryProtocol.TBinaryProtocol(transport)).show_locks(ShowLocksRequest())
    finally:
        transport.close()
