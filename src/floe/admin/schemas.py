"""Schema Registry browsing for the admin facade: subjects, versions, schema text,
compatibility levels and checks, a diff between two versions, and decoding of
Confluent wire-format payloads for the console's message view.

Reads the in-process :class:`~floe.registry.core.service.Registry` (owned by the
broker's event loop); changes nothing. Registry errors keep their Confluent messages
and become :class:`NotFoundError` / :class:`BadRequestError` here.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from floe.admin.errors import BadRequestError, NotFoundError, UnavailableError
from floe.registry.core.errors import (
    InvalidSchemaError,
    InvalidVersionError,
    RegistryError,
    SchemaNotFoundError,
    SubjectNotFoundError,
    VersionNotFoundError,
)
from floe.registry.core.model import SchemaType, SchemaVersion, Subject

if TYPE_CHECKING:
    from floe.registry.core.service import Registry


@dataclass(frozen=True)
class SubjectSummary:
    subject: str
    versions: int
    latest_version: int
    latest_id: int
    schema_type: str
    compatibility: str


@dataclass(frozen=True)
class SchemaDetail:
    """One version; ``schema`` is the stored text, ``pretty`` the same indented (JSON
    schemas: Avro and JSON Schema) for reading and diffing."""

    subject: str
    version: int
    id: int
    schema_type: str
    schema: str
    pretty: str
    references: list[dict[str, Any]]


@dataclass(frozen=True)
class SubjectDetail:
    subject: str
    compatibility: str
    versions: list[SchemaDetail]


@dataclass(frozen=True)
class SchemaDiff:
    subject: str
    from_version: int
    to_version: int
    diff: str
    """A unified diff of the two versions' ``pretty`` texts (empty: identical)."""


@dataclass(frozen=True)
class CompatibilityResult:
    compatible: bool
    level: str
    messages: list[str]


def pretty(schema_type: str, text: str) -> str:
    if schema_type == SchemaType.PROTOBUF.value:
        return text
    try:
        return json.dumps(json.loads(text), indent=2, sort_keys=False)
    except ValueError:
        return text


def _detail(sv: SchemaVersion) -> SchemaDetail:
    kind = sv.schema_type.value
    return SchemaDetail(
        sv.subject,
        sv.version,
        int(sv.schema_id),
        kind,
        sv.schema,
        pretty(kind, sv.schema),
        [r.to_json() for r in sv.references],
    )


class SchemaService:
    """Registry views over the in-process registry (``None`` when the registry is
    disabled: listings are empty, details 503). No state of its own."""

    def __init__(self, registry: Registry | None) -> None:
        self.registry = registry

    def _reg(self) -> Registry:
        if self.registry is None:
            raise UnavailableError("the schema registry is disabled (registry.enable=false)")
        return self.registry

    def subjects(self) -> list[SubjectSummary]:
        if self.registry is None:
            return []
        reg = self.registry
        out = []
        for subject in sorted(reg.subjects()):
            try:
                versions = reg.versions(subject)
            except SubjectNotFoundError:
                continue
            latest = versions[-1]
            out.append(
                SubjectSummary(
                    subject,
                    len(versions),
                    latest.version,
                    int(latest.schema_id),
                    latest.schema_type.value,
                    reg.get_config(subject, default_to_global=True).value,
                )
            )
        return out

    def subject(self, subject: str) -> SubjectDetail:
        """Raises:
        NotFoundError: no such subject. UnavailableError: no registry.
        """
        reg = self._reg()
        try:
            versions = reg.versions(Subject(subject))
        except SubjectNotFoundError as exc:
            raise NotFoundError(str(exc)) from None
        level = reg.get_config(Subject(subject), default_to_global=True).value
        return SubjectDetail(subject, level, [_detail(sv) for sv in versions])

    def version(self, subject: str, version: str) -> SchemaDetail:
        """One version (``latest`` for the newest).

        Raises:
            NotFoundError: no such subject or version. BadRequestError: a bad version.
        """
        reg = self._reg()
        try:
            return _detail(reg.version(Subject(subject), version))
        except (SubjectNotFoundError, VersionNotFoundError) as exc:
            raise NotFoundError(str(exc)) from None
        except InvalidVersionError as exc:
            raise BadRequestError(str(exc)) from None

    def diff(self, subject: str, old: str, new: str) -> SchemaDiff:
        """A unified diff between two versions.

        Raises:
            NotFoundError, BadRequestError: as :meth:`version`.
        """
        a, b = self.version(subject, old), self.version(subject, new)
        lines = difflib.unified_diff(
            a.pretty.splitlines(),
            b.pretty.splitlines(),
            f"{subject} v{a.version}",
            f"{subject} v{b.version}",
            lineterm="",
        )
        return SchemaDiff(subject, a.version, b.version, "\n".join(lines))

    def check(self, subject: str, schema: str, schema_type: str) -> CompatibilityResult:
        """Whether ``schema`` could be registered under ``subject`` (its level).

        Raises:
            NotFoundError: no such subject. BadRequestError: an invalid schema or type.
        """
        from floe.registry.core.service import NewSchema

        reg = self._reg()
        try:
            kind = SchemaType(schema_type.upper())
        except ValueError:
            raise BadRequestError(f"unknown schema type {schema_type!r}") from None
        try:
            problems = reg.check(Subject(subject), None, NewSchema(schema, kind, ()))
        except SubjectNotFoundError as exc:
            raise NotFoundError(str(exc)) from None
        except (InvalidSchemaError, RegistryError) as exc:
            raise BadRequestError(str(exc)) from None
        level = reg.get_config(Subject(subject), default_to_global=True).value
        return CompatibilityResult(not problems, level, problems)

    def decode(self, payload: bytes) -> tuple[str, str, int | None] | None:
        """A Confluent wire-format payload as JSON text: ``(text, format, schema id)``;
        ``None`` when it is not one or does not decode with its registered schema."""
        from floe.tabletopic.convert import wire

        if self.registry is None or len(payload) < wire.HEADER_SIZE or payload[0] != wire.MAGIC:
            return None
        try:
            schema_id, body = wire.split(payload)
            sv = self.registry.by_id(schema_id)
            parsed = self.registry.parsed(sv)
            value = _decode(sv.schema_type, parsed, body)
        except (SchemaNotFoundError, RegistryError, ValueError):
            return None
        except Exception:  # a codec refusing a construct: show the bytes instead
            return None
        text = json.dumps(value, default=str, ensure_ascii=False)
        return text, sv.schema_type.value.lower(), int(schema_id)


def _decode(kind: SchemaType, parsed: Any, body: memoryview) -> Any:
    from floe.tabletopic.convert import wire
    from floe.tabletopic.convert.avro import AvroCodec
    from floe.tabletopic.convert.json_schema import JsonCodec
    from floe.tabletopic.convert.protobuf import ProtobufCodec, message_name

    if kind is SchemaType.AVRO:
        return AvroCodec(parsed).decode(body)
    if kind is SchemaType.JSON:
        return JsonCodec(parsed).decode(body)
    indexes, message = wire.message_indexes(body)
    return ProtobufCodec(parsed, message_name(parsed, indexes)).decode(message)
