"""A consume-transform-produce application, run as a child process by the EOS crash test.

Usage: ``eos_worker.py BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID IDLE_EXIT_S [SESSION_MS]``

Reads INPUT in GROUP (read_committed, no auto commit), writes ``out-<value>`` to the
same partition of OUTPUT and commits the consumed offsets in the same transaction
(``send_offsets_to_transaction``), as a static member (``group.instance.id``) whose
session lasts SESSION_MS (6,000 unless given). Exits 0 after IDLE_EXIT_S seconds
without input. A ``kill -9`` at any moment must neither lose nor duplicate output.
``FLOE_EOS_WORKER_DEBUG`` names librdkafka debug contexts to log (e.g. ``eos,cgrp``).

A transactional call that overstays its timeout by :data:`GRACE_S` ends the process
(exit code :data:`HUNG`), as an operator's health check would restart the
application: librdkafka's ``send_offsets_to_transaction`` can hang past its timeout
when the group's coordinator broker left the cluster's metadata (librdkafka issues
5456 and 5511, open in 2.16), which a killed broker does.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import confluent_kafka as ck

TXN_TIMEOUT_S = 30
GRACE_S = 15
HUNG = 3


def _hung(what: str) -> None:
    print(f"eos_worker: {what} hung past its timeout: exiting", file=sys.stderr, flush=True)
    os._exit(HUNG)


@contextmanager
def watchdog(what: str) -> Iterator[None]:
    """Exit the process if the block overstays :data:`TXN_TIMEOUT_S` + :data:`GRACE_S`."""
    timer = threading.Timer(TXN_TIMEOUT_S + GRACE_S, _hung, args=(what,))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def main(
    bootstrap: str, topics: tuple[str, str], group: str, tid: str, *, idle_s: float, session_ms: int
) -> None:
    source, sink = topics
    common = {"bootstrap.servers": bootstrap, "broker.address.family": "v4"}
    if debug := os.environ.get("FLOE_EOS_WORKER_DEBUG"):  # librdkafka's debug contexts
        common.update({"debug": debug, "log_level": 7})
    producer = ck.Producer({**common, "transactional.id": tid, "linger.ms": 5})
    producer.init_transactions(60)
    consumer = ck.Consumer(
        {
            **common,
            "group.id": group,
            "group.instance.id": f"{tid}-member",
            "session.timeout.ms": session_ms,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe([source])
    last_input = time.monotonic()
    while time.monotonic() - last_input < idle_s:
        msgs = [m for m in consumer.consume(50, 0.5) if not m.error()]
        if not msgs:
            continue
        last_input = time.monotonic()
        producer.begin_transaction()
        for m in msgs:
            producer.produce(sink, value=b"out-" + m.value(), partition=m.partition())
        with watchdog("send_offsets_to_transaction"):
            producer.send_offsets_to_transaction(
                consumer.position(consumer.assignment()),
                consumer.consumer_group_metadata(),
                TXN_TIMEOUT_S,
            )
        with watchdog("commit_transaction"):
            producer.commit_transaction(TXN_TIMEOUT_S)
        time.sleep(0.02)  # a paced stream, so that a kill lands mid-stream
    consumer.close()


if __name__ == "__main__":
    bootstrap, source, sink, group, tid, idle = sys.argv[1:7]
    session = int(sys.argv[7]) if len(sys.argv) > 7 else 6000
    main(bootstrap, (source, sink), group, tid, idle_s=float(idle), session_ms=session)
