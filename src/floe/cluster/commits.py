"""The commit point from a broker's side: its new committed ends sent to the metadata
store (:meth:`~floe.cluster.interface.MetadataStore.commit`), at the epoch it owns each
partition at, and what a refusal means.

A refusal is one of three things, told apart by reading the store back once:

* this broker's own earlier commit whose answer was lost moved the end (to the end now
  asked for: done; or short of it: committed again from there, once);
* another broker owns the partition now: this broker is fenced for it (its records
  beyond the committed end are not part of the log);
* nobody owns it any more (its topic was deleted): nothing to commit, nothing to fence.
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
    new committed end (None: refused) and the partitions another broker took over.

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
        if not todo:
            break
    return done, taken
