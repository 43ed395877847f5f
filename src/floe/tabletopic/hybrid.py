"""Fresh reads of table topics: the views that replace them in a query
(:mod:`floe.tabletopic.spark.fresh` says what a view holds and why it has no duplicate
at the boundary).

:func:`fresh_views` gives the admin API's SQL the function that builds them, run in the
query's worker thread: for each table topic the statement names, the table's snapshot
and committed offsets are pinned (one metadata load), the coordinator cuts the tail
into read tasks on the event loop (the log's last stable offsets, each partition's
leader, the registry's schemas), and the tail's Spark job is planned as a round's would be.
A topic named twice is read once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from floe.errors import FloeError
from floe.tabletopic.spark.sql import SqlError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from floe.tabletopic.manager import TableTopicManager
    from floe.tabletopic.spark.fresh import Relation

log = logging.getLogger("floe.tabletopic.hybrid")

Views = Callable[["SparkSession", Sequence["Relation"]], list[tuple["Relation", "DataFrame"]]]


class FreshReadError(SqlError):
    """A table topic's tail cannot be read now; the message names the topic and why."""


def fresh_views(manager: TableTopicManager, loop: asyncio.AbstractEventLoop) -> Views:
    """The function building a statement's fresh views (call it in a worker thread, not
    on ``loop``, which runs the coordinators).

    The function raises:
        FreshReadError: a named table topic's tail cannot be planned (another broker
            leads a partition, the topic is gone, no usable schema, bad id columns).
    """
    from pyiceberg.exceptions import NoSuchTableError

    from floe.tabletopic.coordinator import TopicChangedError
    from floe.tabletopic.schemas import SchemaUnavailableError
    from floe.tabletopic.spark import fresh

    tables = manager.tables()

    def build(session: SparkSession, relations: Sequence[Relation]) -> list[tuple[Relation, Any]]:
        by_name = {tables.spark_name(c.table).lower(): c for c in manager.readers()}
        frames: dict[str, Any] = {}
        out = []
        for relation in relations:
            coordinator = by_name.get(relation.name or "")
            if coordinator is None or relation.name is None:
                continue
            if relation.name not in frames:
                name = tables.spark_name(coordinator.table)
                try:
                    snapshot_id, committed = tables.pin(coordinator.table)
                    plan = asyncio.run_coroutine_threadsafe(
                        coordinator.tail(committed), loop
                    ).result()
                    spec = tables.tail_spec(
                        coordinator.cfg, coordinator.topic, coordinator.table, plan
                    )
                except NoSuchTableError:
                    continue  # the statement's analysis says so
                except (FloeError, TopicChangedError, SchemaUnavailableError) as exc:
                    raise FreshReadError(
                        f"fresh read of table topic {coordinator.topic}: {exc}"
                    ) from None
                base = fresh.base_frame(session, name, snapshot_id)
                frames[relation.name] = (
                    base
                    if spec is None
                    else fresh.fresh_frame(base, fresh.tail_frame(session, name, spec), spec.upsert)
                )
                log.info(
                    "tabletopic.fresh_read topic=%s snapshot_id=%s tail_records=%d",
                    coordinator.topic,
                    snapshot_id,
                    sum(r.end - r.start for r in plan.ranges),
                )
            out.append((relation, frames[relation.name]))
        return out

    return build
