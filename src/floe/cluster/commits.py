"""The commit point from a broker's side: its new committed ends sent to the metadata
store (:meth:`~floe.cluster.interface.MetadataStore.commit`), at the epoch it owns each
partition at, and what a refusal means.

A refusal is one of three things, told apart by reading the store back once:

* this broker's own earlier commit whose answer was lost moved the end (to the end now
  asked for: done; or short of it: committed again from there, once);
* another broker owns the partition now: this broker is fenced for it (its records
  beyond the committed end are not part of the log). What of them is part of the log is
  where this broker's epoch ended (:meth:`~floe.cluster.interface.MetadataStore.epoch_end`,
  recorded by the claim that ended it): a commit whose answer was lost before the
  takeover may have been applied, and its records are then in the log, acknowledged as
  such rather than called "not persisted" (which a client takes as leave to send them
  again as new records);
* nobody owns it any more (its topic was deleted): nothing to commit, nothing to fence.

A broker that was fenced commits nothing more; :func:`final_ends` tells it what of its
records the log holds, so that the requests still waiting for them get a true answer.
"""

from __future__ import annotations

from collections.abc import Mapping

from floe.cluster.interface import LogCommit, MetadataStore, Ownership
from floe.types import PartitionId, TopicName

Key = tuple[TopicName, PartitionId]


def commit_ends(
    store: MetadataStore,
    broker: int,
    owned: Mapping[Key, Ownership],
    wanted: Mapping[Key, tuple[int | None, int]],
) -> tuple[dict[Key, int | None], list[Key]]:
    """Commit ``wanted`` (``{key: (expected end, new end)}``) for ``broker``, which owns
    ``owned`` (a partition it does not own is refused at once). Returns each partition's
    new committed end (None: refused, nothing known committed) and the partitions
    another broker took over, whose end is where this broker's epoch ended (when the
    store still knows: below the end asked for, the rest is not part of the log).

    Raises:
        MetadataUnavailableError: the store did not answer.
    """
    done: dict[Key, int | None] = {}
    todo = []
    for key, (expected, end) in wanted.items():
        mine = owned.get(key)
        if mine is None:
            done[key] = None
        else:
            todo.append(LogCommit(key[0], key[1], mine.epoch, expected, end))
    taken: list[Key] = []
    for attempt in range(2):
        refused = store.commit(broker, todo)
        out = {(c.topic, c.partition) for c in refused}
        done.update(
            {(c.topic, c.partition): c.end for c in todo if (c.topic, c.partition) not in out}
        )
        if not refused:
            break
        now, owners = store.committed(), store.owners()
        todo = []
        for c in refused:
            key = (c.topic, c.partition)
            at, owner = now.get(key), owners.get(key)
            ours = owner == Ownership(broker, c.epoch)
            done[key] = None
            if ours and at == c.end:
                done[key] = c.end  # applied already
            elif ours and at is not None and (c.expected or 0) <= at < c.end and not attempt:
                todo.append(LogCommit(c.topic, c.partition, c.epoch, at, c.end))
            elif owner is not None and not ours:
                taken.append(key)
                done[key] = store.epoch_end(c.topic, c.partition, c.epoch)
        if not todo:
            break
    return done, taken


def final_ends(
    store: MetadataStore, broker: int, epochs: Mapping[Key, int]
) -> dict[Key, int | None]:
    """What the log of each partition holds of what ``broker``, fenced, wrote at
    ``epochs`` (``{key: ownership epoch}``): the committed end while it still owns the
    partition at that epoch (nothing more will be committed at it), else where that
    epoch ended; None when the store no longer knows.

    Raises:
        MetadataUnavailableError: the store did not answer.
    """
    now, owners = store.committed(), store.owners()
    ends: dict[Key, int | None] = {}
    for key, epoch in epochs.items():
        if owners.get(key) == Ownership(broker, epoch):
            ends[key] = now.get(key, 0)
        else:
            ends[key] = store.epoch_end(key[0], key[1], epoch)
    return ends
