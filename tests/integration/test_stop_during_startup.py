"""SIGTERM at any moment of a broker's start-up is a clean stop (exit code 0, its store
closed), never the signal's default action: an operator's ``kill``, a supervisor's
restart or a test's teardown may come while the broker is still opening its store or
starting its coordinators (a CI failure: ``floe up exited with -15 after SIGTERM`` when
the admin API already answered but the Kafka listener was not bound yet). The next start
opens cleanly on the same data directory.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from helpers.admin import create_topic
from helpers.broker import Broker
from helpers.clients import confluent_produce
from helpers.records import sample_records


def this_start(b: Broker) -> str:
    """The log of ``b``'s latest start."""
    return b.stderr_text().rsplit(f"start #{b.starts} -----", 1)[1]


def signal_at(b: Broker, line: str, timeout_s: float = 60.0) -> None:
    """SIGTERM ``b`` as soon as ``line`` shows in the log of its current start."""
    deadline = time.monotonic() + timeout_s
    while line not in this_start(b):
        b.assert_alive()
        assert time.monotonic() < deadline, f"{line!r} not logged in {timeout_s} s"
        time.sleep(0.002)
    b.stop()  # SIGTERM, and exit code 0 asserted


@pytest.mark.parametrize("phase", ["store.opened", "admin.started"])
def test_sigterm_during_startup_stops_cleanly(
    engine_broker_factory: Callable[..., Broker], phase: str
) -> None:
    """SIGTERM once the store opened (the coordinators replay next), and once the admin
    API answers (a cluster's writer looks ready to a client then)."""
    b = engine_broker_factory()
    topic = create_topic(b.bootstrap, partitions=1)
    acked = confluent_produce(b.bootstrap, topic, sample_records(3, partition=0))
    b.stop()

    b.start(wait=False)
    signal_at(b, phase)
    assert "floe.stopped" in this_start(b)
    b.start()
    more = confluent_produce(b.bootstrap, topic, sample_records(1, partition=0))
    assert [r.offset for r in more] == [len(acked)]
