"""Version-agnostic construction of kio response entities.

Handlers describe a response once, as nested dicts and lists, with the field names of
the newest version. :func:`build` turns that into the kio dataclasses of the exact
version the client asked for: fields the version lacks are dropped, fields it has but
the handler did not set keep kio's defaults, nested dicts become the version's nested
classes. Field lists are computed once per class and cached.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any, TypeVar

E = TypeVar("E")

_Converter = Callable[[Any], Any]


def _identity(value: Any) -> Any:
    return value


MAX_MESSAGE_CHARS = 1000
"""Error messages are cut to this many characters: a message quoting a client's input
(a 32 KB topic name) must not make the response unencodable (int16 string lengths)."""


def _message(value: Any) -> Any:
    if isinstance(value, str) and len(value) > MAX_MESSAGE_CHARS:
        return value[: MAX_MESSAGE_CHARS - 3] + "..."
    return value


@cache
def _plan(cls: type) -> dict[str, _Converter]:
    """For each field of ``cls``: how to convert a handler-supplied value."""
    hints = typing.get_type_hints(cls)
    plan: dict[str, _Converter] = {}
    for f in dataclasses.fields(cls):
        plan[f.name] = _message if f.name == "error_message" else _converter_for(hints[f.name])
    return plan


def _entity_in(annotation: Any) -> type | None:
    if dataclasses.is_dataclass(annotation) and isinstance(annotation, type):
        return annotation
    for arg in typing.get_args(annotation):
        found = _entity_in(arg)
        if found is not None:
            return found
    return None


def _converter_for(annotation: Any) -> _Converter:
    origin = typing.get_origin(annotation)
    is_union = origin is typing.Union or origin is types.UnionType
    if is_union:
        inner = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(inner) == 1:
            conv = _converter_for(inner[0])
            return lambda v: None if v is None else conv(v)
    if origin is tuple:
        entity = _entity_in(annotation)
        if entity is not None:
            item_type = entity
            return lambda v: tuple(_coerce(item_type, item) for item in v)
        return tuple
    entity = _entity_in(annotation)
    if entity is not None:
        return lambda v: _coerce(entity, v)
    return _identity


def _coerce(cls: type, value: Any) -> Any:
    if isinstance(value, Mapping):
        return build(cls, value)
    return value


def build(cls: type[E], fields: Mapping[str, Any]) -> E:
    """Instantiate ``cls`` from ``fields``, ignoring names the class does not have."""
    plan = _plan(cls)  # type: ignore[arg-type]
    kwargs = {name: plan[name](value) for name, value in fields.items() if name in plan}
    return cls(**kwargs)


def has_field(cls: type, name: str) -> bool:
    """Whether this version of a message has the field ``name``."""
    return name in _plan(cls)
