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

import asyncio
import logging
from collections.abc import Iterable, Sequence

import orjson

from floe.security.scram import MECHANISMS, ScramCredential, derive
from floe.storage.journal import Journal, reason_of

log = logging.getLogger("floe.security.users")

RECORD_TYPE = "scram"
"""The ``type`` of this store's keys on the shared security journal."""


def credential_key(user: str, mechanism: str) -> bytes:
    """The journal key of ``user``'s credential for ``mechanism``."""
    return orjson.dumps(
        {"type": RECORD_TYPE, "user": user, "mechanism": mechanism},
        option=orjson.OPT_SORT_KEYS,
    )


class Users:
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

    def __init__(self, journal: Journal) -> None:
        self._journal = journal
        self._creds: dict[str, dict[str, ScramCredential]] = {}
        self._lock = asyncio.Lock()
        self.replayed = 0

    @property
    def skipped(self) -> int:
        """Journal batches and records skipped because they could not be used."""
        return self._journal.skipped

    def load(self) -> None:
        """Rebuild the credentials by replaying every record of the journal.

        Raises:
            StorageError: the journal could not be read (an I/O error, not bad data).
        """
        self._creds.clear()
        count = 0
        for record in self._journal.replay():
            try:
                applied = self._apply(record.key, record.value)
            except Exception as exc:  # whatever the bytes, start anyway
                self._journal.skip(record.offset, reason_of(exc))
                continue
            count += applied is not None
        self.replayed = count
        log.info(
            "security.users.replayed records=%d users=%d skipped=%d",
            count, len(self._creds), self.skipped,
        )  # fmt: skip

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        """``user``'s credential for ``mechanism``, None when there is none."""
        return self._creds.get(user, {}).get(mechanism)

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

    async def _write(self, records: list[tuple[bytes, bytes | None]]) -> None:
        """Append, make durable, then apply and log (the caller holds the lock). A
        record that fails to apply is skipped as replay would skip it."""
        if not records:
            return
        last = self._journal.append(records)
        await self._journal.durable()
        first = last - len(records) + 1
        for i, (key, value) in enumerate(records):
            try:
                applied = self._apply(key, value)
            except Exception as exc:
                self._journal.skip(first + i, reason_of(exc))
                continue
            if applied is None:
                continue
            user, mechanism, cred = applied
            if cred is not None:
                log.info(
                    "security.user.upserted user=%s mechanism=%s iterations=%d",
                    user, mechanism, cred.iterations,
                )  # fmt: skip
            else:
                log.info("security.user.deleted user=%s mechanism=%s", user, mechanism)

    def _apply(
        self, key: bytes | None, value: bytes | None
    ) -> tuple[str, str, ScramCredential | None] | None:
        """Apply one journal record: the replay function. Returns (user, mechanism,
        credential or None when deleted), or None for another store's record.

        Raises:
            ValueError: the key is not a typed JSON object, or a scram record does not
                decode (orjson's decode error is a ValueError).
        """
        if key is None:
            raise ValueError("security record without a key")
        k = orjson.loads(key)
        if not isinstance(k, dict) or not isinstance(k.get("type"), str):
            raise ValueError("security record key without a type")
        if k["type"] != RECORD_TYPE:
            return None
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
