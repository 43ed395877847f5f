"""Helpers for local-store tests: real files under tmp_path, batches built with the
record codec."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from floe.config.loader import BrokerConfig, load_config
from floe.protocol.batch import scan
from floe.protocol.records import Record, encode_batch
from floe.storage.interface import AppendResult
from floe.storage.local import LocalPartitionLog, LocalStore
from floe.types import TopicName

T = TopicName("t")
NOW = 1_700_000_000_000


def broker_config(tmp: Path, **overrides: object) -> BrokerConfig:
    toml = tmp / "floe.toml"
    toml.touch()
    return load_config(toml, {k.replace("_", "."): v for k, v in overrides.items()}, {})


def records(
    n: int, *, start_ts: int = NOW, key: bytes | None = b"k", size: int = 10
) -> list[Record]:
    return [
        Record(i, start_ts + i, key if key is None else key + str(i).encode(), b"v" * size)
        for i in range(n)
    ]


def batch(recs: Sequence[Record], compression: int = 0) -> bytes:
    return encode_batch(recs, base_offset=0, compression=compression)


def append(plog: LocalPartitionLog, *batches: bytes, now_ms: int = NOW) -> AppendResult:
    buf = bytearray(b"".join(batches))
    return plog.append(buf, scan(buf), now_ms)


def kv(key: bytes, value: bytes | None, ts: int = NOW) -> bytes:
    return batch([Record(0, ts, key, value)])


StoreFactory = Callable[..., LocalStore]


@pytest.fixture
def open_store(tmp_path: Path) -> Iterator[StoreFactory]:
    """Open (or reopen) a store on ``tmp_path/data``; every store is closed at the
    end (closing twice is a no-op). Opening a second store without closing the first
    simulates kill -9."""
    opened: list[LocalStore] = []

    def factory(**overrides: object) -> LocalStore:
        store = LocalStore(tmp_path / "data", broker_config(tmp_path, **overrides))
        opened.append(store)
        return store

    yield factory
    for store in opened:
        store.close()
