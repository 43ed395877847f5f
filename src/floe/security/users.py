"""The users' SCRAM credentials, kept on an internal compacted journal topic.

Each credential is one record: the key is the compact, sorted-keys JSON
``{"mechanism": ..., "type": "scram", "user": ...}`` (so compaction keeps the latest
record per user and mechanism), the value the JSON of
:meth:`~floe.security.scram.ScramCredential.to_json`, or None to delete it. The topic
(``__floe_security``) will also hold the ACL records, so every key carries a ``type``:
records of another type are passed over silently, they belong to another store.

As with every journal, the in-memory state is what replaying the records gives: a
write appends its records as one batch, waits until they are durable, then applies
them with the replay function. A scram record that does not decode is logged, counted
(:attr:`Users.skipped`) and skipped: the broker always starts. A record whose key is
not a JSON object with a string ``type`` is nobody's and is skipped the same way.

Nothing logged here carries a secret: user, mechanism and iteration count only.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

import orjson

from floe.security.journaled import TypedJournalStore, typed_key
from floe.security.scram import MECHANISMS, MIN_ITERATIONS, ScramCredential, derive
from floe.storage.journal import Journal

log = logging.getLogger("floe.security.users")

RECORD_TYPE = "scram"
"""The ``type`` of this store's keys on the shared security journal."""
PIPELINE_USER = "__floe_pipeline"
"""The broker's own user: its table pipeline's fetch connections authenticate as it
(``User:__floe_pipeline``, a super user). Its password is drawn at every start and
lives in memory only (:meth:`Users.set_internal`); the name cannot be altered."""
RESERVED_PREFIX = "__floe"
"""User names Floe keeps for itself."""


def credential_key(user: str, mechanism: str) -> bytes:
    """The journal key of ``user``'s credential for ``mechanism``."""
    return typed_key(RECORD_TYPE, {"user": user, "mechanism": mechanism})


Applied = tuple[str, str, "ScramCredential | None"]
"""(user, mechanism, the credential or None when deleted)."""


class Users(TypedJournalStore[Applied]):
    """Every user's SCRAM credentials, by user then mechanism.

    Ownership: created by the composition root once the store is open; owns the
    credentials and a write lock, used from the broker's event loop only (the SASL
    exchanges read them through :meth:`get`, the AlterUserScramCredentials and
    DescribeUserScramCredentials handlers through :meth:`alter` and :meth:`describe`).
    :meth:`load` replays the journal; there is nothing to close (the journal's log
    belongs to the store).

    Attributes:
        replayed: scram records applied by the last :meth:`load`.
    """

    RECORD_TYPE = RECORD_TYPE
    log = log

    def __init__(self, journal: Journal) -> None:
        super().__init__(journal)
        self._creds: dict[str, dict[str, ScramCredential]] = {}
        self._internal: dict[str, dict[str, ScramCredential]] = {}

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        """``user``'s credential for ``mechanism``, None when there is none (an
        internal user's, from memory: it wins over anything journaled)."""
        if user.startswith(RESERVED_PREFIX):
            return self._internal.get(user, {}).get(mechanism)
        return self._creds.get(user, {}).get(mechanism)

    def set_internal(self, user: str, password: str) -> None:
        """Give the internal ``user`` (a :data:`RESERVED_PREFIX` name) ``password`` for
        every mechanism, in memory only: never journaled, never described."""
        assert user.startswith(RESERVED_PREFIX), user
        self._internal[user] = {
            m: derive(m, password, iterations=MIN_ITERATIONS) for m in sorted(MECHANISMS)
        }

    def describe(self, users: Iterable[str] | None = None) -> dict[str, list[tuple[str, int]]]:
        """Each user's (mechanism, iterations), sorted by mechanism; every user when
        ``users`` is None. A named user without any credential is left out (the
        handler answers RESOURCE_NOT_FOUND for it)."""
        names = sorted(self._creds) if users is None else users
        return {
            user: sorted((m, c.iterations) for m, c in self._creds[user].items())
            for user in names
            if user in self._creds
        }

    async def alter(
        self,
        upserts: Sequence[tuple[str, ScramCredential]],
        deletions: Sequence[tuple[str, str]],
    ) -> None:
        """Store ``(user, credential)`` upserts and delete ``(user, mechanism)``
        credentials, as one batch. The caller (the broker's handler) has validated
        them: here a credential is valid by construction, and deleting a credential
        that does not exist changes nothing.

        Raises:
            StorageError: the append failed (nothing is applied) or the batch could not
                be made durable (nothing is applied now; the records may still be on
                disk and be applied at the next :meth:`load`, as in every journal).
        """
        records: list[tuple[bytes, bytes | None]] = [
            (credential_key(user, cred.mechanism), orjson.dumps(cred.to_json()))
            for user, cred in upserts
        ]
        records += [(credential_key(user, mechanism), None) for user, mechanism in deletions]
        async with self._lock:
            await self._write(records)

    async def ensure(self, user: str, password: str, mechanisms: Iterable[str]) -> bool:
        """Give ``user`` (the bootstrap admin of the config) a credential of
        ``password`` for each mechanism it has none for. An existing credential is
        never overwritten: an operator may have changed the password since. Returns
        whether anything was written.

        Raises:
            ValueError: an unknown mechanism, an empty user or an empty password.
            StorageError: as :meth:`alter`.
        """
        if not user or not password:
            raise ValueError("the bootstrap user needs a name and a password")
        wanted = list(dict.fromkeys(mechanisms))
        unknown = [m for m in wanted if m not in MECHANISMS]
        if unknown:
            raise ValueError(f"unknown SCRAM mechanisms {unknown}")
        async with self._lock:
            missing = [m for m in wanted if self.get(user, m) is None]
            records: list[tuple[bytes, bytes | None]] = [
                (credential_key(user, m), orjson.dumps(derive(m, password).to_json()))
                for m in missing
            ]
            await self._write(records)
        return bool(records)

    def _reset(self) -> None:
        self._creds.clear()

    def _loaded(self, count: int) -> None:
        log.info(
            "security.users.replayed records=%d users=%d skipped=%d",
            count, len(self._creds), self.skipped,
        )  # fmt: skip

    def _applied(self, applied: Applied) -> None:
        user, mechanism, cred = applied
        if cred is not None:
            log.info(
                "security.user.upserted user=%s mechanism=%s iterations=%d",
                user, mechanism, cred.iterations,
            )  # fmt: skip
        else:
            log.info("security.user.deleted user=%s mechanism=%s", user, mechanism)

    def _apply_fields(self, k: dict[str, Any], value: bytes | None) -> Applied:
        """Apply a scram record (the replay function).

        Raises:
            ValueError: the key lacks a user or a known mechanism, or the value does not
                decode (orjson's decode error is a ValueError).
        """
        user, mechanism = k.get("user"), k.get("mechanism")
        if not isinstance(user, str) or not user:
            raise ValueError("scram record key without a user")
        if not isinstance(mechanism, str) or mechanism not in MECHANISMS:
            raise ValueError(f"scram record key with mechanism {mechanism!r}")
        if value is None:
            creds = self._creds.get(user, {})
            creds.pop(mechanism, None)
            if not creds:
                self._creds.pop(user, None)
            return user, mechanism, None
        cred = ScramCredential.from_json(orjson.loads(value))
        if cred.mechanism != mechanism:
            raise ValueError(f"{cred.mechanism} credential under a {mechanism} key")
        self._creds.setdefault(user, {})[mechanism] = cred
        return user, mechanism, cred
