"""Domain errors of the schema registry.

Each class names one failure the Confluent API distinguishes; the HTTP status and the
Confluent ``error_code`` for each are chosen once, in :mod:`floe.registry.api.errors`.
"""

from __future__ import annotations


class RegistryError(Exception):
    """Base class: the message is safe to show to a client."""


class SubjectNotFoundError(RegistryError):
    def __init__(self, subject: str) -> None:
        super().__init__(f"Subject '{subject}' not found.")


class VersionNotFoundError(RegistryError):
    def __init__(self, subject: str, version: object) -> None:
        super().__init__(f"Version {version} not found for subject '{subject}'.")


class SchemaNotFoundError(RegistryError):
    def __init__(self, detail: str = "Schema not found") -> None:
        super().__init__(detail)


class SubjectSoftDeletedError(RegistryError):
    def __init__(self, subject: str) -> None:
        super().__init__(
            f"Subject '{subject}' was soft deleted. Set permanent=true to delete permanently"
        )


class SubjectNotSoftDeletedError(RegistryError):
    def __init__(self, subject: str) -> None:
        super().__init__(
            f"Subject '{subject}' was not deleted first before being permanently deleted"
        )


class VersionSoftDeletedError(RegistryError):
    def __init__(self, subject: str, version: int) -> None:
        super().__init__(
            f"Subject '{subject}' Version {version} was soft deleted. "
            "Set permanent=true to delete permanently"
        )


class VersionNotSoftDeletedError(RegistryError):
    def __init__(self, subject: str, version: int) -> None:
        super().__init__(
            f"Subject '{subject}' Version {version} was not deleted first before "
            "being permanently deleted"
        )


class SubjectCompatibilityNotConfiguredError(RegistryError):
    def __init__(self, subject: str) -> None:
        super().__init__(
            f"Subject '{subject}' does not have subject-level compatibility configured"
        )


class SubjectModeNotConfiguredError(RegistryError):
    def __init__(self, subject: str) -> None:
        super().__init__(f"Subject '{subject}' does not have subject-level mode configured")


class IncompatibleSchemaError(RegistryError):
    """The schema breaks the subject's compatibility level; ``messages`` say how."""

    def __init__(self, messages: list[str]) -> None:
        self.messages = messages
        super().__init__(
            "Schema being registered is incompatible with an earlier schema for subject: "
            + "; ".join(messages)
        )


class InvalidSchemaError(RegistryError):
    """The schema text does not parse or does not validate for its type."""


class InvalidVersionError(RegistryError):
    def __init__(self, version: object) -> None:
        super().__init__(
            f"The specified version '{version}' is not a valid version id. Allowed values are "
            'between [1, 2^31-1] and the string "latest"'
        )


class InvalidCompatibilityLevelError(RegistryError):
    def __init__(self, level: object) -> None:
        super().__init__(
            f"Invalid compatibility level. Valid values are none, backward, forward, full, "
            f"backward_transitive, forward_transitive, and full_transitive (got {level!r})"
        )


class InvalidModeError(RegistryError):
    def __init__(self, mode: object) -> None:
        super().__init__(
            f"Invalid mode. Valid values are READWRITE, READONLY and IMPORT (got {mode!r})"
        )


class OperationNotPermittedError(RegistryError):
    """Refused by the mode (READONLY, explicit ids outside IMPORT, ...)."""


class ReferenceExistsError(RegistryError):
    def __init__(self, subject: str, version: int) -> None:
        super().__init__(
            f"One or more references exist to the schema {{subject={subject},version={version}}}"
        )


class IdConflictError(RegistryError):
    """IMPORT mode: the explicit id already names a different schema."""


class InvalidRequestError(RegistryError):
    """A well-formed JSON body whose fields have the wrong shape (HTTP 422)."""
