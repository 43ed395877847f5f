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
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, NewType

import orjson

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
        raw = orjson.loads(data)
        return JournalKey(raw["keytype"], raw.get("subject"), raw.get("version"))


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


def schema_from_value(value: dict[str, Any]) -> SchemaVersion:
    return SchemaVersion(
        subject=Subject(value["subject"]),
        version=int(value["version"]),
        schema_id=SchemaId(int(value["id"])),
        schema_type=SchemaType(value.get("schemaType", "AVRO")),
        schema=value["schema"],
        references=tuple(
            Reference(r["name"], Subject(r["subject"]), int(r["version"]))
            for r in value.get("references", [])
        ),
        fingerprint=value.get("fingerprint", ""),
        deleted=bool(value.get("deleted", False)),
    )
