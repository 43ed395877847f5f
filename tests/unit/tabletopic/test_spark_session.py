"""The Spark manager hands out live sessions only: a dead driver is found on the next
call, forgotten (pyspark's globals reset, nothing asked of its JVM) and rebuilt once
however many threads ask at the same time; stopping after a death neither raises nor
calls into the JVM. No JVM runs here: sessions are stand-ins with the attributes the
manager reads (the real thing: tests/integration/test_table_topic_spark_restart.py).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from pathlib import Path

import pytest
from py4j.protocol import Py4JNetworkError
from pyspark import SparkContext
from pyspark.sql import SparkSession, SQLContext

from floe.config import load_config
from floe.tabletopic.spark import session as sess
from floe.tabletopic.spark.session import SparkManager


class FakeProc:
    """The driver JVM as ``subprocess.Popen`` shows it."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        return self.returncode

    def kill(self) -> None:
        self.returncode = -9

    def wait(self, timeout: float | None = None) -> int | None:
        return self.returncode


class FakeJsc:
    """``JavaSparkContext``: ``jsc.sc().isStopped()``, or a py4j error if unreachable."""

    def __init__(self) -> None:
        self.stopped = False
        self.error: Exception | None = None

    def sc(self) -> FakeJsc:
        if self.error is not None:
            raise self.error
        return self

    def isStopped(self) -> bool:  # noqa: N802 - the Java method's name
        return self.stopped


class FakeGateway:
    def __init__(self, proc: FakeProc) -> None:
        self.proc = proc
        self.shut_down = False

    def shutdown(self) -> None:
        assert self.proc.poll() is not None, "never shut down a gateway whose JVM runs"
        self.shut_down = True


class FakeServer:
    closed = False

    def shutdown(self) -> None:
        self.closed = True


class FakeContext:
    def __init__(self, pid: int) -> None:
        self._gateway = FakeGateway(FakeProc(pid))
        self._jsc: FakeJsc | None = FakeJsc()
        self._accumulatorServer: FakeServer | None = FakeServer()


class FakeJvm:
    """Any JVM call path, answering None (``SparkSession.setActiveSession``)."""

    def __getattr__(self, name: str) -> FakeJvm:
        return self

    def __call__(self, *args: object) -> None:
        return None


class FakeSession:
    def __init__(self, pid: int) -> None:
        self.sparkContext = FakeContext(pid)
        self._jvm = FakeJvm()
        self._jsparkSession = object()
        self.stops = 0
        self.stop_error: Exception | None = None

    @property
    def proc(self) -> FakeProc:
        return self.sparkContext._gateway.proc

    def stop(self) -> None:
        if self.stop_error is not None:
            raise self.stop_error
        self.stops += 1


@pytest.fixture
def manager(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SparkManager:
    """A manager whose launches make :class:`FakeSession` (pids 1, 2, ...), each ~50 ms;
    pyspark's class-level globals hold stand-ins, restored after the test."""
    for cls, name in [
        (SparkContext, "_gateway"),
        (SparkContext, "_jvm"),
        (SparkContext, "_active_spark_context"),
        (SparkSession, "_instantiatedSession"),
        (SparkSession, "_activeSession"),
        (SQLContext, "_instantiatedContext"),
    ]:
        monkeypatch.setattr(cls, name, object())
    monkeypatch.setattr(SparkManager, "_owner", None)
    m = SparkManager.from_config(load_config(None, {"data.dir": str(tmp_path)}, {}))
    launched: list[FakeSession] = []

    def launch(self: SparkManager) -> FakeSession:
        time.sleep(0.05)
        launched.append(FakeSession(len(launched) + 1))
        return launched[-1]

    monkeypatch.setattr(SparkManager, "_launch", launch)
    m.launched = launched
    return m


def pyspark_globals() -> list[object]:
    return [
        SparkContext._gateway,
        SparkContext._jvm,
        SparkContext._active_spark_context,
        SparkSession._instantiatedSession,
        SparkSession._activeSession,
        SQLContext._instantiatedContext,
    ]


def test_the_liveness_check_names_why_a_driver_is_lost() -> None:
    s = FakeSession(7)
    assert sess.driver_lost_reason(s) is None
    s.sparkContext._jsc.error = Py4JNetworkError("Answer from Java side is empty")
    assert sess.driver_lost_reason(s) == "gateway_error:Py4JNetworkError"
    s.sparkContext._jsc = FakeJsc()
    s.sparkContext._jsc.stopped = True
    assert sess.driver_lost_reason(s) == "context_stopped"
    s.sparkContext._jsc = None
    assert sess.driver_lost_reason(s) == "context_stopped"
    s.proc.returncode = 3  # -XX:+ExitOnOutOfMemoryError
    assert sess.driver_lost_reason(s) == "exited:3"


def test_a_dead_driver_is_rebuilt_once_for_concurrent_callers(
    manager: SparkManager, caplog: pytest.LogCaptureFixture
) -> None:
    first = manager.session()
    assert manager.session() is first  # alive: the same session, no launch
    first.proc.returncode = -9  # kill -9
    barrier = threading.Barrier(8)
    got: list[object] = []

    def call() -> None:
        barrier.wait()
        got.append(manager.session())

    with caplog.at_level(logging.WARNING, logger="floe.tabletopic.spark"):
        threads = [threading.Thread(target=call) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
    assert len(manager.launched) == 2
    second = manager.launched[-1]
    assert got == [second] * 8
    assert [r.getMessage() for r in caplog.records] == ["spark.driver_lost pid=1 reason=exited:-9"]
    assert pyspark_globals() == [None] * 6, "getOrCreate() must launch a new JVM"
    ctx = first.sparkContext
    assert ctx._jsc is None and ctx._accumulatorServer is None and ctx._gateway.shut_down
    assert asyncio.run(manager.get_session()) is second


def test_a_stopped_context_is_rebuilt_after_its_jvm_is_killed(manager: SparkManager) -> None:
    first = manager.session()
    first.sparkContext._jsc.stopped = True  # e.g. the DAG scheduler stopped it
    assert manager.session() is manager.launched[-1] is not first
    assert first.proc.returncode == -9 and first.sparkContext._gateway.shut_down


def test_stop_after_a_death_neither_raises_nor_calls_the_jvm(
    manager: SparkManager, caplog: pytest.LogCaptureFixture
) -> None:
    first = manager.session()
    first.proc.returncode = -9
    with caplog.at_level(logging.INFO, logger="floe.tabletopic.spark"):
        manager.stop_sync()
    assert first.stops == 0 and not manager.started
    assert [r.getMessage() for r in caplog.records] == [
        "spark.driver_lost pid=1 reason=exited:-9",
        "spark.stopped",
    ]
    assert SparkManager._owner is None
    manager.stop_sync()  # idempotent


def test_stop_after_a_rebuild_stops_the_live_session(manager: SparkManager) -> None:
    manager.session().proc.returncode = -9
    second = manager.session()
    manager.stop_sync()
    assert second.stops == 1 and SparkManager._owner is None


def test_a_stopped_manager_never_starts_spark_again(manager: SparkManager) -> None:
    """A call that races the shutdown (a round's commit, a cancel) must not launch a new
    driver once the broker stopped Spark: the JVM would outlive the stop."""
    manager.session()
    manager.stop_sync()
    with pytest.raises(sess.SparkUnavailableError, match="stopped"):
        manager.session()
    assert len(manager.launched) == 1 and not manager.started


def test_a_driver_dying_during_stop_is_discarded(manager: SparkManager) -> None:
    s = manager.session()
    s.stop_error = Py4JNetworkError("Error while sending or receiving")
    manager.stop_sync()
    assert s.proc.returncode == -9 and s.sparkContext._jsc is None
    assert SparkManager._owner is None


def test_an_out_of_memory_driver_exits_so_it_can_be_rebuilt(tmp_path: Path) -> None:
    settings = sess.SparkSettings.from_config(load_config(None, {"data.dir": str(tmp_path)}, {}))
    assert "-XX:+ExitOnOutOfMemoryError" in settings.confs()["spark.driver.extraJavaOptions"]
