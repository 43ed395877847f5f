"""Fixtures of the local-store tests (helpers live in ``localstore_helpers``)."""

from localstore_helpers import open_store

__all__ = ["open_store"]
