"""What the admin facade raises. The HTTP edge (:mod:`floe.admin.api`) maps each class
to a status code in one place; the facade itself knows nothing of HTTP."""

from __future__ import annotations

from floe.errors import FloeError


class AdminError(FloeError):
    """A request the admin facade cannot answer."""


class NotFoundError(AdminError):
    """The thing asked about does not exist (an unknown topic, a topic that is not a
    table topic)."""


class BadRequestError(AdminError):
    """The request is malformed or refused (a bad topic config, a statement that is not
    read-only); the message says why."""


class ForbiddenError(AdminError):
    """The request is understood but never allowed (changing an internal topic)."""


class ConflictError(AdminError):
    """The request conflicts with the current state (the topic already exists)."""


class UnavailableError(AdminError):
    """A part the request needs is not running (no registry, no Spark)."""


class QueryTimeoutError(AdminError):
    """A SQL query ran longer than its timeout and was cancelled."""


class OperationFailedError(AdminError):
    """An operation the request started failed on the way (a maintenance step); the
    message says which and why, and what landed before it stays."""
