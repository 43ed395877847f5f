"""A consume-transform-produce application, run as a child process by the EOS crash test.

Usage: ``eos_worker.py BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID IDLE_EXIT_S``

Reads INPUT in GROUP (read_committed, no auto commit), writes ``out-<value>`` to the
same partition of OUTPUT and commits the consumed offsets in the same transaction
(``send_offsets_to_transaction``). Exits 0 after IDLE_EXIT_S seconds without input. A
``kill -9`` at any moment must neither lose nor duplicate output.
"""

from __future__ import annotations

import sys
import time

import confluent_kafka as ck


def main(bootstrap: str, topics: tuple[str, str], group: str, tid: str, idle_s: float) -> None:
    source, sink = topics
    common = {"bootstrap.servers": bootstrap, "broker.address.family": "v4"}
    producer = ck.Producer({**common, "transactional.id": tid, "linger.ms": 5})
    producer.init_transactions(60)
    consumer = ck.Consumer(
        {
            **common,
            "group.id": group,
            "group.instance.id": f"{tid}-member",
            "session.timeout.ms": 6000,
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
        producer.send_offsets_to_transaction(
            consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 30
        )
        producer.commit_transaction(30)
        time.sleep(0.02)  # a paced stream, so that a kill lands mid-stream
    consumer.close()


if __name__ == "__main__":
    bootstrap, source, sink, group, tid, idle = sys.argv[1:7]
    main(bootstrap, (source, sink), group, tid, float(idle))
