"""Local-disk storage backend: segmented logs, group-commit fsync, crash recovery,
retention and compaction behind :mod:`floe.storage.interface`."""

from floe.storage.local.log import LocalPartitionLog
from floe.storage.local.store import LocalStore

__all__ = ["LocalPartitionLog", "LocalStore"]
