"""Compatibility levels: which earlier versions a new schema is checked against, and
in which direction.

BACKWARD: the new schema reads data written with the latest one; FORWARD: the latest
reads data written with the new one; FULL: both. ``*_TRANSITIVE``: against every live
version, not only the latest. NONE: no check.
"""

from __future__ import annotations

from collections.abc import Sequence

from floe.registry.core.model import CompatibilityLevel as L
from floe.registry.core.schemas import ParsedSchema

_BACKWARD = {L.BACKWARD, L.BACKWARD_TRANSITIVE, L.FULL, L.FULL_TRANSITIVE}
_FORWARD = {L.FORWARD, L.FORWARD_TRANSITIVE, L.FULL, L.FULL_TRANSITIVE}
_TRANSITIVE = {L.BACKWARD_TRANSITIVE, L.FORWARD_TRANSITIVE, L.FULL_TRANSITIVE}


def check(level: L, new: ParsedSchema, existing: Sequence[tuple[int, ParsedSchema]]) -> list[str]:
    """Messages explaining why ``new`` breaks ``level`` against ``existing`` (a list of
    ``(version, schema)``, oldest first); empty when it is compatible."""
    if level is L.NONE or not existing:
        return []
    targets = existing if level in _TRANSITIVE else existing[-1:]
    messages: list[str] = []
    for version, old in reversed(targets):
        if level in _BACKWARD:
            messages += [
                f"{level.value} check against version {version}: {m}"
                for m in new.incompatibilities(old)
            ]
        if level in _FORWARD:
            messages += [
                f"{level.value} check against version {version} (as reader): {m}"
                for m in old.incompatibilities(new)
            ]
    return messages
