"""The registry's in-memory state: what replaying ``_schemas`` gives.

:meth:`RegistryState.apply` is the only way the state changes, at start-up (replay of
the whole topic) and after each write alike, so recovery and normal operation run the
same code. Queries here never fail with domain errors; :mod:`.service` decides which
missing thing is an error.

Ownership: one :class:`RegistryState` belongs to one :class:`~.service.Registry` and is
used from the broker's event loop only.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson

from floe.registry.core.model import (
    CompatibilityLevel,
    JournalKey,
    Mode,
    SchemaId,
    SchemaVersion,
    Subject,
    schema_from_value,
)

log = logging.getLogger("floe.registry.state")


class RegistryState:
    """Subjects, versions, ids, configs and modes as plain data."""

    def __init__(self) -> None:
        self.subjects: dict[Subject, dict[int, SchemaVersion]] = {}
        self.configs: dict[Subject | None, CompatibilityLevel] = {}
        self.modes: dict[Subject | None, Mode] = {}
        self.next_id = 1

    # -- replay -------------------------------------------------------------------
    def apply_raw(self, key: bytes | None, value: bytes | None) -> None:
        """Apply one record as read from the topic; an undecodable one is logged and
        skipped (it can only come from a foreign writer)."""
        if key is None:
            return
        try:
            self.apply(JournalKey.decode(key), None if value is None else orjson.loads(value))
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("registry.record.skipped key=%r error=%s", key[:200], exc)

    def apply(self, key: JournalKey, value: dict[str, Any] | None) -> None:
        """Apply one decoded record (see :mod:`.model` for the format)."""
        if key.keytype == "SCHEMA":
            if key.subject is None or key.version is None:
                raise ValueError("SCHEMA key without subject or version")
            versions = self.subjects.setdefault(key.subject, {})
            if value is None:
                versions.pop(key.version, None)
                if not versions:
                    del self.subjects[key.subject]
                return
            sv = schema_from_value(value)
            versions[sv.version] = sv
            self.next_id = max(self.next_id, sv.schema_id + 1)
        elif key.keytype == "CONFIG":
            if value is None:
                self.configs.pop(key.subject, None)
            else:
                self.configs[key.subject] = CompatibilityLevel(value["compatibilityLevel"])
        elif key.keytype == "MODE":
            if value is None:
                self.modes.pop(key.subject, None)
            else:
                self.modes[key.subject] = Mode(value["mode"])
        elif key.keytype == "ID_HWM" and value is not None:
            self.next_id = max(self.next_id, int(value["next_id"]))

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
