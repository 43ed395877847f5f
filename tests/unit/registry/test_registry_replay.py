"""The registry opens whatever ``_schemas`` holds: records that are not JSON, have the
wrong shape or types, or name unknown types and levels are logged with their offsets,
counted in ``replay_skipped`` and skipped, without replacing the good value of their
key; a record failing to apply at run time never wedges the registry."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import orjson
import pytest

from floe.config.loader import load_config
from floe.registry.core.model import CompatibilityLevel, JournalKey, Subject
from floe.registry.core.service import NewSchema, Registry
from floe.registry.core.state import RegistryState
from floe.storage.journal import Journal
from floe.storage.local import LocalStore
from floe.types import TopicName

T = TypeVar("T")
TOPIC = TopicName("_schemas")
S = Subject("s")
SCHEMA = json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "string"}]})


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


class Env:
    def __init__(self, tmp_path: Path) -> None:
        toml = tmp_path / "floe.toml"
        toml.touch()
        self.config = load_config(toml, {}, {})
        self.data_dir = tmp_path / "data"
        self.store = LocalStore(self.data_dir, self.config)

    def registry(self) -> Registry:
        registry = Registry(Journal(self.store, TOPIC))
        registry.open()
        return registry

    def reopen(self) -> Registry:
        self.store.close()
        self.store = LocalStore(self.data_dir, self.config)
        return self.registry()


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    e = Env(tmp_path)
    yield e
    e.store.close()


def key(**fields: object) -> bytes:
    return orjson.dumps(fields)


def schema_value(**fields: object) -> bytes:
    base: dict[str, object] = {
        "subject": "s",
        "version": 1,
        "id": 1,
        "schemaType": "AVRO",
        "schema": SCHEMA,
        "references": [],
        "fingerprint": "",
        "deleted": False,
    }
    return orjson.dumps(base | fields)


def test_replay_skips_records_of_the_wrong_shape(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    r = env.registry()
    run(r.register(S, NewSchema(SCHEMA)))
    run(r.set_config(None, "FULL"))
    before = (r.state.subjects, r.state.configs, r.state.modes, r.state.next_id)
    v1 = key(keytype="SCHEMA", subject="s", version=1)
    garbage: list[tuple[bytes, bytes | None]] = [
        (b"not json", b"{}"),
        (b"[1, 2]", b"{}"),
        (b"\xff\xfe", None),
        (key(keytype="SCHEMA", subject=5, version=1), schema_value(subject=5)),
        (key(keytype="SCHEMA", subject="s", version="1"), schema_value()),
        (key(keytype="SCHEMA", subject="s"), schema_value()),
        (v1, b'{"subject": "s"}'),  # a good key, a value missing fields
        (v1, schema_value(version=2)),  # the value names another version
        (v1, schema_value(schemaType="COBOL")),
        (v1, schema_value(id="one")),
        (v1, schema_value(references=[{"name": "x"}])),
        (v1, b"[]"),
        (key(keytype="CONFIG", subject=None), b'{"compatibilityLevel": "SIDEWAYS"}'),
        (key(keytype="CONFIG", subject=["s"]), b'{"compatibilityLevel": "NONE"}'),
        (key(keytype="MODE", subject="s"), b'{"mode": 7}'),
        (key(keytype="ID_HWM"), b'{"next_id": "many"}'),
        (key(keytype="FROB"), b"{}"),
    ]
    Journal(env.store, TOPIC).append(garbage)
    caplog.set_level(logging.INFO)
    again = env.reopen()
    assert (again.state.subjects, again.state.configs, again.state.modes) == before[:3]
    assert again.state.next_id == before[3]
    assert again.subjects() == [S]
    assert again.version(S, 1).schema == SCHEMA
    assert again.replay_skipped == len(garbage)
    lines = [m for m in caplog.messages if m.startswith("journal.record.skipped topic=_schemas ")]
    assert len(lines) == len(garbage)
    assert lines[0].startswith("journal.record.skipped topic=_schemas partition=0 offset=3 ")
    assert f"replay_skipped={len(garbage)}" in caplog.text
    # it serves: a new schema gets the next id, and replays
    assert run(again.register(Subject("t"), NewSchema('"string"'))).schema_id == 2
    assert env.reopen().version(Subject("t"), 1).schema_id == 2


def test_a_record_failing_to_apply_at_run_time_does_not_wedge_the_registry(
    env: Env, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    real = RegistryState.apply

    def flaky(self: RegistryState, k: JournalKey, value: dict[str, Any] | None) -> None:
        if k.keytype == "MODE":  # a bug in apply
            raise RuntimeError("apply failed")
        real(self, k, value)

    r = env.registry()
    monkeypatch.setattr(RegistryState, "apply", flaky)
    run(r.set_mode(S, "READONLY"))
    assert r.replay_skipped == 1
    assert "journal.record.skipped topic=_schemas partition=0 offset=0 " in caplog.text
    assert run(r.set_config(S, "NONE")) is CompatibilityLevel.NONE
    assert r.get_config(S) is CompatibilityLevel.NONE
