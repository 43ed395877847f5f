"""The ACLs, kept on the internal compacted journal the SCRAM users share.

Each ACL is one record on ``__floe_security``: the key is the compact, sorted-keys
JSON ``{"type": "acl", ...every field of the binding...}`` (:func:`acl_key`), so a
binding is its own key and compaction keeps one record per binding; the value is the
binding's JSON (:meth:`~floe.security.acl.AclBinding.to_json`), or None to delete it.
Records of another ``type`` (``scram``: :mod:`floe.security.users`) are passed over
silently.

As with every journal, the in-memory state is what replaying the records gives: a
write appends its records as one batch, waits until they are durable, then applies
them with the replay function. An acl record that does not decode (or whose value is
not the binding its key names) is logged, counted and skipped: the broker always
starts. A record whose key is not a JSON object with a string ``type`` is nobody's and
is skipped the same way, as :class:`~floe.security.users.Users` does.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

import orjson

from floe.security.acl import AclBinding, AclFilter, validate
from floe.security.journaled import TypedJournalStore, typed_key
from floe.storage.journal import Journal

log = logging.getLogger("floe.security.acls")

RECORD_TYPE = "acl"
"""The ``type`` of this store's keys on the shared security journal."""


def acl_key(binding: AclBinding) -> bytes:
    """The journal key of ``binding``: the binding itself, typed."""
    return typed_key(RECORD_TYPE, dict(binding.to_json()))


Applied = tuple[AclBinding, bool]
"""(the binding, whether it is now present)."""


class AclStore(TypedJournalStore[Applied]):
    """Every ACL binding, as a set.

    Ownership: created by the composition root once the store is open; owns the
    bindings, a write lock and :attr:`version`, used from the broker's event loop only
    (the authorizer reads through :meth:`bindings` and :attr:`version`, the
    CreateAcls, DescribeAcls and DeleteAcls handlers through :meth:`create`,
    :meth:`matching` and :meth:`delete`). :meth:`load` replays the journal; there is
    nothing to close (the journal's log belongs to the store).

    Attributes:
        version: bumped whenever the set of bindings changes (load included), so that
            an :class:`~floe.security.acl.Authorizer` knows to rebuild its index.
        replayed: acl records applied by the last :meth:`load`.
    """

    RECORD_TYPE = RECORD_TYPE
    log = log

    def __init__(self, journal: Journal) -> None:
        super().__init__(journal)
        self._bindings: dict[AclBinding, None] = {}  # a set that keeps creation order
        self.version = 0

    def _reset(self) -> None:
        self._bindings.clear()
        self.version += 1

    def _loaded(self, count: int) -> None:
        log.info(
            "security.acls.replayed records=%d acls=%d skipped=%d",
            count, len(self._bindings), self.skipped,
        )  # fmt: skip

    def _applied(self, applied: Applied) -> None:
        binding, present = applied
        log.info("security.acl.%s %s", "created" if present else "deleted", binding.describe())

    def bindings(self) -> list[AclBinding]:
        """Every binding, in the order they were created."""
        return list(self._bindings)

    def matching(self, acl_filter: AclFilter) -> list[AclBinding]:
        """The bindings ``acl_filter`` selects, in the order they were created."""
        return [b for b in self._bindings if acl_filter.matches(b)]

    async def create(self, bindings: Iterable[AclBinding]) -> None:
        """Store ``bindings`` as one batch. A binding that exists already is not
        written again (creating it is a success, as in Kafka).

        Raises:
            ValueError: a binding that :func:`~floe.security.acl.validate` refuses
                (nothing is written; the handler checks before it calls).
            StorageError: the append failed (nothing is applied) or the batch could not
                be made durable (nothing is applied now; the records may still be on
                disk and be applied at the next :meth:`load`, as in every journal).
        """
        wanted = list(dict.fromkeys(bindings))
        for b in wanted:
            problem = validate(b)
            if problem is not None:
                raise ValueError(f"invalid ACL binding: {problem}")
        async with self._lock:
            new = [b for b in wanted if b not in self._bindings]
            await self._write([(acl_key(b), orjson.dumps(b.to_json())) for b in new])

    async def delete(self, filters: Sequence[AclFilter]) -> list[list[AclBinding]]:
        """Delete every binding any of ``filters`` selects, as one batch. Returns, per
        filter, the bindings it selected (a binding two filters select is listed by
        both, as Kafka's DeleteAcls does).

        Raises:
            StorageError: as :meth:`create`.
        """
        async with self._lock:
            matched = [self.matching(f) for f in filters]
            gone = dict.fromkeys(b for bindings in matched for b in bindings)
            await self._write([(acl_key(b), None) for b in gone])
        return matched

    def _apply_fields(self, k: dict[str, Any], value: bytes | None) -> Applied:
        """Apply an acl record (the replay function).

        Raises:
            ValueError: the record does not decode, or its value is not the binding its
                key names (orjson's decode error is a ValueError).
        """
        binding = AclBinding.from_json(k)
        if value is None:
            if binding in self._bindings:
                del self._bindings[binding]
                self.version += 1
            return binding, False
        if AclBinding.from_json(orjson.loads(value)) != binding:
            raise ValueError("acl record whose value is not the binding its key names")
        if binding not in self._bindings:
            self._bindings[binding] = None
            self.version += 1
        return binding, True
