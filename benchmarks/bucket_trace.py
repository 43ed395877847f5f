"""``python benchmarks/bucket_trace.py TRACE_FILE up ...``: ``floe`` with every request
its object-storage engine makes to the bucket appended to ``TRACE_FILE`` (JSON lines).

The cluster suite's takeover workload (``benchmarks.cluster_takeover``) starts its
brokers through this, to say which reads of a takeover grow with the bucket. Per request:
the operation; what the key or prefix is (:func:`kind`: ``data/<t>/<p>/`` rather than
the key itself); the call site (the innermost Floe frame outside ``bucket.py``, or the
worker thread's name when a pool maps the bucket's own method); ``time.monotonic()`` at
its start and end (one clock for every process on Linux, so the suite can cut a window
around a kill); a LIST is one event for the whole listing, its requests counted as
pages of :data:`LIST_PAGE` keys.

The wrapper patches :class:`~floe.storage.object.bucket.Bucket` in this process before
Floe's command line runs; the broker is otherwise unchanged. It is run by path (the
suite's brokers do not run in the repository), so it imports nothing from
``benchmarks``. Events are buffered and appended every :data:`FLUSH_S` by a daemon
thread (the last ones are lost when the process is killed: the suite reads the file
while the broker runs).
"""

from __future__ import annotations

import collections
import functools
import json
import runpy
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

FLUSH_S = 0.2
LIST_PAGE = 1000
"""Keys per ListObjectsV2 response (S3's and SeaweedFS's default ``max-keys``): a LIST
of ``n`` keys is counted as ``ceil(n / LIST_PAGE)`` requests. (``BucketStats.lists``,
Floe's ``floe_s3_requests{operation="list"}``, counts the chunks of 50 keys obstore's
``list`` yields, not requests.)"""
_OWN_FILE = "storage/object/bucket.py"


@dataclass(frozen=True)
class Event:
    """One request (a LIST: the whole listing, ``pages`` requests)."""

    op: str
    """``get``, ``get_range``, ``list``, ``put`` or ``delete``."""
    kind: str
    """What was read or written (:func:`kind`)."""
    site: str
    """``file.py:function`` of the caller, or ``[thread name]``."""
    start: float
    end: float
    pages: int = 1
    """Requests: LIST pages (:data:`LIST_PAGE`), DELETE batches of 1000; 1 otherwise."""
    keys: int = 0
    """Keys a LIST returned."""
    bytes: int = 0


def kind(key: str) -> str:
    """``key`` (or a LIST prefix) with its variable parts named: ``data/<t>/<p>/<obj>.log``,
    ``wal/<s>/<seq>.wal``, ``takeover/`` ... (see ``floe.storage.object.layout``)."""
    parts = key.split("/")
    head = parts[0]
    if head == "data":
        if len(parts) <= 2 or parts[1] == "":
            return "data/"
        if len(parts) == 3 and parts[2] == "":
            return "data/<t>/"
        if len(parts) == 4 and parts[3] == "":
            return "data/<t>/<p>/"
        name = parts[-1]
        if name == "log-start":
            return "data/<t>/<p>/log-start"
        if name.endswith(".snapshot"):
            return "data/<t>/<p>/<offset>.snapshot"
        if name.endswith(".manifest"):
            return "data/<t>/<p>/<ns>-<broker>.manifest"
        return "data/<t>/<p>/<object>.log"
    if head == "wal":
        if len(parts) == 2 and parts[1] == "":
            return "wal/"
        if parts[-1] == "":
            return "wal/<s>/"
        return "wal/<s>/<seq>.wal"
    if head in ("takeover", "wal-floor"):
        return f"{head}/" if len(parts) == 1 or parts[-1] == "" else f"{head}/<s>/..."
    return key


def _site() -> str:
    """The innermost Floe frame outside ``bucket.py`` on this thread's stack, else the
    thread's name (a pool thread running ``bucket.get`` itself)."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if "/floe/" in name and not name.endswith(_OWN_FILE):
            short = name.rsplit("/floe/", 1)[1]
            return f"{short}:{frame.f_code.co_qualname}"
        frame = frame.f_back
    thread = threading.current_thread().name
    return f"[{thread.rstrip('_0123456789')}]"


class _Recorder:
    """The events not written yet; appended to by any thread (a list append holds the
    GIL), written by :meth:`run`'s thread only."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.pending: collections.deque[Event] = collections.deque()

    def add(self, event: Event) -> None:
        self.pending.append(event)

    def run(self) -> None:
        while True:
            time.sleep(FLUSH_S)
            self.flush()

    def flush(self) -> None:
        lines = []
        while self.pending:
            e = self.pending.popleft()
            lines.append(json.dumps(e.__dict__, separators=(",", ":")))
        if lines:
            with self.path.open("a") as f:
                f.write("\n".join(lines) + "\n")


def install(path: Path) -> None:
    """Patch :class:`Bucket` of this process to record each request into ``path``."""
    from floe.storage.object.bucket import Bucket

    rec = _Recorder(path)
    threading.Thread(target=rec.run, name="bucket-trace", daemon=True).start()

    def timed(op: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(self: Bucket, key: str, *args: Any, **kwargs: Any) -> Any:
            site, t0 = _site(), time.monotonic()
            out = fn(self, key, *args, **kwargs)
            size = len(out) if isinstance(out, bytes) else len(args[0]) if op == "put" else 0
            rec.add(Event(op, kind(key), site, t0, time.monotonic(), bytes=size))
            return out

        return wrapper

    def timed_async(op: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        async def wrapper(self: Bucket, key: str, data: Any, **kwargs: Any) -> Any:
            site, t0 = _site(), time.monotonic()
            await fn(self, key, data, **kwargs)
            rec.add(Event(op, kind(key), site, t0, time.monotonic(), bytes=len(data)))

        return wrapper

    original_list = Bucket.list
    original_delete = Bucket.delete

    def listing(self: Bucket, prefix: str) -> Iterator[Any]:
        site, t0, keys = _site(), time.monotonic(), 0
        for item in original_list(self, prefix):
            keys += 1
            yield item
        pages = max(1, -(-keys // LIST_PAGE))
        rec.add(Event("list", kind(prefix), site, t0, time.monotonic(), pages=pages, keys=keys))

    def deleting(self: Bucket, keys_: list[str]) -> None:
        site, t0 = _site(), time.monotonic()
        original_delete(self, keys_)
        first = kind(keys_[0]) if keys_ else "-"
        pages = (len(keys_) + 999) // 1000
        rec.add(Event("delete", first, site, t0, time.monotonic(), pages=pages, keys=len(keys_)))

    Bucket.get = timed("get", Bucket.get)  # type: ignore[method-assign]
    Bucket.get_range = timed("get_range", Bucket.get_range)  # type: ignore[method-assign]
    Bucket.put = timed("put", Bucket.put)  # type: ignore[method-assign]
    Bucket.put_async = timed_async("put", Bucket.put_async)  # type: ignore[method-assign]
    Bucket.list = listing  # type: ignore[method-assign]
    Bucket.delete = deleting  # type: ignore[method-assign]


def read(path: Path) -> list[Event]:
    """Every event written to ``path`` so far (a torn last line is skipped)."""
    out: list[Event] = []
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        try:
            out.append(Event(**json.loads(line)))
        except (ValueError, TypeError):
            continue
    return out


def tally(events: Iterable[Event], since: float, until: float) -> dict[str, dict[str, float]]:
    """Requests that started in ``[since, until]``, by ``op kind <- site``: requests
    (LIST pages), keys listed, bytes, and the seconds they took (summed over threads)."""
    out: dict[str, dict[str, float]] = {}
    for e in events:
        if not since <= e.start <= until:
            continue
        row = out.setdefault(
            f"{e.op} {e.kind} <- {e.site}", {"requests": 0, "keys": 0, "bytes": 0, "s": 0.0}
        )
        row["requests"] += e.pages
        row["keys"] += e.keys
        row["bytes"] += e.bytes
        row["s"] += e.end - e.start
    return out


def main(argv: list[str]) -> None:
    """``TRACE_FILE`` then ``floe``'s own arguments."""
    path, *rest = argv
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]  # its profile.py
    install(Path(path))
    sys.argv = ["floe", *rest]
    runpy.run_module("floe", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
