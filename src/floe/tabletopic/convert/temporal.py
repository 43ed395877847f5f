"""Checked conversion of source timestamps to Iceberg's microseconds.

Iceberg ``timestamp``/``timestamptz`` (Arrow ``timestamp("us")``) hold a signed 64-bit
count of microseconds since 1970-01-01 (about years -290308 to 294247). Sources count
in other units: Avro ``*timestamp-millis``, protobuf ``Timestamp`` (seconds + nanos),
the Kafka record timestamp (milliseconds). Scaled with wrapping int64 arithmetic, a
value outside that range would become a garbage timestamp.

Invariant: every scaled timestamp goes through :func:`checked` (Python ints, which do not
wrap), which raises :class:`TimestampRangeError` instead. It is a ``ValueError``, so the
converter makes it a per-record :class:`~.converter.ConversionError` whose reason names
the field and the value.
"""

from __future__ import annotations

MIN_MICROS = -(2**63)
MAX_MICROS = 2**63 - 1
MAX_MILLIS = MAX_MICROS // 1000
"""The largest millisecond count whose microseconds fit (the Kafka record timestamp)."""
RANGE = "the Iceberg timestamp range (64-bit microseconds since 1970)"


class TimestampRangeError(ValueError):
    """A timestamp that has no representation as Iceberg microseconds."""


def field_name(path: str) -> str:
    """How a reason names a field: ``field 'a.b'`` (``the value`` at the root)."""
    return f"field {path!r}" if path else "the value"


def checked(us: int, path: str, kind: str, raw: object) -> int:
    """``us`` (microseconds computed from ``raw``) when it fits.

    Raises:
        TimestampRangeError: it does not; the message names the field, its ``kind``
            (e.g. ``timestamp-millis``) and the source value ``raw``.
    """
    if MIN_MICROS <= us <= MAX_MICROS:
        return us
    raise TimestampRangeError(f"{field_name(path)} ({kind}) value {raw} is outside {RANGE}")
