"""The ``cluster`` suite's metadata-store load: the requests per second each broker of
the cluster sharing partitions makes of the metadata store, by operation, idle and
under the member-kill series' load (``floe_cluster_store_requests_total`` from each
broker's ``/metrics``). The load model in docs/architecture.md ("What a cluster costs
its metadata store") is checked against these numbers.

Each window reads every live broker's counters, waits :data:`WINDOW_S`, reads them
again; the rates go into ``result.figures`` as ``store <when> <role>`` (``writer`` or
``member <node id>``), one operation per entry.
"""

from __future__ import annotations

import time
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from benchmarks.cluster_base import Cluster, Member
from benchmarks.harness import Progress, SuiteResult

WINDOW_S = 15.0
FAMILY = "floe_cluster_store_requests"
PREFIX = "store "


def measure(cluster: Cluster, when: str, prog: Progress, result: SuiteResult) -> None:
    """One window on ``cluster``, recorded as ``when`` (``idle``, ``load``)."""
    writer = cluster.writer()
    live = [m for m in cluster.members if m.alive()]
    before = {m.node_id: _requests(m) for m in live}
    started = time.monotonic()
    time.sleep(WINDOW_S)
    elapsed = time.monotonic() - started
    after = {m.node_id: _requests(m) for m in live}
    for m in live:
        role = "writer" if m is writer else f"member {m.node_id}"
        was = before[m.node_id]
        rates = {op: (n - was.get(op, 0.0)) / elapsed for op, n in after[m.node_id].items()}
        result.figures[f"{PREFIX}{when} {role}"] = rates
        prog.log(f"metadata store, {when}, {role}: {sum(rates.values()):.1f} requests/s")


def _requests(m: Member) -> dict[str, float]:
    """The broker's requests to the metadata store so far, by operation."""
    url = f"http://127.0.0.1:{m.sets['admin.port']}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {
        sample.labels["operation"]: sample.value
        for family in text_string_to_metric_families(text)
        if family.name == FAMILY
        for sample in family.samples
        if sample.name == f"{FAMILY}_total"
    }


def render(result: SuiteResult) -> list[str]:
    """The table of requests per second per broker and operation (empty when the
    windows did not run)."""
    columns = sorted(k for k in result.figures if k.startswith(PREFIX))
    if not columns:
        return []
    ops = sorted({op for c in columns for op in result.figures[c]})
    lines = [
        "Requests per second each broker made of the metadata store (one etcd RPC or one "
        f"SQL transaction each), over {WINDOW_S:g} s idle and {WINDOW_S:g} s under the "
        "member-kill series' producers, before the first kill:",
        "",
        "| operation | " + " | ".join(c[len(PREFIX) :] for c in columns) + " |",
        "| --- |" + " ---: |" * len(columns),
    ]
    for op in ops:
        cells = [f"{result.figures[c].get(op, 0.0):.2f}" for c in columns]
        lines.append(f"| {op} | " + " | ".join(cells) + " |")
    totals = [f"**{sum(result.figures[c].values()):.1f}**" for c in columns]
    lines += ["| **all** | " + " | ".join(totals) + " |", ""]
    return lines
