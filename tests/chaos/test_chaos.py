"""Jepsen-style fault injection (issue 29): three brokers sharing partitions on
SeaweedFS, with etcd (and, in ``make chaos``, PostgreSQL) as the metadata store, under
faults drawn from a seed, while idempotent producers (confluent-kafka and Apache's Java
client), a consumer group committing offsets and a transactional producer run. After
the last fault everything is healed, the cluster must settle (every partition takes a
new record), and the checker (helpers/chaos_checker.py) reads every partition back and
fails on any lost write, duplicate, inconsistent offset, poll skip or broken
transaction, with the evidence.

The run prints its seed; ``FLOE_CHAOS_SEED`` replays a plan. ``make test`` runs the
short version (FLOE_CHAOS_FAULTS default 8: every nemesis kind once; etcd only, about 1.5
minutes); ``make chaos`` the long one through these variables:

* ``FLOE_CHAOS_FAULTS``: faults per metadata store (``make chaos``: 100);
* ``FLOE_CHAOS_STORES``: ``etcd``, ``postgres`` or both, comma-separated;
* ``FLOE_CHAOS_SEED``: the seed (default: random, printed);
* ``FLOE_CHAOS_JAVA``: ``0`` leaves the Java producer out;
* ``FLOE_CHAOS_LOGS``: a directory to copy the brokers' logs into after a run.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, OffsetSpec

from helpers.admin import create_topic
from helpers.chaos_checker import PROBE, FinalRead, check, summary
from helpers.chaos_cluster import BROKERS, ChaosCluster, chaos_cluster, keep_logs, log_lines
from helpers.chaos_nemesis import Fault, apply, heal_all, kinds, schedule
from helpers.chaos_workload import History, Op, Workload
from helpers.cluster import leaders_as_answered_by, wait_for
from helpers.java import FloeJava, floe_clients

FAULTS = int(os.environ.get("FLOE_CHAOS_FAULTS", "8"))
STORES = os.environ.get("FLOE_CHAOS_STORES", "etcd").split(",")
SEED = int(os.environ.get("FLOE_CHAOS_SEED") or random.SystemRandom().randrange(10**6))
JAVA = os.environ.get("FLOE_CHAOS_JAVA", "1") != "0"
PARTITIONS = 6
"""Two per broker."""
SETTLE_S = 120.0
"""After the last heal: time for every partition to take a record again."""
CATCH_UP_S = 90.0
RECOVER_S = 60.0
"""After the cluster settled: time for every producer to be acknowledged again (else the
checker's ``stalled`` finding)."""

LEADER_MOVING = {
    ck.KafkaError.NOT_LEADER_FOR_PARTITION,
    ck.KafkaError.LEADER_NOT_AVAILABLE,
    ck.KafkaError._TRANSPORT,
}
"""What a partition's leader answers while it moves."""

pytestmark = [pytest.mark.timeout(600 + 40 * FAULTS)]


@pytest.fixture(scope="module")
def java(tmp_path_factory: pytest.TempPathFactory) -> FloeJava | None:
    return floe_clients(tmp_path_factory) if JAVA else None


def settle(cluster: ChaosCluster, topic: str, history: History) -> float:
    """Seconds until every partition of ``topic`` acknowledged a probe record (each
    recorded as an acknowledgement of client ``probe``, so the checker checks it too).

    Raises:
        AssertionError: not within SETTLE_S.
    """
    started = time.monotonic()
    producer = ck.Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "message.timeout.ms": int(SETTLE_S * 1000),
            "broker.address.family": "v4",
        }
    )
    done: set[int] = set()

    def delivered(err: ck.KafkaError | None, msg: ck.Message) -> None:
        if err is None:
            value = (msg.value() or b"").decode()
            history.ack(Op(PROBE, msg.partition(), msg.offset(), value, time.monotonic()))
            done.add(msg.partition())

    for p in range(PARTITIONS):
        producer.produce(topic, f"probe-{p}".encode(), partition=p, on_delivery=delivered)
    producer.flush(SETTLE_S)
    took = time.monotonic() - started
    assert done == set(range(PARTITIONS)), (
        f"the cluster did not settle: partitions {sorted(set(range(PARTITIONS)) - done)} took "
        f"no record within {SETTLE_S:g} s of the last heal"
    )
    return took


def high_watermark(consumer: ck.Consumer, topic: str, partition: int) -> int:
    """The partition's high watermark, asked again while its leader answers a retriable
    error: a balancing pass may be moving it (the metadata names the new owner while it
    opens the partition, NOT_LEADER_OR_FOLLOWER until it serves), as Kafka's clients
    retry through a leader change.

    Raises:
        AssertionError: still refused RECOVER_S after the first answer, the partition is
            unserved.
    """
    deadline = time.monotonic() + RECOVER_S
    while True:
        try:
            return int(consumer.get_watermark_offsets(ck.TopicPartition(topic, partition), 30)[1])
        except ck.KafkaException as e:
            error = e.args[0]
            if error.code() not in LEADER_MOVING or time.monotonic() > deadline:
                raise AssertionError(
                    f"{topic} [{partition}] unserved {RECOVER_S:g} s after the cluster "
                    f"settled: {error}"
                ) from e
            print(f"chaos: {topic} [{partition}]: {error.str()}, asked again in 1 s")
            time.sleep(1)


def read_all(bootstrap: str, topic: str, isolation: str = "read_uncommitted") -> FinalRead:
    """Every record of ``topic``, each partition from its start to its high watermark
    (read_committed: to its last stable offset, which a librdkafka consumer's position
    passes with the markers and aborted records)."""
    consumer = ck.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"chaos-check-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "broker.address.family": "v4",
        }
    )
    got: FinalRead = {p: {} for p in range(PARTITIONS)}
    try:
        ends = {p: high_watermark(consumer, topic, p) for p in range(PARTITIONS)}
        consumer.assign([ck.TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            positions = {tp.partition: tp.offset for tp in consumer.position(
                [ck.TopicPartition(topic, p) for p in range(PARTITIONS)])}  # fmt: skip
            if all(positions[p] >= ends[p] for p in range(PARTITIONS)):
                break
            msg = consumer.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            got[msg.partition()][msg.offset()] = (msg.value() or b"").decode()
        else:
            raise AssertionError(f"{topic}: read {sum(map(len, got.values()))} records; "
                                 f"{isolation} ends {ends}, reached {positions}")  # fmt: skip
    finally:
        consumer.close()
    return got


def undecided(bootstrap: str, topic: str) -> dict[int, tuple[int, int]]:
    """The partitions of ``topic`` whose last stable offset is below their high
    watermark (an open transaction, or one whose markers are not written yet), as
    (last stable offset, high watermark); a partition whose leader did not answer
    counts too, with -1."""
    client = AdminClient({"bootstrap.servers": bootstrap, "broker.address.family": "v4"})
    ends: dict[int, list[int]] = {p: [-1, -1] for p in range(PARTITIONS)}
    levels = (ck.IsolationLevel.READ_COMMITTED, ck.IsolationLevel.READ_UNCOMMITTED)
    for i, level in enumerate(levels):
        asked = {ck.TopicPartition(topic, p): OffsetSpec.latest() for p in range(PARTITIONS)}
        for tp, future in client.list_offsets(asked, isolation_level=level).items():
            with contextlib.suppress(ck.KafkaException):  # a leader moving: asked again
                ends[tp.partition][i] = future.result(30).offset
    return {p: (lso, hw) for p, (lso, hw) in ends.items() if lso < 0 or lso < hw}


def wait_decided(bootstrap: str, topic: str) -> dict[int, tuple[int, int]]:
    """Wait up to RECOVER_S for every transaction on ``topic`` to be decided, and print
    how long that took. A coordinator answers EndTxn once the outcome is durable and may
    write a marker later (Kafka's do too), so read_committed shows a committed
    transaction only then. Returns the partitions still undecided (:func:`undecided`;
    none when every transaction was)."""
    started = time.monotonic()
    first = left = undecided(bootstrap, topic)
    while left and time.monotonic() - started < RECOVER_S:
        time.sleep(0.5)
        left = undecided(bootstrap, topic)
    waited = time.monotonic() - started
    seen = f"; undecided at first: {first}" if first else ""
    print(f"chaos: every transaction decided (waited {waited:.1f} s{seen})" if not left
          else f"chaos: transactions still undecided after {waited:.0f} s: {left}")  # fmt: skip
    return left


def dump(where: Path, history: History, finals: list[FinalRead], faults: list[Fault],
         t0: float) -> None:  # fmt: skip
    """The run's history as JSON lines in ``where/history.jsonl`` (times from the start;
    the transactions last, with where each acknowledged record went): for reading a
    finding's evidence after the run."""
    where.mkdir(parents=True, exist_ok=True)
    with (where / "history.jsonl").open("w") as out:
        for f in faults:
            out.write(json.dumps({"fault": str(f), "t": round(f.started - t0, 3)}) + "\n")
        for kind, ops in (("ack", history.acks), ("read", history.reads)):
            for op in ops:
                row = {kind: op.client, "p": op.partition, "o": op.offset, "v": op.value,
                       "t": round(op.t - t0, 3)}  # fmt: skip
                out.write(json.dumps(row) + "\n")
        for i, final in enumerate(finals):
            for p, records in final.items():
                for o, v in records.items():
                    out.write(json.dumps({"final": i, "p": p, "o": o, "v": v}) + "\n")
        for txn in history.txns:
            row = {"txn": txn.name, "outcome": txn.outcome, "values": txn.values,
                   "acked": txn.acked}  # fmt: skip
            out.write(json.dumps(row) + "\n")


@pytest.fixture(params=STORES)
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ChaosCluster]:
    with chaos_cluster(tmp_path, request.param) as made:
        try:
            yield made
        finally:
            if os.environ.get("FLOE_CHAOS_LOGS"):
                keep_logs(made, Path(os.environ["FLOE_CHAOS_LOGS"]) / f"{request.param}-{SEED}")


def test_no_acknowledged_record_is_lost_or_forked_under_faults(
    cluster: ChaosCluster, java: FloeJava | None
) -> None:
    """Any finding fails the run, the short one inside ``make test`` as ``make chaos``:
    the seed it prints replays it (``FLOE_CHAOS_SEED``), and every failure names it, not
    only the checker's (a client that never finishes fails before the checker runs)."""
    try:
        run_chaos(cluster, java)
    except BaseException as exc:
        exc.add_note(f"chaos: seed {SEED} (FLOE_CHAOS_SEED={SEED}), store {cluster.store.kind}")
        raise


def run_chaos(cluster: ChaosCluster, java: FloeJava | None) -> None:
    rng = random.Random(SEED)
    plan = schedule(rng, FAULTS)
    print(f"\nchaos: seed {SEED} (FLOE_CHAOS_SEED), store {cluster.store.kind}, "
          f"{FAULTS} faults: {plan}")  # fmt: skip
    if "clock" not in kinds():
        print("chaos: no clock nemesis: libfaketime is not installed (apt-get install faketime)")
    bootstrap = cluster.brokers[0].bootstrap
    topic = create_topic(bootstrap, f"chaos-{uuid.uuid4().hex[:6]}", PARTITIONS)
    txn_topic = create_topic(bootstrap, f"chaos-tx-{uuid.uuid4().hex[:6]}", PARTITIONS)
    wait_for(
        "every broker leads a partition",
        lambda: len(set(leaders_as_answered_by(bootstrap, topic).values())) == BROKERS,
        60,
    )
    workload = Workload(cluster.bootstrap, topic, txn_topic, PARTITIONS, SEED, java)
    faults: list[Fault] = []
    exits: list[tuple[float, str]] = []
    t0 = time.monotonic()
    try:
        workload.start()
        wait_for("records flow", lambda: len(workload.history.acks) > 100, 60)
        for i, kind in enumerate(plan):
            time.sleep(rng.uniform(2, 6))
            exits += cluster.reap()
            fault = apply(cluster, kind, rng)
            faults.append(fault)
            print(f"chaos: t={fault.started - t0:6.1f} s fault {i + 1}/{FAULTS}: {fault}")
        exits += cluster.reap()
        heal_all(cluster)
        settled = settle(cluster, topic, workload.history)
        settled_at = time.monotonic()
        exits += cluster.reap()
        print(f"chaos: settled {settled:.1f} s after the last heal")
        with contextlib.suppress(AssertionError):  # the checker names who stalled
            wait_for(
                "every producer acknowledged again",
                lambda: all(
                    max(workload.history.ack_times(c)) > settled_at
                    for c in workload.history.producers()
                    if c != PROBE  # its records are sent once, before the cluster settled
                ),
                RECOVER_S,
            )
        time.sleep(3)
        end = time.monotonic()
        workload.stop_producers()
        acked = {op.value for op in workload.history.acks}
        with contextlib.suppress(AssertionError):  # the checker names what it missed
            wait_for(
                "the group read every acknowledged record",
                lambda: acked <= {op.value for op in workload.history.reads},
                CATCH_UP_S,
            )
    finally:
        workload.stop()
    finals = [read_all(cluster.bootstrap, topic)]
    time.sleep(2)
    finals.append(read_all(cluster.bootstrap, topic))
    txn_open = wait_decided(cluster.bootstrap, txn_topic)
    txn_final = read_all(cluster.bootstrap, txn_topic, "read_committed")
    txn_log = read_all(cluster.bootstrap, txn_topic)
    exits += cluster.reap()
    report = check(
        workload.history, finals, faults, t0, txn_final=txn_final, txn_log=txn_log, exits=exits,
        settled=settled_at, txn_open=txn_open,
    )  # fmt: skip
    table = summary(workload.history, faults, end)
    if os.environ.get("FLOE_CHAOS_LOGS"):
        dump(Path(os.environ["FLOE_CHAOS_LOGS"]) / f"{cluster.store.kind}-{SEED}", workload.history,
             finals, faults, t0)  # fmt: skip
    print(f"chaos: seed {SEED}, store {cluster.store.kind}\n{table}\n{report.render()}")
    if any(kind.startswith("txn-") and found for kind, found in report.findings.items()):
        print("chaos: the coordinators' and leaders' transaction warnings:", end="\n  ")
        print("\n  ".join(log_lines(cluster, "txn.")) or "none")
    assert report.ok, (
        f"seed {SEED} (FLOE_CHAOS_SEED={SEED}), store {cluster.store.kind}, faults:\n"
        + "\n".join(f"  t={f.started - t0:.1f} s {f}" for f in faults)
        + f"\n{table}\n{report.render()}"
    )
