"""Kafka error codes and Floe's domain exceptions.

The code enum is kio's ``ErrorCode`` (every Kafka error number with its ``retriable``
flag), re-exported so the rest of Floe has one place to import it from. Domain code
raises :class:`KafkaError` subclasses carrying a code; the broker edge turns them into
per-partition or per-topic error codes, once.
"""

from kio.schema.errors import ErrorCode

__all__ = [
    "ConfigError",
    "CorruptRecordError",
    "ErrorCode",
    "FloeError",
    "InvalidRecordError",
    "KafkaError",
]


class FloeError(Exception):
    """Base class of every exception Floe raises on purpose."""


class KafkaError(FloeError):
    """A failure that maps to one Kafka error code.

    Attributes:
        code: the Kafka error code a client receives for this failure.
    """

    code: ErrorCode = ErrorCode.unknown_server_error

    def __init__(self, message: str = "", code: ErrorCode | None = None) -> None:
        super().__init__(message or (code or self.code).name)
        if code is not None:
            self.code = code

    @property
    def retriable(self) -> bool:
        return bool(self.code.retriable)


class ConfigError(KafkaError):
    """A configuration value is unknown, of the wrong type or out of bounds.

    Topic configs reach clients as INVALID_CONFIG; broker configs stop ``floe`` with a
    one-line message.
    """

    code = ErrorCode.invalid_config


class CorruptRecordError(KafkaError):
    """A record batch failed its CRC32C check or its framing is inconsistent."""

    code = ErrorCode.corrupt_message


class InvalidRecordError(KafkaError):
    """A record batch is well formed but not acceptable (e.g. an old magic value)."""

    code = ErrorCode.invalid_record
