"""The takeover benchmark's bucket trace names every key the object store writes by its
kind (built here with the layout's own functions, so a new key shape shows up) and
tallies requests inside a time window."""

from __future__ import annotations

import uuid

from benchmarks.bucket_trace import Event, kind, tally
from pytest import approx

from floe.storage.object import layout

TOPIC = uuid.UUID(int=7)


def test_every_layout_key_has_its_kind() -> None:
    cases = {
        layout.TOPICS_KEY: "topics.json",
        layout.CLUSTER_ID_KEY: "cluster.id",
        layout.DATA_PREFIX: "data/",
        layout.topic_prefix(TOPIC): "data/<t>/",
        layout.partition_prefix(TOPIC, 3): "data/<t>/<p>/",
        layout.part_key(TOPIC, 3, 0, 10, 123): "data/<t>/<p>/<object>.log",
        layout.log_start_key(TOPIC, 3): "data/<t>/<p>/log-start",
        layout.snapshot_key(TOPIC, 3, 10): "data/<t>/<p>/<offset>.snapshot",
        layout.manifest_key(TOPIC, 3, 5, "2"): "data/<t>/<p>/<ns>-<broker>.manifest",
        layout.WAL_PREFIX: "wal/",
        layout.wal_folder("2"): "wal/<s>/",
        layout.wal_key("2", 5, 3): "wal/<s>/<seq>.wal",
        layout.WAL_FLOOR_PREFIX: "wal-floor/",
        layout.wal_floor_key("2"): "wal-floor/<s>/...",
        layout.TAKEOVER_PREFIX: "takeover/",
        layout.takeover_key("2", 4): "takeover/<s>/...",
    }
    assert {key: kind(key) for key in cases} == cases


def test_tally_counts_requests_started_in_the_window() -> None:
    events = [
        Event("list", "wal/", "state.py:f", 1.0, 1.1, pages=2, keys=1500),
        Event("get", "data/<t>/<p>/<object>.log", "state.py:g", 2.0, 2.5, bytes=10),
        Event("get", "data/<t>/<p>/<object>.log", "state.py:g", 3.0, 3.25, bytes=5),
        Event("get", "data/<t>/<p>/<object>.log", "state.py:g", 9.0, 9.5, bytes=99),
    ]
    got = tally(events, 1.0, 3.0)
    assert got == {
        "list wal/ <- state.py:f": {"requests": 2, "keys": 1500, "bytes": 0, "s": approx(0.1)},
        "get data/<t>/<p>/<object>.log <- state.py:g": {
            "requests": 2,
            "keys": 0,
            "bytes": 15,
            "s": approx(0.75),
        },
    }
