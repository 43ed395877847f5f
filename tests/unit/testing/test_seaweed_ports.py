"""The ports handed to ``weed mini``: it derives each service's gRPC port as the HTTP
port + 10000 and refuses to start when one of the ports it was given is another's
derived gRPC port ("port P for Volume ... is reserved for gRPC calculation")."""

from __future__ import annotations

from floe.testing.seaweed import pick_ports


def test_no_port_is_another_ports_grpc_port() -> None:
    # the OS offered 42489 and then 52489: weed would take 52489 as 42489's gRPC port
    offered = iter([42489, 52489, 32489, 42489, 43000, 53001, 44000, 45000, 46000])
    ports = pick_ports(5, lambda: next(offered), lambda port: True)
    taken = set(ports) | {p + 10000 for p in ports}
    assert len(taken) == 2 * len(ports), ports
    assert ports == [42489, 43000, 53001, 44000, 45000]


def test_ports_whose_grpc_port_is_busy_are_skipped() -> None:
    offered = iter([30000, 60000, 31000, 32000])
    ports = pick_ports(2, lambda: next(offered), lambda port: port != 40000)
    assert ports == [31000, 32000]  # 30000's gRPC port is busy, 60000 has none
