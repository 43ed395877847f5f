"""Ports for the servers of a test come from a slice of their own, per pytest-xdist
worker, below the OS's ephemeral range (``floe.testing.ports.free_ports``).

A CI run (two workers) failed ``test_delete_records_and_deleted_topics_reach_the_bucket``:
librdkafka read "Invalid response size 1213486160" ("HTTP") from the broker's Kafka port.
The port had been free when the test picked it with bind(0), and an HTTP server of the
other worker (which picks its ports the same way, from the same range the OS also gives
every outgoing connection) bound it first. Ports no other worker hands out, outside the
range the OS hands out by itself, cannot be taken that way."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from floe.testing.ports import free_ports


def ephemeral_low() -> int:
    return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])


@pytest.mark.parametrize("worker", ["gw0", "gw1", None])
def test_ports_are_below_the_ephemeral_range_and_bindable(
    monkeypatch: pytest.MonkeyPatch, worker: str | None
) -> None:
    if worker is None:
        monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    else:
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
    ports = free_ports(20)
    assert len(set(ports)) == 20
    assert all(1024 < p < ephemeral_low() for p in ports), ports
    for p in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))


def test_two_workers_never_pick_the_same_port(monkeypatch: pytest.MonkeyPatch) -> None:
    picked: dict[str, set[int]] = {}
    for worker in ("gw0", "gw1"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        picked[worker] = {p for _ in range(10) for p in free_ports(30)}
    assert not picked["gw0"] & picked["gw1"]


def test_processes_sharing_a_slice_start_apart() -> None:
    """Test runs outside pytest-xdist (a chaos run beside a single test, ``floe dev
    cluster`` beside a test) share one slice. A chaos run restarts etcd on the ports it
    had; walking the slice from its first port, another process picked the same port
    while etcd was down, so etcd could not come back ('bind: address already in use')
    and its brokers saw every connection to it refused for the rest of the run. Each
    process starts its walk at a place of its own."""
    pick = "from floe.testing.ports import free_ports; print(free_ports(1)[0])"
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_XDIST_WORKER"}
    firsts = {
        int(subprocess.run([sys.executable, "-c", pick], env=env, capture_output=True,
                           text=True, check=True).stdout)
        for _ in range(3)
    }  # fmt: skip
    assert len(firsts) == 3, firsts
