"""The registry's in-memory state: what replaying ``_schemas`` gives.

:meth:`RegistryState.apply` is the only way the state changes, at start-up (replay of
the whole topic) and after each write alike, so recovery and normal operation run the
same code. Queries here never fail with domain errors; :mod:`.service` decides which
missing thing is an error.

Ownership: one :class:`RegistryState` belongs to one :class:`~.service.Registry` and is
used from the broker's event loop only.
"""

from __future__ import annotations

from typing import Any, TypeVar

from floe.registry.core.model import (
    CompatibilityLevel,
    JournalKey,
    JournalRecordError,
    Mode,
    SchemaId,
    SchemaVersion,
    Subject,
    json_object,
    schema_from_value,
)

_E = TypeVar("_E", CompatibilityLevel, Mode)


class RegistryState:
    """Subjects, versions, ids, configs and modes as plain data."""

    def __init__(self) -> None:
        self.subjects: dict[Subject, dict[int, SchemaVersion]] = {}
        self.configs: dict[Subject | None, CompatibilityLevel] = {}
        self.modes: dict[Subject | None, Mode] = {}
        self.next_id = 1

    # -- replay -------------------------------------------------------------------
    def apply_raw(self, key: bytes | None, value: bytes | None) -> None:
        """Apply one record as read from the topic.

        Raises:
            JournalRecordError: the record does not decode or apply (see :meth:`apply`).
        """
        if key is None:
            raise JournalRecordError("record without key")
        self.apply(JournalKey.decode(key), None if value is None else json_object(value))

    def apply(self, key: JournalKey, value: dict[str, Any] | None) -> None:
        """Apply one decoded record (see :mod:`.model` for the format). Validates
        before it changes anything, so a refused record leaves the state as it was.

        Raises:
            JournalRecordError: a field is missing, of the wrong type or unknown, or a
                schema value names another subject or version than its key.
        """
        if key.keytype == "SCHEMA":
            if key.subject is None or key.version is None:
                raise JournalRecordError("SCHEMA key without subject or version")
            if value is None:
                versions = self.subjects.get(key.subject, {})
                versions.pop(key.version, None)
                if not versions:
                    self.subjects.pop(key.subject, None)
                return
            sv = schema_from_value(value)
            if (sv.subject, sv.version) != (key.subject, key.version):
                raise JournalRecordError("SCHEMA value does not match its key")
            self.subjects.setdefault(key.subject, {})[sv.version] = sv
            self.next_id = max(self.next_id, sv.schema_id + 1)
        elif key.keytype == "CONFIG":
            if value is None:
                self.configs.pop(key.subject, None)
            else:
                self.configs[key.subject] = _member(CompatibilityLevel, value, "compatibilityLevel")
        elif key.keytype == "MODE":
            if value is None:
                self.modes.pop(key.subject, None)
            else:
                self.modes[key.subject] = _member(Mode, value, "mode")
        elif key.keytype == "ID_HWM":
            if value is not None:
                next_id = value.get("next_id")
                if type(next_id) is not int:
                    raise JournalRecordError("ID_HWM next_id is not an integer")
                self.next_id = max(self.next_id, next_id)
        else:
            raise JournalRecordError(f"unknown keytype {key.keytype!r:.40}")

    # -- queries ------------------------------------------------------------------
    def versions(self, subject: Subject, *, deleted: bool = False) -> list[SchemaVersion]:
        """The subject's versions in version order (soft-deleted ones only if asked)."""
        found = self.subjects.get(subject, {})
        return [found[v] for v in sorted(found) if deleted or not found[v].deleted]

    def subject_names(self, *, deleted: bool = False) -> list[Subject]:
        return sorted(s for s in self.subjects if self.versions(s, deleted=deleted))

    def by_id(self, schema_id: int) -> list[SchemaVersion]:
        """Every stored version (live first) that carries ``schema_id``."""
        found = [
            sv for vs in self.subjects.values() for sv in vs.values() if sv.schema_id == schema_id
        ]
        return sorted(found, key=lambda sv: (sv.deleted, sv.subject, sv.version))

    def id_for_fingerprint(self, fingerprint: str) -> SchemaId | None:
        for vs in self.subjects.values():
            for sv in vs.values():
                if sv.fingerprint == fingerprint:
                    return sv.schema_id
        return None

    def referenced_by(self, subject: Subject, version: int) -> list[SchemaId]:
        """Ids of live versions whose references point at ``subject`` ``version``."""
        return sorted(
            {
                sv.schema_id
                for vs in self.subjects.values()
                for sv in vs.values()
                if not sv.deleted
                and any(r.subject == subject and r.version == version for r in sv.references)
            }
        )

    def compatibility(self, subject: Subject | None) -> CompatibilityLevel:
        if subject is not None and subject in self.configs:
            return self.configs[subject]
        return self.configs.get(None, CompatibilityLevel.BACKWARD)

    def mode(self, subject: Subject | None) -> Mode:
        if subject is not None and subject in self.modes:
            return self.modes[subject]
        return self.modes.get(None, Mode.READWRITE)


def _member(kind: type[_E], value: dict[str, Any], name: str) -> _E:
    try:
        return kind(str(value.get(name)))
    except ValueError:
        raise JournalRecordError(f"unknown {name} {value.get(name)!r:.40}") from None
