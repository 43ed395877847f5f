"""The unmodified Apache Kafka Java client (kafka-clients 3.9.1) as test equipment.

Fetching the client jars and compiling against them is ``floe.testing.java``'s job (the
benchmarks use it too); this module adds what only the tests need.

``tests/java/FloeClients.java`` is compiled once per pytest session into the session's
temporary directory (:func:`floe_clients`), never into the repository. Each run of it is
a child JVM (:class:`JavaClient`) whose stdout is a stream of lines such as
``ACK <partition> <offset> <value>``; the Java file's header lists them all.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, NamedTuple

import pytest

from floe.testing.java import JavaError, compile_java, java_command, kafka_client_classpath

SOURCE_DIR = Path(__file__).resolve().parents[1] / "java"
MAIN_CLASS = "FloeClients"
RUN_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 60.0
STDERR_TAIL_LINES = 40
"""A failure quotes this much of the client's log: the last retries say why it waited."""


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
        with self._lock:  # the client's own WARN/ERROR lines (StaticLoggerBinder.java)
            stderr = "\n".join(self._stderr[-STDERR_TAIL_LINES:])
        return JavaError(f"java {self.name} {what}\nstdout tail:\n{tail}\nstderr tail:\n{stderr}")

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
        argv = java_command(self.classpath, self.tmp_dir, MAIN_CLASS, subcommand, *args)
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
