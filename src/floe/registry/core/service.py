"""The registry's operations: what the REST API (and anything else) calls.

Every write runs under one ``asyncio.Lock``: it plans its records from the current
state, appends them to ``_schemas`` as one batch, waits until they are durable, then
applies them through :meth:`RegistryState.apply` (the replay function) before
answering, so a client reads its own write at once and a restart rebuilds exactly the
same state. A record that does not decode or apply, at start-up or after a write, is
logged with its offset, counted (``replay_skipped``) and skipped: the registry always
opens and keeps serving.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace

from floe.registry.core import compatibility
from floe.registry.core.errors import (
    IdConflictError,
    IncompatibleSchemaError,
    InvalidCompatibilityLevelError,
    InvalidModeError,
    InvalidSchemaError,
    InvalidVersionError,
    OperationNotPermittedError,
    ReferenceExistsError,
    RegistryError,
    SchemaNotFoundError,
    SubjectCompatibilityNotConfiguredError,
    SubjectModeNotConfiguredError,
    SubjectNotFoundError,
    SubjectNotSoftDeletedError,
    SubjectSoftDeletedError,
    VersionNotFoundError,
    VersionNotSoftDeletedError,
    VersionSoftDeletedError,
)
from floe.registry.core.model import (
    MAX_VERSION,
    Change,
    CompatibilityLevel,
    JournalKey,
    Mode,
    Reference,
    SchemaId,
    SchemaType,
    SchemaVersion,
    Subject,
    schema_key,
    schema_value,
)
from floe.registry.core.schemas import Dependency, ParsedSchema, fingerprint, parse
from floe.registry.core.state import RegistryState
from floe.storage.journal import SKIP_LOG_LIMIT, Journal, reason_of
from floe.types import TopicName

log = logging.getLogger("floe.registry")

TOPIC = TopicName("_schemas")
"""The registry's journal."""


class ReadOnlyRegistryError(RegistryError):
    """A write asked of a registry that follows another broker's ``_schemas``."""


_MAX_REFERENCE_DEPTH = 32


@dataclass(frozen=True)
class NewSchema:
    """A schema as a client submits it."""

    schema: str
    schema_type: SchemaType = SchemaType.AVRO
    references: tuple[Reference, ...] = ()


def parse_version(version: str | int) -> int | None:
    """A version path segment: a number in [1, 2^31-1], or ``latest``/``-1`` (None).

    Raises:
        InvalidVersionError: anything else.
    """
    text = str(version)
    if text in ("latest", "-1"):
        return None
    try:
        number = int(text)
    except ValueError:
        raise InvalidVersionError(version) from None
    if not 1 <= number <= MAX_VERSION:
        raise InvalidVersionError(version)
    return number


def _compatibility_level(level: object) -> CompatibilityLevel:
    if not isinstance(level, str) or level.upper() not in CompatibilityLevel.__members__:
        raise InvalidCompatibilityLevelError(level)
    return CompatibilityLevel(level.upper())


def _mode(mode: object) -> Mode:
    if not isinstance(mode, str) or mode.upper() not in Mode.__members__:
        raise InvalidModeError(mode)
    return Mode(mode.upper())


class Registry:
    """Subjects, versions, ids, configs and modes, stored on ``_schemas``.

    Ownership: created by the composition root once the store is open; owns its
    :class:`RegistryState`, its parsed-schema cache and the write lock, all used from
    the broker's event loop only. :meth:`open` replays the journal; there is nothing
    to close (the journal's log belongs to the store).

    Without a journal (:meth:`follower`) it is a read-only copy on a broker that does
    not lead ``_schemas``: a :class:`~floe.cluster.follow.TopicFollower` feeds it the
    records the leader has (:meth:`follow`), and a write raises
    :class:`ReadOnlyRegistryError`.
    """

    def __init__(self, journal: Journal | None) -> None:
        self.state = RegistryState()
        self._journal = journal
        self._lock = asyncio.Lock()
        self._parsed: dict[SchemaId, ParsedSchema] = {}
        self._followed_skipped = 0

    @classmethod
    def follower(cls) -> Registry:
        """A read-only registry fed by :meth:`follow` (and emptied by :meth:`reset`)."""
        return cls(None)

    def follow(self, offset: int, key: bytes | None, value: bytes | None) -> None:
        """Apply the ``_schemas`` record at ``offset`` read from its leader; one that
        does not decode or apply is skipped, as replay skips it (counted, logged)."""
        try:
            self.state.apply_raw(key, value)
        except Exception as exc:
            self._followed_skipped += 1
            if self._followed_skipped <= SKIP_LOG_LIMIT:
                log.warning(
                    "registry.followed_record_skipped offset=%d reason=%s",
                    offset, reason_of(exc),
                )  # fmt: skip

    def reset(self) -> None:
        """Forget everything followed (the leader's log starts after what was read)."""
        self.state = RegistryState()
        self._parsed.clear()

    @property
    def replay_skipped(self) -> int:
        """``_schemas`` batches and records skipped because they could not be used."""
        if self._journal is None:
            return self._followed_skipped
        return self._journal.skipped

    def _own_journal(self) -> Journal:
        """Raises: ReadOnlyRegistryError: a follower (:meth:`follower`)."""
        if self._journal is None:
            raise ReadOnlyRegistryError("this broker's registry is a read-only follower")
        return self._journal

    def open(self) -> None:
        """Rebuild the state by replaying every record of ``_schemas``.

        Raises:
            StorageError: the journal could not be read (an I/O error, not bad data).
        """
        count = 0
        journal = self._own_journal()
        for record in journal.replay():
            try:
                self.state.apply_raw(record.key, record.value)
            except Exception as exc:  # whatever the bytes, open anyway
                journal.skip(record.offset, reason_of(exc))
                continue
            count += 1
        log.info(
            "registry.replayed records=%d subjects=%d next_id=%d replay_skipped=%d",
            count,
            len(self.state.subjects),
            self.state.next_id,
            self.replay_skipped,
        )

    async def _write(self, change: Change) -> None:
        """Append, make durable, then apply (the caller holds the lock). A record
        that fails to apply is skipped as replay would skip it."""
        if not change.records:
            return
        journal = self._own_journal()
        last = journal.append(change.encoded())
        await journal.durable()
        first = last - len(change.records) + 1
        for i, (key, value) in enumerate(change.records):
            try:
                self.state.apply(key, value)
            except Exception as exc:
                journal.skip(first + i, reason_of(exc))

    # -- schemas ------------------------------------------------------------------
    def _dependencies(self, refs: Sequence[Reference], depth: int = 0) -> tuple[Dependency, ...]:
        if depth > _MAX_REFERENCE_DEPTH:
            raise InvalidSchemaError("references nest too deeply (a cycle?)")
        out = []
        for ref in refs:
            found = self.state.versions(ref.subject, deleted=True)
            sv = next((s for s in found if s.version == ref.version), None)
            if sv is None:
                raise InvalidSchemaError(
                    f"Invalid schema reference {ref.name}: subject '{ref.subject}' "
                    f"version {ref.version} not found"
                )
            deps = self._dependencies(sv.references, depth + 1)
            out.append(Dependency(ref.name, sv.schema_type, sv.schema, deps))
        return tuple(out)

    def parse(self, new: NewSchema) -> ParsedSchema:
        """Parse a submitted schema with its references.

        Raises:
            InvalidSchemaError: it does not parse, or a reference does not exist.
        """
        return parse(new.schema_type, new.schema, self._dependencies(new.references))

    def dependencies(self, sv: SchemaVersion) -> tuple[Dependency, ...]:
        """The resolved references of a stored version (what :func:`parse` needs).

        Raises:
            InvalidSchemaError: a referenced version no longer exists.
        """
        return self._dependencies(sv.references)

    def parsed(self, sv: SchemaVersion) -> ParsedSchema:
        """The parsed form of a stored version (cached per id)."""
        cached = self._parsed.get(sv.schema_id)
        if cached is None:
            cached = parse(sv.schema_type, sv.schema, self._dependencies(sv.references))
            self._parsed[sv.schema_id] = cached
        return cached

    def subjects(self, *, deleted: bool = False, prefix: str = "") -> list[Subject]:
        return [s for s in self.state.subject_names(deleted=deleted) if s.startswith(prefix)]

    def versions(self, subject: Subject, *, deleted: bool = False) -> list[SchemaVersion]:
        """Raises:
        SubjectNotFoundError: no (live, unless ``deleted``) version.
        """
        found = self.state.versions(subject, deleted=deleted)
        if not found:
            raise SubjectNotFoundError(subject)
        return found

    def version(
        self, subject: Subject, version: str | int, *, deleted: bool = False
    ) -> SchemaVersion:
        """One version, ``latest`` being the newest live one.

        Raises:
            InvalidVersionError, SubjectNotFoundError, VersionNotFoundError.
        """
        number = parse_version(version)
        found = self.versions(subject, deleted=deleted)
        if number is None:
            return found[-1]
        for sv in found:
            if sv.version == number:
                return sv
        raise VersionNotFoundError(subject, version)

    def by_id(self, schema_id: int, subject: Subject | None = None) -> SchemaVersion:
        """Raises:
        SchemaNotFoundError: no stored version carries the id (under ``subject``).
        """
        found = [sv for sv in self.state.by_id(schema_id) if subject in (None, sv.subject)]
        if not found:
            raise SchemaNotFoundError(f"Schema {schema_id} not found")
        return found[0]

    def id_usages(self, schema_id: int, *, deleted: bool = False) -> list[SchemaVersion]:
        """Raises:
        SchemaNotFoundError: the id is unknown.
        """
        found = [sv for sv in self.state.by_id(schema_id) if deleted or not sv.deleted]
        if not self.state.by_id(schema_id):
            raise SchemaNotFoundError(f"Schema {schema_id} not found")
        return sorted(found, key=lambda sv: (sv.subject, sv.version))

    def lookup(self, subject: Subject, new: NewSchema, *, deleted: bool = False) -> SchemaVersion:
        """The version of ``subject`` holding this schema. Matching is on canonical
        forms, so Confluent's ``normalize`` flag changes nothing here.

        Raises:
            SubjectNotFoundError, InvalidSchemaError, SchemaNotFoundError.
        """
        versions = self.versions(subject, deleted=deleted)
        fp = fingerprint(self.parse(new), new.references)
        for sv in reversed(versions):
            if sv.fingerprint == fp:
                return sv
        raise SchemaNotFoundError("Schema not found")

    async def register(
        self,
        subject: Subject,
        new: NewSchema,
        *,
        normalize: bool = False,
        schema_id: int | None = None,
        version: int | None = None,
    ) -> SchemaVersion:
        """Register ``new`` under ``subject`` (or return the version already holding it).

        Raises:
            OperationNotPermittedError: READONLY mode, or an explicit id/version outside
                IMPORT mode, or an explicit version that already exists.
            InvalidSchemaError: the schema or a reference is invalid.
            IncompatibleSchemaError: it breaks the subject's compatibility level.
            IdConflictError: IMPORT of an id that names another schema.
        """
        async with self._lock:
            mode = self.state.mode(subject)
            if mode is Mode.READONLY:
                raise OperationNotPermittedError(f"Subject {subject} is in read-only mode")
            if (schema_id is not None or version is not None) and mode is not Mode.IMPORT:
                raise OperationNotPermittedError(
                    "Registering a schema with an explicit id or version requires IMPORT mode"
                )
            parsed = self.parse(new)
            fp = fingerprint(parsed, new.references)
            live = self.state.versions(subject)
            for sv in live:
                if sv.fingerprint == fp and schema_id in (None, sv.schema_id):
                    return sv
            if mode is not Mode.IMPORT:
                existing = [(sv.version, self.parsed(sv)) for sv in live]
                problems = compatibility.check(self.state.compatibility(subject), parsed, existing)
                if problems:
                    raise IncompatibleSchemaError(problems)
            change = Change()
            if schema_id is not None:
                holders = self.state.by_id(schema_id)
                if holders and holders[0].fingerprint != fp:
                    raise IdConflictError(
                        f"Overwrite new schema with id {schema_id} is not permitted."
                    )
            else:
                schema_id = self.state.id_for_fingerprint(fp)
            if schema_id is None:
                schema_id = self.state.next_id
            if schema_id >= self.state.next_id:
                change.add(JournalKey("ID_HWM"), {"next_id": schema_id + 1})
            every = self.state.versions(subject, deleted=True)
            if version is None:
                version = (every[-1].version if every else 0) + 1
            elif any(sv.version == version for sv in every):
                raise OperationNotPermittedError(
                    f"Version {version} already exists for subject {subject}"
                )
            text = parsed.stored(new.schema, normalize=normalize)
            sv = SchemaVersion(
                subject=subject,
                version=version,
                schema_id=SchemaId(schema_id),
                schema_type=new.schema_type,
                schema=text,
                references=new.references,
                fingerprint=fp,
            )
            change.add(schema_key(subject, version), schema_value(sv))
            await self._write(change)
            self._parsed.setdefault(sv.schema_id, parsed)
        log.info(
            "registry.schema.registered subject=%s version=%d id=%d type=%s",
            subject,
            version,
            schema_id,
            new.schema_type.value,
        )
        return sv

    def check(
        self,
        subject: Subject,
        version: str | int | None,
        new: NewSchema,
    ) -> list[str]:
        """Why ``new`` is incompatible with ``version`` of ``subject`` (with every
        version the level asks for when ``version`` is None); empty when compatible.

        Raises:
            InvalidVersionError, SubjectNotFoundError, VersionNotFoundError,
            InvalidSchemaError.
        """
        parsed = self.parse(new)
        level = self.state.compatibility(subject)
        if version is None:
            existing = [(sv.version, self.parsed(sv)) for sv in self.state.versions(subject)]
            return compatibility.check(level, parsed, existing)
        sv = self.version(subject, version)
        single = CompatibilityLevel(level.value.removesuffix("_TRANSITIVE"))
        return compatibility.check(single, parsed, [(sv.version, self.parsed(sv))])

    def referenced_by(self, subject: Subject, version: str | int) -> list[SchemaId]:
        """Raises:
        InvalidVersionError, SubjectNotFoundError, VersionNotFoundError.
        """
        sv = self.version(subject, version)
        return self.state.referenced_by(subject, sv.version)

    # -- deletes ------------------------------------------------------------------
    def _writable(self, subject: Subject) -> None:
        if self.state.mode(subject) is Mode.READONLY:
            raise OperationNotPermittedError(f"Subject {subject} is in read-only mode")

    async def delete_subject(self, subject: Subject, *, permanent: bool = False) -> list[int]:
        """Soft-delete every live version, or permanently delete a soft-deleted subject.
        Returns the versions deleted.

        Raises:
            SubjectNotFoundError, SubjectSoftDeletedError, SubjectNotSoftDeletedError,
            ReferenceExistsError, OperationNotPermittedError.
        """
        async with self._lock:
            self._writable(subject)
            every = self.state.versions(subject, deleted=True)
            live = [sv for sv in every if not sv.deleted]
            if not every:
                raise SubjectNotFoundError(subject)
            if permanent and live:
                raise SubjectNotSoftDeletedError(subject)
            if not permanent and not live:
                raise SubjectSoftDeletedError(subject)
            for sv in every:
                if self.state.referenced_by(subject, sv.version):
                    raise ReferenceExistsError(subject, sv.version)
            change = Change()
            for sv in every if permanent else live:
                value = None if permanent else schema_value(replace(sv, deleted=True))
                change.add(schema_key(subject, sv.version), value)
            if permanent:
                if subject in self.state.configs:
                    change.add(JournalKey("CONFIG", subject), None)
                if subject in self.state.modes:
                    change.add(JournalKey("MODE", subject), None)
            await self._write(change)
        versions = [sv.version for sv in (every if permanent else live)]
        log.info(
            "registry.subject.deleted subject=%s permanent=%s versions=%s",
            subject,
            permanent,
            versions,
        )
        return versions

    async def delete_version(
        self, subject: Subject, version: str | int, *, permanent: bool = False
    ) -> int:
        """Soft-delete one version, or permanently delete a soft-deleted one.

        Raises:
            InvalidVersionError, SubjectNotFoundError, VersionNotFoundError,
            VersionSoftDeletedError, VersionNotSoftDeletedError, ReferenceExistsError,
            OperationNotPermittedError.
        """
        async with self._lock:
            self._writable(subject)
            number = parse_version(version)
            every = self.state.versions(subject, deleted=True)
            if not every:
                raise SubjectNotFoundError(subject)
            if number is None:
                live = [sv for sv in every if not sv.deleted]
                sv = (live or every)[-1] if permanent or live else None
                if sv is None:
                    raise VersionNotFoundError(subject, version)
            else:
                found = [s for s in every if s.version == number]
                if not found:
                    raise VersionNotFoundError(subject, version)
                sv = found[0]
            if permanent and not sv.deleted:
                raise VersionNotSoftDeletedError(subject, sv.version)
            if not permanent and sv.deleted:
                raise VersionSoftDeletedError(subject, sv.version)
            if self.state.referenced_by(subject, sv.version):
                raise ReferenceExistsError(subject, sv.version)
            change = Change()
            change.add(
                schema_key(subject, sv.version),
                None if permanent else schema_value(replace(sv, deleted=True)),
            )
            await self._write(change)
        log.info(
            "registry.version.deleted subject=%s version=%d permanent=%s",
            subject,
            sv.version,
            permanent,
        )
        return sv.version

    # -- config and mode ----------------------------------------------------------
    def get_config(
        self, subject: Subject | None, *, default_to_global: bool = False
    ) -> CompatibilityLevel:
        """Raises:
        SubjectCompatibilityNotConfiguredError: the subject has no level of its own
            and ``default_to_global`` is false.
        """
        if subject is not None and subject not in self.state.configs and not default_to_global:
            raise SubjectCompatibilityNotConfiguredError(subject)
        return self.state.compatibility(subject)

    async def set_config(self, subject: Subject | None, level: object) -> CompatibilityLevel:
        """Raises:
        InvalidCompatibilityLevelError: ``level`` is not a known level.
        """
        parsed = _compatibility_level(level)
        async with self._lock:
            change = Change()
            change.add(JournalKey("CONFIG", subject), {"compatibilityLevel": parsed.value})
            await self._write(change)
        log.info("registry.config.set subject=%s level=%s", subject, parsed.value)
        return parsed

    async def delete_config(self, subject: Subject | None) -> CompatibilityLevel:
        """Remove a level; returns the one removed (the default for the global one).

        Raises:
            SubjectNotFoundError: the subject has neither versions nor a level.
        """
        async with self._lock:
            if subject is not None and subject not in self.state.configs:
                if not self.state.versions(subject, deleted=True):
                    raise SubjectNotFoundError(subject)
                raise SubjectCompatibilityNotConfiguredError(subject)
            old = self.state.compatibility(subject)
            change = Change()
            change.add(JournalKey("CONFIG", subject), None)
            await self._write(change)
        log.info("registry.config.deleted subject=%s", subject)
        return old

    def get_mode(self, subject: Subject | None, *, default_to_global: bool = False) -> Mode:
        """Raises:
        SubjectModeNotConfiguredError: no mode of its own and not ``default_to_global``.
        """
        if subject is not None and subject not in self.state.modes and not default_to_global:
            raise SubjectModeNotConfiguredError(subject)
        return self.state.mode(subject)

    async def set_mode(self, subject: Subject | None, mode: object, *, force: bool = False) -> Mode:
        """Raises:
        InvalidModeError: unknown mode.
        OperationNotPermittedError: IMPORT over existing schemas without ``force``.
        """
        parsed = _mode(mode)
        async with self._lock:
            if parsed is Mode.IMPORT and not force:
                has = self.state.versions(subject) if subject else self.state.subject_names()
                if has:
                    raise OperationNotPermittedError("Cannot import since found existing subjects")
            change = Change()
            change.add(JournalKey("MODE", subject), {"mode": parsed.value})
            await self._write(change)
        log.info("registry.mode.set subject=%s mode=%s", subject, parsed.value)
        return parsed

    async def delete_mode(self, subject: Subject) -> Mode:
        """Raises:
        SubjectModeNotConfiguredError: the subject has no mode of its own.
        """
        async with self._lock:
            if subject not in self.state.modes:
                raise SubjectModeNotConfiguredError(subject)
            old = self.state.modes[subject]
            change = Change()
            change.add(JournalKey("MODE", subject), None)
            await self._write(change)
        log.info("registry.mode.deleted subject=%s", subject)
        return old
