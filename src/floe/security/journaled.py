"""What the stores of the security journal (``__floe_security``) share: typed keys,
replay, and the write path.

Every key on the journal is a compact JSON object with a string ``type`` (``scram``:
:mod:`floe.security.users`, ``acl``: :mod:`floe.security.acls`); each store applies
the records of its own type and passes over the others silently. As with every
journal, the in-memory state is what replaying the records gives: a write appends its
records as one batch, waits until they are durable, then applies them with the replay
function. A record that does not decode, or whose key is not a JSON object with a
string ``type``, is logged, counted (:attr:`TypedJournalStore.skipped`) and skipped:
the broker always starts.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Generic, TypeVar

import orjson

from floe.storage.journal import Journal, reason_of

A = TypeVar("A")
"""What applying one record of a store's type returns (for its log line)."""


def typed_key(record_type: str, fields: dict[str, Any]) -> bytes:
    """A journal key: ``fields`` and the ``type``, compact JSON with sorted keys (so the
    same fields always make the same key, and compaction keeps one record per key)."""
    return orjson.dumps({"type": record_type, **fields}, option=orjson.OPT_SORT_KEYS)


class TypedJournalStore(Generic[A]):
    """The replay and write path of one record type on a shared journal.

    Ownership: a subclass instance is created by the composition root once the store is
    open and used from the broker's event loop only; writes take :attr:`_lock`. There is
    nothing to close (the journal's log belongs to the store).

    Subclasses set :attr:`RECORD_TYPE` and :attr:`log`, and implement :meth:`_reset`,
    :meth:`_apply_fields`, :meth:`_applied` and :meth:`_loaded`.

    Attributes:
        replayed: records of this type applied by the last :meth:`load`.
    """

    RECORD_TYPE = ""
    log = logging.getLogger("floe.security")

    def __init__(self, journal: Journal) -> None:
        self._journal = journal
        self._lock = asyncio.Lock()
        self.replayed = 0

    @property
    def skipped(self) -> int:
        """Journal batches and records skipped because they could not be used."""
        return self._journal.skipped

    def load(self) -> None:
        """Rebuild the state by replaying every record of the journal.

        Raises:
            StorageError: the journal could not be read (an I/O error, not bad data).
        """
        self._reset()
        count = 0
        for record in self._journal.replay():
            try:
                applied = self._apply(record.key, record.value)
            except Exception as exc:  # whatever the bytes, start anyway
                self._journal.skip(record.offset, reason_of(exc))
                continue
            count += applied is not None
        self.replayed = count
        self._loaded(count)

    async def _write(self, records: list[tuple[bytes, bytes | None]]) -> None:
        """Append, make durable, then apply and log (the caller holds the lock). A
        record that fails to apply is skipped as replay would skip it.

        Raises:
            StorageError: the append failed (nothing is applied) or the batch could not
                be made durable (nothing is applied now; the records may still be on
                disk and be applied at the next :meth:`load`, as in every journal).
        """
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
            if applied is not None:
                self._applied(applied)

    def _apply(self, key: bytes | None, value: bytes | None) -> A | None:
        """Apply one journal record: the replay function. None for another store's
        record.

        Raises:
            ValueError: the key is not a typed JSON object, or a record of this type
                does not decode (orjson's decode error is a ValueError).
        """
        if key is None:
            raise ValueError("security record without a key")
        fields = orjson.loads(key)
        if not isinstance(fields, dict) or not isinstance(fields.get("type"), str):
            raise ValueError("security record key without a type")
        if fields.pop("type") != self.RECORD_TYPE:
            return None
        return self._apply_fields(fields, value)

    def _reset(self) -> None:
        """Forget the state (before a replay)."""
        raise NotImplementedError

    def _apply_fields(self, fields: dict[str, Any], value: bytes | None) -> A:
        """Apply a record of this type: its key's fields (without ``type``) and value.

        Raises:
            ValueError: the record does not decode.
        """
        raise NotImplementedError

    def _applied(self, applied: A) -> None:
        """Log one change a write applied (never at replay)."""
        raise NotImplementedError

    def _loaded(self, count: int) -> None:
        """Log the outcome of a replay of ``count`` records."""
        raise NotImplementedError
