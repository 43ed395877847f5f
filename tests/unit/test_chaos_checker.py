"""The chaos checker's transactional-record check (an acknowledged record of a
transaction, committed or not, stays at the offset it was acknowledged at), its
read_committed checks (a committed transaction wholly visible, every transaction
decided), and its stall check (every producer is served again once the cluster
settled)."""

from __future__ import annotations

import pytest

from helpers.chaos_checker import FinalRead, check
from helpers.chaos_workload import History, Op, Txn


def history_of(*txns: Txn) -> History:
    history = History()
    history.txns.extend(txns)
    return history


@pytest.mark.parametrize("outcome", ["committed", "aborted", "unknown"])
def test_an_acknowledged_transactional_record_missing_from_the_log_is_a_finding(
    outcome: str,
) -> None:
    txn = Txn("tx7", {0: ["tx7-0", "tx7-1"]}, outcome, {"tx7-0": (0, 4), "tx7-1": (0, 5)})
    kept: FinalRead = {0: {4: "tx7-0", 5: "tx7-1"}}
    lost: FinalRead = {0: {4: "tx7-0"}}
    forked: FinalRead = {0: {4: "tx7-0", 5: "tx9-0"}}
    finals: list[FinalRead] = [{0: {}}]

    def findings(log: FinalRead) -> list[str]:
        return check(history_of(txn), finals, [], 0.0, txn_log=log).findings["txn-lost-write"]

    assert findings(kept) == []
    assert findings(lost) == [f"'tx7-1' of tx7 ({outcome}) acked at p0 o5; the log holds nothing"]
    assert findings(forked) == [f"'tx7-1' of tx7 ({outcome}) acked at p0 o5; the log holds 'tx9-0'"]


def test_a_producer_served_nothing_after_the_cluster_settled_is_a_finding() -> None:
    history = History()
    for op in (
        Op("ck0", 0, 0, "ck0-0", 1.0),
        Op("ck0", 0, 2, "ck0-1", 9.0),
        Op("ck1", 0, 1, "ck1-0", 2.0),  # its last, before the cluster settled at 5.0
        Op("probe", 0, 3, "probe-0", 4.9),
    ):
        history.ack(op)
    finals: list[FinalRead] = [{0: {0: "ck0-0", 1: "ck1-0", 2: "ck0-1", 3: "probe-0"}}] * 2
    report = check(history, finals, [], 0.0, settled=5.0)
    assert report.findings["stalled"] == [
        "ck1: last acknowledged t=2.0 s, nothing after the cluster settled at t=5.0 s"
    ]
    assert dict(check(history, finals, [], 0.0).findings).get("stalled", []) == []


def test_a_committed_transaction_partly_hidden_names_where_its_records_are() -> None:
    txn = Txn("tx79", {0: ["tx79-0"], 3: ["tx79-1"]}, "committed",
              {"tx79-0": (0, 40), "tx79-1": (3, 41)})  # fmt: skip
    finals: list[FinalRead] = [{0: {}}]
    shown: FinalRead = {0: {40: "tx79-0"}, 3: {}}
    report = check(history_of(txn), finals, [], 0.0, txn_final=shown)
    assert report.findings["txn-committed-missing"] == ["tx79: missing 'tx79-1' (acked at p3 o41)"]


def test_a_transaction_never_decided_is_a_finding() -> None:
    txn = Txn("tx5", {2: ["tx5-0"]}, "committed", {"tx5-0": (2, 7)})
    log: FinalRead = {2: {7: "tx5-0"}}
    finals: list[FinalRead] = [{0: {}}]
    report = check(history_of(txn), finals, [], 0.0, txn_log=log, txn_open={2: (7, 9)})
    assert report.findings["txn-undecided"] == [
        "p2: last stable offset 7 below the high watermark 9; "
        "the open transaction's first record there: 'tx5-0'"
    ]
    assert not check(history_of(txn), finals, [], 0.0, txn_log=log, txn_open={}).findings
