"""Storage limits on a real ``floe up``: 400 partitions with thousands of segment files
under ``ulimit -n 1024`` (soft and hard), produced to, restarted (clean and kill -9) under
the same limit, everything readable."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from helpers.admin import create_topic, watermarks
from helpers.broker import Broker, floe_bin
from helpers.clients import confluent_consume, confluent_produce
from helpers.records import Record

LIMIT = 1024
TOPICS, PARTITIONS, ROUNDS = 4, 100, 3


def limited_floe(tmp_path: Path) -> str:
    """An executable that runs ``floe`` with RLIMIT_NOFILE = 1024 (soft and hard)."""
    wrapper = tmp_path / "floe-ulimit"
    real = floe_bin()
    wrapper.write_text(
        f"#!{sys.executable}\n"
        "import os, resource, sys\n"
        f"resource.setrlimit(resource.RLIMIT_NOFILE, ({LIMIT}, {LIMIT}))\n"
        f"os.execv({real!r}, [{real!r}, *sys.argv[1:]])\n"
    )
    wrapper.chmod(0o755)
    return str(wrapper)


def value(topic: str, partition: int, round_: int) -> bytes:
    return f"{topic}/{partition}/{round_}/".encode() * 40  # ~800 bytes: a segment each


def open_files(b: Broker) -> int:
    assert b.proc is not None
    return len(os.listdir(f"/proc/{b.proc.pid}/fd"))


def read_everything(b: Broker, topics: list[str]) -> None:
    for topic in topics:
        marks = watermarks(b.bootstrap, topic, PARTITIONS)
        assert marks == {p: (0, ROUNDS) for p in range(PARTITIONS)}
        got = confluent_consume(b.bootstrap, topic, {p: ROUNDS for p in range(PARTITIONS)})
        assert sorted((r.partition or 0, r.offset or 0, r.value) for r in got) == [
            (p, i, value(topic, p, i)) for p in range(PARTITIONS) for i in range(ROUNDS)
        ]


@pytest.mark.timeout(600)
def test_400_partitions_under_ulimit_1024_survive_restarts(
    broker_factory: Callable[..., Broker], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLOE_BIN", limited_floe(tmp_path))
    b = broker_factory()
    assert b.proc is not None
    limits = Path(f"/proc/{b.proc.pid}/limits").read_text()
    assert f"Max open files            {LIMIT}                 {LIMIT}" in limits
    topics = [
        create_topic(b.bootstrap, partitions=PARTITIONS, config={"segment.bytes": "1024"})
        for _ in range(TOPICS)
    ]
    for round_ in range(ROUNDS):  # each round's batch rolls a new segment per partition
        for topic in topics:
            confluent_produce(
                b.bootstrap,
                topic,
                [Record(None, value(topic, p, round_), partition=p) for p in range(PARTITIONS)],
            )
    files = sum(1 for f in (b.data_dir / "logs").rglob("*") if f.is_file())
    assert files > 2 * LIMIT  # segments, indexes, snapshots: far more files than descriptors
    assert open_files(b) < LIMIT
    read_everything(b, topics)
    b.restart()  # clean: SIGTERM, then the same limit again
    read_everything(b, topics)
    b.kill()
    b.start()  # unclean
    read_everything(b, topics)
    assert "Too many open files" not in b.stderr_text()
