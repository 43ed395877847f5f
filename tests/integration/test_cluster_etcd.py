"""What the etcd metadata store adds to the contract (test_cluster_metadata.py): it fails
within its timeout and in one line naming the endpoint when etcd is down or frozen, and
the same store works again once etcd is back (a failed call's gRPC channel is closed: the
next call connects afresh). Also
what the contract does not race: concurrent acquires of one named lease, and a claim of
an ownership value that another writer encoded differently.

One etcd for the module; tests that stop or freeze it always bring it back.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import pytest

from floe.cluster.etcd import EtcdMetadataStore
from floe.cluster.interface import BrokerInfo, Lease, MetadataUnavailableError, Ownership
from floe.errors import ConfigError
from floe.types import PartitionId, TopicName
from helpers.cluster_etcd import EtcdServer, etcd_server

TIMEOUT_S = 1.0
SLACK_S = 0.5
"""How late past its timeout a failing call may return (thread wake-ups, a loaded box)."""
T = TopicName("orders")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    with etcd_server(tmp_path_factory.mktemp("etcd")) as running:
        yield running


@pytest.fixture
def stores(
    server: EtcdServer, request: pytest.FixtureRequest
) -> Iterator[Callable[..., EtcdMetadataStore]]:
    """Clients under a key prefix of the test's own, closed at its end."""
    made: list[EtcdMetadataStore] = []

    def make(endpoints: str = server.endpoint) -> EtcdMetadataStore:
        made.append(EtcdMetadataStore(endpoints, f"{request.node.name}/", TIMEOUT_S))
        return made[-1]

    yield make
    for store in made:
        store.close()


def timed_failure(call: Callable[[], object]) -> tuple[float, str]:
    started = time.monotonic()
    with pytest.raises(MetadataUnavailableError) as caught:
        call()
    return time.monotonic() - started, str(caught.value)


@contextmanager
def dead_port() -> Iterator[int]:
    """A 127.0.0.1 port nobody listens on (bound but not listening, for the block)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


def assert_one_line(message: str, endpoint: str) -> None:
    assert "\n" not in message, message
    assert f"etcd at {endpoint}" in message, message


def test_a_stopped_etcd_fails_fast_in_one_line(
    stores: Callable[..., EtcdMetadataStore], server: EtcdServer
) -> None:
    store = stores()
    store.register(BrokerInfo(1, "127.0.0.1", 9001), 30.0)
    held = store.acquire("group:g", 1, 30.0)
    assert held is not None
    server.stop()
    try:
        calls: list[Callable[[], object]] = [
            store.live_brokers,
            store.keepalive,
            lambda: store.claim(T, PartitionId(0), 1, None),
            lambda: store.renew(held, 30.0),
        ]
        for call in calls:
            took, message = timed_failure(call)
            assert took < TIMEOUT_S + SLACK_S, message
            assert_one_line(message, server.endpoint)
            assert "refused" in message, message
    finally:
        server.start()
    # the same store works again at once: the registration outlived the outage
    store.keepalive()
    assert store.live_brokers() == [BrokerInfo(1, "127.0.0.1", 9001)]
    assert store.renew(held, 30.0)
    store.release(held)
    store.unregister()


def test_a_store_works_at_once_when_etcd_is_back_after_a_long_outage(
    stores: Callable[..., EtcdMetadataStore], server: EtcdServer
) -> None:
    """A broker calls its store all through an outage of etcd (renewals, commits). gRPC
    backs off its reconnects after each failure (to two minutes), so a channel kept
    through the outage would fail calls for seconds after etcd came back."""
    store = stores()
    store.register(BrokerInfo(1, "127.0.0.1", 9001), 60.0)
    server.stop()
    try:
        calls = 0
        until = time.monotonic() + 10.0
        while time.monotonic() < until:
            timed_failure(store.live_brokers)
            calls += 1
            time.sleep(0.2)
        assert calls > 20
    finally:
        server.start()
    assert store.live_brokers() == [BrokerInfo(1, "127.0.0.1", 9001)]
    store.keepalive()
    store.unregister()


def test_a_frozen_etcd_fails_within_the_timeout(
    stores: Callable[..., EtcdMetadataStore], server: EtcdServer
) -> None:
    store = stores()
    assert store.claim(T, PartitionId(0), 1, None) == Ownership(1, 1)
    with server.frozen():
        took, message = timed_failure(store.owners)
        assert TIMEOUT_S - 0.1 <= took < TIMEOUT_S + SLACK_S, message
        assert_one_line(message, server.endpoint)
        assert f"no answer within {TIMEOUT_S:g} s" in message
        # a call of several requests shares one deadline
        took, message = timed_failure(lambda: store.acquire("table:orders", 1, 5.0))
        assert took < TIMEOUT_S + SLACK_S, message
    assert store.owners() == {(T, PartitionId(0)): Ownership(1, 1)}
    store.forget(T)


def test_a_dead_endpoint_moves_the_store_to_the_next(
    stores: Callable[..., EtcdMetadataStore], server: EtcdServer
) -> None:
    with dead_port() as dead:
        store = stores(f"127.0.0.1:{dead},{server.endpoint}")
        took, message = timed_failure(store.live_brokers)  # not retried: it may be a write
        assert took < TIMEOUT_S + SLACK_S, message
        assert_one_line(message, f"127.0.0.1:{dead}")
        assert store.live_brokers() == []  # the next call goes to the live endpoint


def test_bad_settings_are_config_errors(server: EtcdServer) -> None:
    for endpoints in ("", "localhost", "localhost:http", "h:99999"):
        with pytest.raises(ConfigError):
            EtcdMetadataStore(endpoints)
    with pytest.raises(ConfigError):
        EtcdMetadataStore(server.endpoint, timeout_s=0)


def test_a_registration_replaced_by_its_own_store_keeps_one_lease(
    stores: Callable[..., EtcdMetadataStore],
) -> None:
    a, b = stores(), stores()
    a.register(BrokerInfo(7, "127.0.0.1", 9007), 30.0)
    a.register(BrokerInfo(7, "127.0.0.1", 9997), 30.0)  # a new address, same broker
    assert b.live_brokers() == [BrokerInfo(7, "127.0.0.1", 9997)]
    a.keepalive()
    a.unregister()
    assert b.live_brokers() == []


def test_the_prefix_separates_clusters(
    stores: Callable[..., EtcdMetadataStore], server: EtcdServer
) -> None:
    mine = stores()
    other = EtcdMetadataStore(server.endpoint, "another-cluster/", TIMEOUT_S)
    try:
        assert mine.claim(T, PartitionId(0), 1, None) == Ownership(1, 1)
        assert other.owners() == {}
        assert other.claim(T, PartitionId(0), 2, None) == Ownership(2, 1)
        other.forget(T)
        assert mine.owners() == {(T, PartitionId(0)): Ownership(1, 1)}
    finally:
        other.close()


def test_racing_acquires_have_one_winner(stores: Callable[..., EtcdMetadataStore]) -> None:
    clients = [stores() for _ in range(6)]
    epochs = []
    for round_ in range(3):

        def race(i: int, name: str = f"group:g{round_ % 2}") -> Lease | None:
            return clients[i].acquire(name, i, 30.0)

        with ThreadPoolExecutor(len(clients)) as pool:
            won = [w for w in pool.map(race, range(len(clients))) if w is not None]
        assert len(won) == 1, f"round {round_}: {won}"
        epochs.append(won[0].epoch)
        clients[won[0].holder].release(won[0])
    assert epochs == [1, 1, 2]  # per name, one more for every new holder


def test_an_ownership_written_in_another_form_is_still_claimed(
    stores: Callable[..., EtcdMetadataStore], server: EtcdServer, request: pytest.FixtureRequest
) -> None:
    import grpc
    from etcd3.etcdrpc import rpc_pb2, rpc_pb2_grpc

    store = stores()
    with grpc.insecure_channel(server.endpoint) as channel:
        # same ownership, other key order and spacing (another writer's JSON)
        key = f"{request.node.name}/owners/{T}/0".encode()
        put = rpc_pb2.PutRequest(key=key, value=b'{"owner": 3, "epoch": 4}')
        rpc_pb2_grpc.KVStub(channel).Put(put, timeout=5)
    assert store.owners() == {(T, PartitionId(0)): Ownership(3, 4)}
    assert store.claim(T, PartitionId(0), 1, Ownership(3, 3)) is None
    assert store.claim(T, PartitionId(0), 1, Ownership(3, 4)) == Ownership(1, 5)
    assert store.claim(T, PartitionId(0), 2, Ownership(3, 4)) is None
