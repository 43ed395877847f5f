"""Structured logs: one JSON object per line (``log.format = json``).

Floe's log messages start with a stable event name and carry ``key=value`` fields
(``tabletopic.committed topic=t rows=10 seconds=1.20``). :class:`JsonFormatter` writes
each record as ``{"timestamp", "level", "logger", "event", "message", ...fields}``:
``event`` is that leading name (``null`` for messages of other libraries that have
none), every ``key=value`` becomes a field (an int or float when it reads as one; a
field never replaces one of the five), and an exception's traceback goes in ``exc``.
"""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime
from typing import Any

import orjson

_EVENT = re.compile(r"[a-z][a-z0-9_]*(?:\.[a-z0-9_]+)+(?=\s|$|:)")
_FIELD = re.compile(r"(?<!\S)([A-Za-z_][\w.]*)=(\S+)")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_RESERVED = frozenset({"timestamp", "level", "logger", "event", "message", "exc"})


def _value(text: str) -> str | int | float:
    if _NUMBER.fullmatch(text):
        return float(text) if "." in text else int(text)
    return text


def parse_message(message: str) -> tuple[str | None, dict[str, Any]]:
    """The event name a message starts with (or ``None``) and its ``key=value``
    fields."""
    found = _EVENT.match(message)
    event = found.group(0) if found else None
    fields = {
        key: _value(value)
        for key, value in _FIELD.findall(message[found.end() :] if found else message)
        if key not in _RESERVED
    }
    return event, fields


class JsonFormatter(logging.Formatter):
    """Formats a record as one JSON line (module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        event, fields = parse_message(message)
        out: dict[str, Any] = {
            "timestamp": datetime.fromtimestamp(record.created, UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "event": event,
            "message": message,
            **fields,
        }
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        elif record.stack_info:
            out["exc"] = self.formatStack(record.stack_info)
        return orjson.dumps(out, default=str).decode()
