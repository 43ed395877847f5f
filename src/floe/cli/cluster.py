"""``floe cluster status``: the brokers of the cluster, this broker's lease in the
metadata store, who owns how many partitions and which broker coordinates what, from a
running broker's admin API.

It asks ``GET /api/v1/cluster`` at ``--admin URL`` (see :mod:`floe.cli.api`): what the
answering broker's last lease renewal saw, so another broker's view may differ by up to
a third of ``cluster.session.timeout.ms``. The table output is a header (cluster id,
metadata store, lease, the controller), the live brokers, the number of partitions each
broker owns and how many of them are ``__consumer_offsets`` and ``__transaction_state``
partitions, whose groups and transactional ids it coordinates, and how many table
topics' rounds run on it (a broker that owns partitions but is not live any more is
listed as such); ``--output json|yaml`` prints the API's document unchanged. Every
broker of a cluster answers (the writer, a member or a standby: its role is in the
header). Without a cluster the broker is its only member and owns nothing in a store.
Failures are one line on stderr and exit code 1.
"""

from __future__ import annotations

import argparse
from collections import Counter
from typing import Any

from floe.cli import api
from floe.cli.output import CliError

CLUSTER = "/api/v1/cluster"
OFFSETS = "__consumer_offsets"
"""Its partitions' leaders coordinate their groups (as in Kafka)."""
TXN_STATE = "__transaction_state"
"""Its partitions' leaders coordinate their transactional ids (as in Kafka)."""
COLUMNS = (
    "NODE", "HOST", "PORT", "RACK", "PARTITIONS", "GROUP PARTITIONS", "TXN PARTITIONS",
    "TABLE TOPICS", "",
)  # fmt: skip


def role_at(admin_url: str, timeout_s: float = 2.0) -> str | None:
    """What the broker whose admin API is at ``admin_url`` is (``single``, ``writer``,
    ``member`` or ``standby``: :data:`floe.admin.cluster.Role`), or None when nothing
    answers there as a Floe admin API (not started yet, stopped, another process)."""
    try:
        doc = api.fetch(admin_url, CLUSTER, timeout_s=timeout_s)
    except (CliError, api.UnreachableError):
        return None
    if not isinstance(doc, dict) or "cluster_id" not in doc:
        return None
    membership = doc.get("membership")
    return "single" if membership is None else str(membership.get("role"))


def add_parser(sub: Any) -> None:
    """Register ``floe cluster`` and its verb on the top-level subparsers."""
    cluster = sub.add_parser("cluster", help="the cluster: brokers, leases, partition owners")
    verbs = cluster.add_subparsers(dest="verb", required=True)
    status = verbs.add_parser(
        "status",
        help="live brokers, this broker's lease in the metadata store, the controller, and per "
        "broker the partitions it leads, of which __consumer_offsets (the groups it coordinates) "
        "and __transaction_state (the transactional ids it coordinates), and the table topics "
        "whose rounds run on it",
    )
    api.add_common(status)


def run(args: argparse.Namespace) -> int:
    """Run ``floe cluster status``; returns the exit code."""
    return api.run_api(args, lambda url, _: _status(url))


def _lease_state(membership: dict[str, Any]) -> str:
    """The lease as one phrase: fenced, valid for how long, or not renewed in time;
    with the session timeout, and the lapses since start when there were any."""
    if membership["fenced"] is not None:
        state = f"fenced, writes refused: {membership['fenced']}"
    elif membership["lease_valid_for_ms"] > 0:
        state = f"valid for {membership['lease_valid_for_ms'] / 1000:.1f} s"
    else:
        state = "not renewed, writes refused until it is"
    state += f" (session timeout {membership['session_timeout_ms'] / 1000:g} s"
    if membership["lease_losses"]:
        state += f", lapsed {membership['lease_losses']} times since start"
    return state + ")"


def _status(url: str) -> dict[str, Any]:
    doc: dict[str, Any] = api.fetch(url, CLUSTER)
    membership = doc["membership"]
    header = [("Cluster:", doc["cluster_id"])]
    if membership is None:
        header.append(("Store:", "no cluster (single broker)"))
    else:
        header += [
            ("Role:", membership["role"]),
            ("Store:", membership["store"]),
            ("Lease:", _lease_state(membership)),
        ]
    controller = doc.get("controller")
    header.append(
        (
            "Controller:",
            "none known" if controller is None else f"broker {controller} (topic metadata)",
        )
    )
    owned = Counter(o["owner"] for o in doc["ownership"])
    groups = Counter(o["owner"] for o in doc["ownership"] if o["topic"] == OFFSETS)
    txns = Counter(o["owner"] for o in doc["ownership"] if o["topic"] == TXN_STATE)
    tables = Counter(t["coordinator"] for t in doc.get("table_coordinators", []))
    live = {b["node_id"] for b in doc["brokers"]}
    clustered = membership is not None

    def row(node: int, address: tuple[str, str, str], notes: str) -> tuple[str, ...]:
        counts = (owned[node], groups[node], txns[node]) if clustered else ("-", "all", "all")
        return (str(node), *address, *map(str, counts), str(tables[node]), notes)

    brokers: list[tuple[str, ...]] = [COLUMNS]
    for b in doc["brokers"]:
        node = b["node_id"]
        notes = [
            n for n, on in (("this broker", b["self"]), ("controller", node == controller)) if on
        ]
        address = (b["host"], str(b["port"]), b["rack"] or "-")
        brokers.append(row(node, address, ", ".join(notes)))
    brokers += [row(node, ("-", "-", "-"), "not live") for node in sorted(owned.keys() - live)]
    return {**doc, "_header": header, "_table": brokers}
