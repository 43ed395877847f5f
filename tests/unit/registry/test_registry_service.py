"""The Registry on a real store: ids, versions, deletes, modes, configs, references,
and that reopening (replaying ``_schemas``) gives back the same state."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import pytest

from floe.registry.core import errors as e
from floe.registry.core.model import CompatibilityLevel, Mode, Reference, SchemaType, Subject
from floe.registry.core.service import NewSchema, Registry

T = TypeVar("T")
RegistryFactory = Callable[[], Registry]  # the open_registry fixture
S1, S2 = Subject("s1"), Subject("s2")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def rec(*fields: str) -> NewSchema:
    return NewSchema(
        json.dumps(
            {
                "type": "record",
                "name": "R",
                "fields": [{"name": f, "type": "string", "default": ""} for f in fields],
            }
        )
    )


def snapshot(r: Registry) -> object:
    return (r.state.subjects, r.state.configs, r.state.modes, r.state.next_id)


def test_ids_versions_and_identity(open_registry: RegistryFactory) -> None:
    r = open_registry()
    a = run(r.register(S1, rec("a")))
    assert (a.schema_id, a.version) == (1, 1)
    again = run(r.register(S1, NewSchema(rec("a").schema.replace(",", ", "))))
    assert (again.schema_id, again.version) == (1, 1)  # identical: no new version
    other = run(r.register(S2, rec("a")))
    assert (other.schema_id, other.version) == (1, 1)  # same schema, same id
    b = run(r.register(S1, rec("a", "b")))
    assert (b.schema_id, b.version) == (2, 2)
    assert r.lookup(S1, rec("a")).version == 1
    with pytest.raises(e.SchemaNotFoundError):
        r.lookup(S1, rec("zzz"))
    assert r.version(S1, "latest").version == 2
    with pytest.raises(e.InvalidVersionError):
        r.version(S1, "0")
    with pytest.raises(e.VersionNotFoundError):
        r.version(S1, 7)
    with pytest.raises(e.SubjectNotFoundError):
        r.version(Subject("nope"), 1)
    before = snapshot(r)
    assert snapshot(open_registry()) == before


def test_incompatible_and_config(open_registry: RegistryFactory) -> None:
    r = open_registry()
    run(
        r.register(
            S1, NewSchema('{"type":"record","name":"R","fields":[{"name":"a","type":"int"}]}')
        )
    )
    breaking = NewSchema('{"type":"record","name":"R","fields":[{"name":"a","type":"string"}]}')
    with pytest.raises(e.IncompatibleSchemaError):
        run(r.register(S1, breaking))
    assert r.check(S1, None, breaking)
    with pytest.raises(e.SubjectCompatibilityNotConfiguredError):
        r.get_config(S1)
    assert r.get_config(S1, default_to_global=True) is CompatibilityLevel.BACKWARD
    run(r.set_config(S1, "none"))
    assert run(r.register(S1, breaking)).version == 2
    with pytest.raises(e.InvalidCompatibilityLevelError):
        run(r.set_config(None, "SIDEWAYS"))
    run(r.set_config(None, "FULL"))
    r2 = open_registry()
    assert r2.get_config(S1) is CompatibilityLevel.NONE
    assert r2.get_config(None) is CompatibilityLevel.FULL
    assert run(r2.delete_config(S1)) is CompatibilityLevel.NONE
    assert r2.get_config(S1, default_to_global=True) is CompatibilityLevel.FULL


def test_soft_then_permanent_delete_and_ids_never_reused(open_registry: RegistryFactory) -> None:
    r = open_registry()
    run(r.register(S1, rec("a")))
    run(r.register(S1, rec("a", "b")))
    with pytest.raises(e.VersionNotSoftDeletedError):
        run(r.delete_version(S1, 1, permanent=True))
    assert run(r.delete_version(S1, 1)) == 1
    with pytest.raises(e.VersionSoftDeletedError):
        run(r.delete_version(S1, 1))
    assert [sv.version for sv in r.versions(S1)] == [2]
    assert [sv.version for sv in r.versions(S1, deleted=True)] == [1, 2]
    with pytest.raises(e.SubjectNotSoftDeletedError):
        run(r.delete_subject(S1, permanent=True))
    assert run(r.delete_subject(S1)) == [2]
    with pytest.raises(e.SubjectSoftDeletedError):
        run(r.delete_subject(S1))
    with pytest.raises(e.SubjectNotFoundError):
        r.versions(S1)
    assert run(r.delete_subject(S1, permanent=True)) == [1, 2]
    with pytest.raises(e.SchemaNotFoundError):
        r.by_id(1)
    r = open_registry()
    assert run(r.register(S1, rec("c"))).schema_id == 3  # 1 and 2 are never handed out again
    assert run(r.register(S1, rec("a"))).schema_id == 4


def test_references_block_deletes(open_registry: RegistryFactory) -> None:
    r = open_registry()
    run(
        r.register(
            Subject("addr"),
            NewSchema(
                '{"type":"record","name":"Address","namespace":"x","fields":[{"name":"s","type":"string"}]}'
            ),
        )
    )
    user = NewSchema(
        '{"type":"record","name":"User","fields":[{"name":"a","type":"x.Address"}]}',
        SchemaType.AVRO,
        (Reference("x.Address", Subject("addr"), 1),),
    )
    sv = run(r.register(S1, user))
    assert r.referenced_by(Subject("addr"), 1) == [sv.schema_id]
    with pytest.raises(e.ReferenceExistsError):
        run(r.delete_subject(Subject("addr")))
    bad = NewSchema(user.schema, SchemaType.AVRO, (Reference("x.Address", Subject("addr"), 9),))
    with pytest.raises(e.InvalidSchemaError, match="not found"):
        run(r.register(S2, bad))
    assert open_registry().parsed(open_registry().version(S1, 1)).canonical()


def test_modes(open_registry: RegistryFactory) -> None:
    r = open_registry()
    with pytest.raises(e.OperationNotPermittedError, match="IMPORT"):
        run(r.register(S1, rec("a"), schema_id=50))
    run(r.set_mode(None, "IMPORT"))
    sv = run(r.register(S1, rec("a"), schema_id=50, version=3))
    assert (sv.schema_id, sv.version) == (50, 3)
    with pytest.raises(e.IdConflictError):
        run(r.register(S2, rec("b"), schema_id=50))
    run(r.set_mode(None, "READWRITE"))
    assert run(r.register(S2, rec("b"))).schema_id == 51
    run(r.set_mode(S1, "READONLY"))
    with pytest.raises(e.OperationNotPermittedError, match="read-only"):
        run(r.register(S1, rec("a", "b")))
    with pytest.raises(e.OperationNotPermittedError):
        run(r.delete_subject(S1))
    with pytest.raises(e.OperationNotPermittedError, match="existing subjects"):
        run(r.set_mode(None, "IMPORT"))
    with pytest.raises(e.InvalidModeError):
        run(r.set_mode(None, "SLEEPY"))
    assert open_registry().get_mode(S1) is Mode.READONLY
    with pytest.raises(e.SubjectModeNotConfiguredError):
        open_registry().get_mode(S2)


def test_parallel_registrations_are_serialized(open_registry: RegistryFactory) -> None:
    r = open_registry()

    async def many() -> list[int]:
        same = [r.register(S1, rec("a")) for _ in range(10)]
        different = [r.register(Subject(f"d{i}"), rec(f"f{i}")) for i in range(10)]
        return [sv.schema_id for sv in await asyncio.gather(*same, *different)]

    ids = run(many())
    assert set(ids[:10]) == {1}
    assert sorted(ids[10:]) == list(range(2, 12))
