"""The one place domain errors become Confluent error bodies.

Body: ``{"error_code": N, "message": "..."}``; the HTTP status is the error code's
first three digits (Confluent's convention), e.g. 40401 -> 404, 42201 -> 422.
"""

from __future__ import annotations

from floe.registry.core import errors as e

ERROR_CODES: dict[type[e.RegistryError], int] = {
    e.SubjectNotFoundError: 40401,
    e.VersionNotFoundError: 40402,
    e.SchemaNotFoundError: 40403,
    e.SubjectSoftDeletedError: 40404,
    e.SubjectNotSoftDeletedError: 40405,
    e.VersionSoftDeletedError: 40406,
    e.VersionNotSoftDeletedError: 40407,
    e.SubjectCompatibilityNotConfiguredError: 40408,
    e.SubjectModeNotConfiguredError: 40409,
    e.IncompatibleSchemaError: 409,
    e.InvalidSchemaError: 42201,
    e.InvalidVersionError: 42202,
    e.InvalidCompatibilityLevelError: 42203,
    e.InvalidModeError: 42204,
    e.OperationNotPermittedError: 42205,
    e.ReferenceExistsError: 42206,
    e.IdConflictError: 42207,
    e.InvalidRequestError: 422,
}
STORE_ERROR = 50001


def status_of(code: int) -> int:
    """HTTP status for a Confluent error code."""
    return code if code < 1000 else int(str(code)[:3])


def error_code(exc: e.RegistryError) -> int:
    """Confluent error code for a domain error (the most specific class wins)."""
    for cls in type(exc).__mro__:
        if cls in ERROR_CODES:
            return ERROR_CODES[cls]
    return STORE_ERROR
