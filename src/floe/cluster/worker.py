"""The thread that owns a broker's metadata store once it joined the cluster: the store's
clients are not thread-safe and block on the network, so every call runs here, the
calls other threads queue (:meth:`StoreThread.submit`) between a periodic ``tick`` (the
session's renewal). It also does the store's last work when the broker leaves
(``last``: give the registration up, close), so that nothing closes the store under a
call of its own.
"""

from __future__ import annotations

import concurrent.futures
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from floe.cluster.interface import MetadataUnavailableError

log = logging.getLogger("floe.cluster.membership")

Job = tuple[Callable[[], Any], concurrent.futures.Future[Any]]


class StoreThread:
    """Runs queued jobs and ``tick`` every ``interval_s`` on one thread, from
    :meth:`start` until :meth:`stop`, then ``last`` once. A job that raises
    :class:`MetadataUnavailableError` is also reported to ``unavailable``."""

    def __init__(
        self,
        broker_id: int,
        interval_s: float,
        tick: Callable[[], None],
        unavailable: Callable[[MetadataUnavailableError], None],
        last: Callable[[], None],
    ) -> None:
        self._broker_id = broker_id
        self._interval_s = interval_s
        self._tick = tick
        self._unavailable = unavailable
        self._last = last
        self._jobs: queue.SimpleQueue[Job] = queue.SimpleQueue()
        self._stopped = threading.Event()
        self._lock = threading.Lock()  # the stop, against queueing and the last work
        self._ended = False  # ``last`` ran, or runs
        self._thread: threading.Thread | None = None

    @property
    def started(self) -> bool:
        return self._thread is not None

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def wait_stopped(self, timeout_s: float) -> bool:
        """Sleep up to ``timeout_s``; True if :meth:`stop` was called meanwhile."""
        return self._stopped.wait(timeout_s)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="floe-cluster", daemon=True)
        self._thread.start()

    def submit(self, job: Callable[[], Any]) -> concurrent.futures.Future[Any]:
        """Queue ``job`` for the thread; its future fails at once once stopped."""
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._lock:
            if self._stopped.is_set():  # left: the thread runs nothing more
                future.set_exception(MetadataUnavailableError("this broker left the cluster"))
            else:
                self._jobs.put((job, future))
        return future

    def stop(self, timeout_s: float) -> bool:
        """Stop the thread and have it do ``last`` (here when it never started, or
        ended on an error); wait up to ``timeout_s`` for it. False when the thread is
        still in a call: it does ``last`` when the call returns."""
        with self._lock:  # no job is queued after this: the rest fail in ``last``
            self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout_s)
            if self._thread.is_alive():
                return False
        self._end()
        return True

    def _run(self) -> None:
        try:
            self._serve()
        finally:
            if self._stopped.is_set():
                self._end()

    def _serve(self) -> None:
        due = time.monotonic() + self._interval_s
        while not self._stopped.is_set():
            try:
                job, future = self._jobs.get(timeout=max(0.0, due - time.monotonic()))
            except queue.Empty:
                pass
            else:
                self._do(job, future)
            if self._stopped.is_set():
                break
            if time.monotonic() >= due:
                due = time.monotonic() + self._interval_s
                self._tick()

    def _do(self, job: Callable[[], Any], future: concurrent.futures.Future[Any]) -> None:
        try:
            future.set_result(job())
        except MetadataUnavailableError as exc:
            self._unavailable(exc)
            future.set_exception(exc)
        except Exception as exc:
            log.exception("cluster.job_failed broker=%d", self._broker_id)
            future.set_exception(exc)

    def _end(self) -> None:
        """Fail the jobs still queued (their callers must not wait), then ``last``:
        once, whichever thread comes first."""
        with self._lock:
            if self._ended:
                return
            self._ended = True
        while True:
            try:
                _, future = self._jobs.get_nowait()
            except queue.Empty:
                break
            future.set_exception(MetadataUnavailableError("this broker left the cluster"))
        self._last()
