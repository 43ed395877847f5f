"""File descriptors: thousands of segments fit under a small RLIMIT_NOFILE (a bounded
LRU of open files, ``log.max.open.files``), the soft limit is raised to the hard one at
start, and a topic whose creation fails halfway leaves nothing behind."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from localstore_helpers import StoreFactory, T, append, batch, records

from floe.storage.interface import StorageError
from floe.storage.local import LocalStore
from floe.types import PartitionId, TopicName

SMALL_LIMIT = textwrap.dedent(
    """
    import os, resource, sys
    from pathlib import Path
    from floe.config.loader import load_config
    from floe.protocol.batch import scan
    from floe.protocol.records import Record, encode_batch
    from floe.storage.local import LocalStore
    from floe.types import Offset, PartitionId, TopicName

    resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))
    tmp = Path(sys.argv[1])
    (tmp / "floe.toml").touch()
    config = load_config(tmp / "floe.toml", {}, {})
    store = LocalStore(tmp / "data", config)
    topics = [TopicName(f"t{i}") for i in range(4)]
    for t in topics:  # 4 x 60 partitions x 4 segments x 3 files: 2880 files
        store.create_topic(t, 60, {"segment.bytes": "300"})
    for round_ in range(4):
        for t in topics:
            for p in range(60):
                recs = [Record(0, round_, b"k", b"%s-%d-%d" % (t.encode(), p, round_) * 40)]
                buf = bytearray(encode_batch(recs, base_offset=0))
                store.partition(t, PartitionId(p)).append(buf, scan(buf), round_)
    assert len(os.listdir(f"/proc/self/fd")) < 128
    store.close()
    for clean in (True, False):
        store = LocalStore(tmp / "data", config)  # the second open is unclean
        for t in topics:
            for p in range(60):
                plog = store.partition(t, PartitionId(p))
                assert len(plog.segments) == 4, len(plog.segments)
                for offset in range(4):
                    data = plog.read(Offset(offset), 1 << 20)
                    assert b"%s-%d-%d" % (t.encode(), p, offset) in data
        if clean:
            store.close()
    print("ok", flush=True)
    """
)


def run_python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )


def test_thousands_of_segment_files_under_128_fds(tmp_path: Path) -> None:
    done = run_python(SMALL_LIMIT, str(tmp_path))
    assert done.stdout.strip() == "ok", done.stderr[-3000:]


def test_open_files_stay_within_log_max_open_files(open_store: StoreFactory) -> None:
    baseline = len(os.listdir("/proc/self/fd"))
    store = open_store(log_max_open_files=20)
    store.create_topic(T, 50, {"segment.bytes": "200"})
    for _ in range(3):
        for p in range(50):
            append(store.partition(T, PartitionId(p)), batch(records(2, size=100)))
    assert len(os.listdir("/proc/self/fd")) <= baseline + 20 + 2


RAISE = textwrap.dedent(
    """
    import resource
    from floe.storage.local.limits import raise_open_files_limit
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 4096))
    print(raise_open_files_limit(), resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    """
)


def test_soft_open_files_limit_is_raised_to_the_hard_limit() -> None:
    done = run_python(RAISE)
    assert done.stdout.split() == ["4096", "4096"], done.stderr


def partitions(store: LocalStore) -> int:
    meta = store.topic(T)
    assert meta is not None
    return meta.partitions


def test_a_topic_failing_halfway_is_rolled_back(open_store: StoreFactory, tmp_path: Path) -> None:
    store = open_store()
    store.create_topic(TopicName("other"), 1, {})
    logs = tmp_path / "data" / "logs"
    (logs / "t-7").write_bytes(b"")  # partition 7's directory cannot be created
    with pytest.raises(StorageError):
        store.create_topic(T, 10, {})
    assert store.topic(T) is None
    assert not [p for p in logs.iterdir() if p.name.startswith("t-") and p.is_dir()]
    store.create_topic(T, 7, {})
    with pytest.raises(StorageError):  # growing the topic is rolled back the same way
        store.create_partitions(T, 10)
    assert partitions(store) == 7
    store.close()
    store = open_store()  # the next start is not broken by any of it
    assert partitions(store) == 7
    (logs / "t-7").unlink()
    store.create_partitions(T, 10)
    append(store.partition(T, PartitionId(9)), batch(records(1)))
    assert store.partition(T, PartitionId(9)).log_end_offset == 1
