"""Registry value objects and the record format of the ``_schemas`` topic.

Records (key and value are JSON; a ``None`` value is a tombstone):

- ``{"keytype":"SCHEMA","subject":S,"version":V}`` -> one subject version (its id,
  type, text, references, a canonical fingerprint and a ``deleted`` flag); a tombstone
  is a permanent delete.
- ``{"keytype":"CONFIG","subject":S|null}`` -> ``{"compatibilityLevel": L}``.
- ``{"keytype":"MODE","subject":S|null}`` -> ``{"mode": M}``.
- ``{"keytype":"ID_HWM"}`` -> ``{"next_id": N}``: written with every new id so ids are
  never reused, even once every version holding an id is permanently deleted and
  compacted away.

Decoding is strict (:class:`JournalRecordError` for anything else: other keytypes,
missing fields, wrong JSON types), so a foreign or damaged record is refused whole
instead of leaving values of the wrong type in the state.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, NewType

import orjson


class JournalRecordError(ValueError):
    """A ``_schemas`` record this version cannot use."""


KEYTYPES = ("SCHEMA", "CONFIG", "MODE", "ID_HWM")

SchemaId = NewType("SchemaId", int)
Subject = NewType("Subject", str)
MAX_VERSION = 2**31 - 1


class SchemaType(enum.StrEnum):
    AVRO = "AVRO"
    JSON = "JSON"
    PROTOBUF = "PROTOBUF"


class CompatibilityLevel(enum.StrEnum):
    NONE = "NONE"
    BACKWARD = "BACKWARD"
    BACKWARD_TRANSITIVE = "BACKWARD_TRANSITIVE"
    FORWARD = "FORWARD"
    FORWARD_TRANSITIVE = "FORWARD_TRANSITIVE"
    FULL = "FULL"
    FULL_TRANSITIVE = "FULL_TRANSITIVE"


class Mode(enum.StrEnum):
    READWRITE = "READWRITE"
    READONLY = "READONLY"
    IMPORT = "IMPORT"


@dataclass(frozen=True)
class Reference:
    """A named dependency: ``name`` as the schema text refers to it (an Avro full name,
    a JSON Schema ``$ref`` URI or a .proto import path), and the subject version that
    holds it."""

    name: str
    subject: Subject
    version: int

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "subject": self.subject, "version": self.version}


@dataclass(frozen=True)
class SchemaVersion:
    """One version of one subject, as stored."""

    subject: Subject
    version: int
    schema_id: SchemaId
    schema_type: SchemaType
    schema: str
    references: tuple[Reference, ...] = ()
    fingerprint: str = ""
    deleted: bool = False


@dataclass(frozen=True)
class JournalKey:
    keytype: str
    subject: Subject | None = None
    version: int | None = None

    def encode(self) -> bytes:
        out: dict[str, Any] = {"keytype": self.keytype}
        if self.keytype != "ID_HWM":
            out["subject"] = self.subject
        if self.version is not None:
            out["version"] = self.version
        return orjson.dumps(out)

    @staticmethod
    def decode(data: bytes) -> JournalKey:
        """Raises:
        JournalRecordError: not a key this version writes.
        """
        raw = json_object(data)
        keytype = raw.get("keytype")
        if keytype not in KEYTYPES:
            raise JournalRecordError(f"unknown keytype {keytype!r:.40}")
        subject, version = raw.get("subject"), raw.get("version")
        if subject is not None and type(subject) is not str:
            raise JournalRecordError("key subject is not a string")
        if version is not None and type(version) is not int:
            raise JournalRecordError("key version is not an integer")
        return JournalKey(keytype, None if subject is None else Subject(subject), version)


@dataclass
class Change:
    """Records one write appends, as one batch (applied in order on replay)."""

    records: list[tuple[JournalKey, dict[str, Any] | None]] = field(default_factory=list)

    def add(self, key: JournalKey, value: dict[str, Any] | None) -> None:
        self.records.append((key, value))

    def encoded(self) -> list[tuple[bytes, bytes | None]]:
        return [(k.encode(), None if v is None else orjson.dumps(v)) for k, v in self.records]


def schema_key(subject: Subject, version: int) -> JournalKey:
    return JournalKey("SCHEMA", subject, version)


def schema_value(sv: SchemaVersion) -> dict[str, Any]:
    return {
        "subject": sv.subject,
        "version": sv.version,
        "id": sv.schema_id,
        "schemaType": sv.schema_type.value,
        "schema": sv.schema,
        "references": [r.to_json() for r in sv.references],
        "fingerprint": sv.fingerprint,
        "deleted": sv.deleted,
    }


def json_object(data: bytes) -> dict[str, Any]:
    """Raises:
    JournalRecordError: ``data`` is not a JSON object.
    """
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise JournalRecordError(f"not JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise JournalRecordError("not a JSON object")
    return raw


def _field(value: dict[str, Any], name: str, kind: type, default: Any = None) -> Any:
    got = value.get(name, default)
    if type(got) is not kind:
        raise JournalRecordError(f"{name} is not a {kind.__name__}: {got!r:.40}")
    return got


def _reference(raw: object) -> Reference:
    if not isinstance(raw, dict):
        raise JournalRecordError("a reference is not a JSON object")
    return Reference(
        _field(raw, "name", str), Subject(_field(raw, "subject", str)), _field(raw, "version", int)
    )


def schema_from_value(value: dict[str, Any]) -> SchemaVersion:
    """Raises:
    JournalRecordError: a field is missing, of the wrong type, or unknown.
    """
    try:
        schema_type = SchemaType(value.get("schemaType", "AVRO"))
    except ValueError:
        raise JournalRecordError(f"unknown schemaType {value.get('schemaType')!r:.40}") from None
    return SchemaVersion(
        subject=Subject(_field(value, "subject", str)),
        version=_field(value, "version", int),
        schema_id=SchemaId(_field(value, "id", int)),
        schema_type=schema_type,
        schema=_field(value, "schema", str),
        references=tuple(_reference(r) for r in _field(value, "references", list, [])),
        fingerprint=_field(value, "fingerprint", str, ""),
        deleted=_field(value, "deleted", bool, False),
    )
