"""Which schema ids a table holds, and how workers decode each part (schemas.py).

The by_latest_schema rules: a latest schema the table cannot represent (an incompatible
change, a construct the layout refuses) makes every record decoded with it a conversion
error whose reason says why and how to move on, so the errors tolerance decides (never a
round retried forever); a newer, representable latest is used by the next round; only
"nothing to decode with yet" stays :class:`SchemaUnavailableError`.
"""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro
import pytest
from convert_helpers import PARTITION, records
from pyiceberg.schema import Schema

from floe.registry.core.model import SchemaType
from floe.tabletopic.convert import (
    Converter,
    ConvertType,
    EvolutionPlan,
    codec_for,
    table_schema,
)
from floe.tabletopic.schemas import (
    RawSchema,
    RegistrySnapshot,
    SchemaUnavailableError,
    candidate_ids,
    first_schema,
    fit_table,
    part_spec,
)

SUBJECT = "clicks-value"
TABLE = "default.clicks"
LATEST = ConvertType.BY_LATEST_SCHEMA
STRING: tuple[ConvertType, str | None, list[int], set[int]] = (ConvertType.STRING, None, [], set())


def avro_rec(**fields: Any) -> str:
    items = [{"name": n, "type": t} for n, t in fields.items()]
    return json.dumps({"type": "record", "name": "R", "fields": items})


def json_obj(**properties: Any) -> str:
    return json.dumps({"type": "object", "properties": properties})


def avro_bytes(text: str, value: Any) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(json.loads(text)), value)
    return buf.getvalue()


def snapshot(kind: SchemaType, *texts: str, subject: str = SUBJECT) -> RegistrySnapshot:
    """``texts`` registered as versions 1, 2, ... (ids 1, 2, ...) of ``subject``."""
    schemas = {i: RawSchema(i, kind, t) for i, t in enumerate(texts, start=1)}
    return RegistrySnapshot(schemas, {subject: tuple(schemas)}, len(texts) + 1)


def table_of(snap: RegistrySnapshot, schema_id: int) -> Schema:
    """The flattened table created from schema ``schema_id`` (a string key)."""
    from pyiceberg.types import StringType

    return table_schema(codec_for(snap.parse(schema_id)).source, StringType(), flatten=True)


def no_evolution(plan: EvolutionPlan) -> Schema:
    raise AssertionError(f"the table must not change: {plan}")


# (schema type, v1, latest v2, a v2 payload, what the reason must say)
REFUSED = {
    "json integer -> number": (
        SchemaType.JSON,
        json_obj(n={"type": "integer"}),
        json_obj(n={"type": "number"}),
        b'{"n": 1.5}',
        "n: long cannot change to double",
    ),
    "avro long -> double": (
        SchemaType.AVRO,
        avro_rec(n="long"),
        avro_rec(n="double"),
        avro_bytes(avro_rec(n="double"), {"n": 1.5}),
        "n: long cannot change to double",
    ),
    "avro string -> bytes": (
        SchemaType.AVRO,
        avro_rec(n="string"),
        avro_rec(n="bytes"),
        avro_bytes(avro_rec(n="bytes"), {"n": b"x"}),
        "n: string cannot change to binary",
    ),
    "avro union the layout refuses": (
        SchemaType.AVRO,
        avro_rec(n="long"),
        avro_rec(n=["long", "string"]),
        avro_bytes(avro_rec(n=["long", "string"]), {"n": "x"}),
        "n: a union of several non-null types",
    ),
}


@pytest.mark.parametrize("case", list(REFUSED), ids=list(REFUSED))
def test_refused_latest_schema_makes_its_records_conversion_errors(case: str) -> None:
    kind, v1, v2, payload, why = REFUSED[case]
    snap = snapshot(kind, v1, v2)
    table = table_of(snap, 1)
    ids, unknown = candidate_ids(snap, LATEST, SUBJECT)
    assert ids == [2]

    value, key = fit_table(
        table,
        no_evolution,
        snap,
        (LATEST, None, ids, unknown),
        STRING,
        flatten=True,
        table=TABLE,
        subjects={"value": SUBJECT},
    )

    assert value.latest == 2 and not value.covered and set(value.refused) == {2}
    reason = value.refused[2]
    assert reason.startswith(f"value schema id 2 (latest of subject {SUBJECT}) cannot be written")
    assert f"to table {TABLE}: " in reason and why in reason
    assert "register" in reason and "table.topic.errors.tolerance" in reason
    assert "\n" not in reason
    conv = Converter(table, part_spec(value, snap), part_spec(key, snap), flatten=True)
    result = conv.convert(PARTITION, records(payload, None, payload))
    assert result.batch.column("_kafka_metadata").field("offset").to_pylist() == [1]  # tombstone
    assert [(int(e.offset), e.reason) for e in result.errors] == [(0, reason), (2, reason)]


def test_a_newer_representable_latest_is_used_by_the_next_round() -> None:
    v1 = json_obj(n={"type": "integer"})
    v2 = json_obj(n={"type": "number"})
    v3 = json_obj(n={"type": "integer"}, m={"type": "string"})
    snap = snapshot(SchemaType.JSON, v1, v2, v3)
    evolved: list[EvolutionPlan] = []

    def evolve(plan: EvolutionPlan) -> Schema:
        evolved.append(plan)
        return table_of(snap, 3)

    ids, unknown = candidate_ids(snap, LATEST, SUBJECT)
    value, key = fit_table(
        table_of(snap, 1), evolve, snap, (LATEST, None, ids, unknown), STRING, flatten=True
    )
    assert (value.latest, value.covered, dict(value.refused)) == (3, frozenset({3}), {})
    assert len(evolved) == 1
    conv = Converter(table_of(snap, 3), part_spec(value, snap), part_spec(key, snap), flatten=True)
    result = conv.convert(PARTITION, records(b'{"n": 7, "m": "x"}'))
    assert result.errors == ()
    assert result.batch.select(["n", "m"]).to_pylist() == [{"n": 7, "m": "x"}]


def test_a_refused_latest_key_names_the_key_and_finds_its_subject() -> None:
    snap = snapshot(SchemaType.AVRO, '"string"', '"bytes"', subject="clicks-key")
    from pyiceberg.types import StringType

    table = table_schema(StringType(), codec_for(snap.parse(1)).source, flatten=False)
    value, key = fit_table(
        table, no_evolution, snap, STRING, (LATEST, None, [2], set()), flatten=False
    )
    reason = key.refused[2]
    assert reason.startswith("key schema id 2 (latest of subject clicks-key) cannot be written")
    assert "string cannot change to binary" in reason
    conv = Converter(table, part_spec(value, snap), part_spec(key, snap), flatten=False)
    result = conv.convert(PARTITION, records(b"v", key=avro_bytes('"bytes"', b"k")))
    assert [e.reason for e in result.errors] == [reason]


def test_one_id_latest_of_several_subjects_is_named_by_the_part_subject() -> None:
    """Two subjects that registered the same text share its id: the part's own
    subject is named when given, else all of them (never a wrong one)."""
    v1, v2 = avro_rec(n="long"), avro_rec(n="double")
    schemas = {i: RawSchema(i, SchemaType.AVRO, t) for i, t in ((1, v1), (2, v2))}
    snap = RegistrySnapshot(schemas, {"a-value": (1, 2), "b-value": (1, 2)}, 3)
    latest = (LATEST, None, [2], set[int]())

    def reason(**names: Any) -> str:
        value, _ = fit_table(
            table_of(snap, 1), no_evolution, snap, latest, STRING, flatten=True, **names
        )
        return value.refused[2]

    assert "(latest of subjects a-value, b-value) cannot be written to the table:" in reason()
    own = reason(subjects={"value": "b-value"}, table="default.b")
    assert "(latest of subject b-value) cannot be written to table default.b:" in own


def test_nothing_to_decode_with_yet_stays_unavailable() -> None:
    with pytest.raises(SchemaUnavailableError, match="has no registered schema"):
        candidate_ids(RegistrySnapshot(), LATEST, SUBJECT)


def test_no_table_yet_and_a_refused_latest_says_what_to_do() -> None:
    """Without a table there is nothing to write the skipped offsets to: the round waits
    (status failing, with this reason) until a schema the layout accepts is registered."""
    snap = snapshot(SchemaType.AVRO, avro_rec(n=["long", "string"]))
    with pytest.raises(SchemaUnavailableError) as caught:
        first_schema(snap, (LATEST, None, [1]), (ConvertType.STRING, None, []), flatten=True)
    message = str(caught.value)
    assert message.startswith(f"value schema id 1 (latest of subject {SUBJECT}) cannot create")
    assert "a union of several non-null types" in message
    assert "register" in message
