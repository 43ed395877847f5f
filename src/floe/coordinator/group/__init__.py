"""The classic-protocol group coordinator (``__consumer_offsets``).

- :mod:`.records`: the versioned key/value encoding of the journal.
- :mod:`.offsets`: the persisted state (groups, committed and staged offsets) and the
  replay function that changes it.
- :mod:`.state`: the live group state machine (members, rebalances); each generation's
  members are persisted with it and brought back at start-up.
- :mod:`.api`: value types of the operations (requests, results with error codes).
- :mod:`.membership`: JoinGroup, SyncGroup, Heartbeat, LeaveGroup and their timers.
- :mod:`.coordinator`: :class:`GroupCoordinator`, which ties them together.
"""

from floe.coordinator.group.coordinator import GroupCoordinator

__all__ = ["GroupCoordinator"]
