"""What the admin facade raises. The HTTP edge (:mod:`floe.admin.api`) maps each class
to a status code in one place; the facade itself knows nothing of HTTP."""

from __future__ import annotations

from floe.errors import FloeError


class AdminError(FloeError):
    """A request the admin facade cannot answer."""


class NotFoundError(AdminError):
    """The thing asked about does not exist (an unknown topic, a topic that is not a
    table topic)."""
