"""The classic-protocol group coordinator (``__consumer_offsets``).

- :mod:`.records`: the versioned key/value encoding of the journal.
- :mod:`.offsets`: the persisted state (groups, committed and staged offsets) and the
  replay function that changes it.
- :mod:`.state`: the live group state machine (members, rebalances); each generation's
  members are persisted with it and brought back at start-up.
- :mod:`.api`: value types of the operations (requests, results with error codes).
- :mod:`.membership`: JoinGroup, SyncGroup, Heartbeat, LeaveGroup and their timers.
- :mod:`.txn_offsets`: offsets committed inside transactions (staged, then completed).
- :mod:`.shard`: :class:`~.shard.GroupShard`, which ties them together for the groups
  of one ``__consumer_offsets`` partition.
- :mod:`.coordinator`: :class:`GroupCoordinator`, the shards of the partitions this
  broker leads, and the group-to-partition mapping (:func:`partition_for`).
"""

from floe.coordinator.group.coordinator import GroupCoordinator, partition_for

__all__ = ["GroupCoordinator", "partition_for"]
