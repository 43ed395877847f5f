"""SASL_SSL (SCRAM and PLAIN), mTLS and PLAINTEXT listeners side by side on one
``floe up``, judged by the four clients users run: confluent-kafka, kafka-python,
aiokafka and kcat, each with its own TLS and SASL code.

One broker for the module: ``listeners`` PLAINTEXT + SASL_SSL + SSL (client
certificates required), certificates from a CA made in the test, a bootstrap admin from
config, and users created through Kafka's AlterUserScramCredentials by ``floe user``.
"""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest

from helpers.admin import create_topic, unique_topic
from helpers.broker import Broker, fresh_ports
from helpers.certs import Pki, make_pki
from helpers.clients import CONSUMERS, PRODUCERS
from helpers.records import Record

ADMIN, ADMIN_PASSWORD = "admin", "admin-secret"
ALICE, ALICE_PASSWORD = "alice", "alice-secret"
N = 20


@dataclass
class Secure:
    broker: Broker
    pki: Pki
    sasl: str
    """host:port of the SASL_SSL listener."""
    ssl: str
    """host:port of the SSL listener (client certificates required)."""
    admin_config: Path
    """Client properties of the bootstrap admin (for ``floe user``)."""


def floe(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    exe = str(Path(sys.executable).with_name("floe"))
    return subprocess.run(
        [exe, *args], input=stdin, capture_output=True, text=True, timeout=60, check=False
    )


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secure]:
    root = tmp_path_factory.mktemp("secure")
    pki = make_pki(root / "pki")
    b = Broker(root / "data")
    sasl_port, ssl_port = fresh_ports(2)
    b.settings.update(
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{b.port},SASL_SSL://127.0.0.1:{sasl_port},"
            f"SSL://127.0.0.1:{ssl_port}",
            "ssl.certificate.location": str(pki.server_cert),
            "ssl.key.location": str(pki.server_key),
            "ssl.ca.location": str(pki.ca_cert),
            "ssl.client.auth": "required",
            "security.bootstrap.user": ADMIN,
            "security.bootstrap.password": ADMIN_PASSWORD,
            "auto.create.topics.enable": "false",
        }
    )
    admin_config = root / "admin.properties"
    admin_config.write_text(
        "# the bootstrap admin, as kafka-configs --command-config would take it\n"
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
        f"sasl.username={ADMIN}\nsasl.password={ADMIN_PASSWORD}\n"
        f"ssl.ca.location={pki.ca_cert}\n"
    )
    try:
        b.start()
        yield Secure(b, pki, f"127.0.0.1:{sasl_port}", f"127.0.0.1:{ssl_port}", admin_config)
        b.stop()
    finally:
        b.close()


def scram(client: str, pki: Pki, user: str, password: str, mechanism: str) -> dict[str, Any]:
    """SASL_SSL settings in ``client``'s own spelling."""
    if client in ("confluent", "kcat"):
        return {
            "security.protocol": "SASL_SSL", "sasl.mechanism": mechanism,
            "sasl.username": user, "sasl.password": password,
            "ssl.ca.location": str(pki.ca_cert),
        }  # fmt: skip
    if client == "kafka-python":
        return {
            "security_protocol": "SASL_SSL", "sasl_mechanism": mechanism,
            "sasl_plain_username": user, "sasl_plain_password": password,
            "ssl_cafile": str(pki.ca_cert),
        }  # fmt: skip
    from aiokafka.helpers import create_ssl_context

    return {
        "security_protocol": "SASL_SSL", "sasl_mechanism": mechanism,
        "sasl_plain_username": user, "sasl_plain_password": password,
        "ssl_context": create_ssl_context(cafile=str(pki.ca_cert)),
    }  # fmt: skip


def mtls(client: str, pki: Pki, cert: Path, key: Path) -> dict[str, Any]:
    """SSL-with-a-client-certificate settings in ``client``'s own spelling."""
    if client in ("confluent", "kcat"):
        return {
            "security.protocol": "SSL", "ssl.ca.location": str(pki.ca_cert),
            "ssl.certificate.location": str(cert), "ssl.key.location": str(key),
        }  # fmt: skip
    if client == "kafka-python":
        return {
            "security_protocol": "SSL", "ssl_cafile": str(pki.ca_cert),
            "ssl_certfile": str(cert), "ssl_keyfile": str(key),
        }  # fmt: skip
    from aiokafka.helpers import create_ssl_context

    return {
        "security_protocol": "SSL",
        "ssl_context": create_ssl_context(
            cafile=str(pki.ca_cert), certfile=str(cert), keyfile=str(key)
        ),
    }


def round_trip(client: str, bootstrap: str, topic: str, settings: Callable[[], dict[str, Any]]):
    """``client`` produces N records to partition 0 of ``topic`` and reads them back."""
    records = [Record(f"k{i}".encode(), f"{client}-{i}".encode(), partition=0) for i in range(N)]
    PRODUCERS[client](bootstrap, topic, records, **settings())
    got = CONSUMERS[client](bootstrap, topic, {0: N}, **settings())
    assert [(r.key, r.value) for r in got] == [(r.key, r.value) for r in records]


def test_floe_user_manages_scram_users_over_sasl_ssl(secure: Secure) -> None:
    """``floe user`` (AlterUserScramCredentials / DescribeUserScramCredentials) as the
    bootstrap admin over SASL_SSL; a wrong mechanism or unknown user is one line."""
    conn = ["--brokers", secure.sasl, "--client-config", str(secure.admin_config)]
    created = floe("user", "create", ALICE, "--password-stdin", *conn, stdin=ALICE_PASSWORD)
    assert created.returncode == 0, created.stderr
    temp = floe("user", "create", "temp", "--mechanism", "SCRAM-SHA-256", "--password",
                "x" * 12, "--iterations", "4096", *conn)  # fmt: skip
    assert temp.returncode == 0, temp.stderr
    listed = floe("user", "list", *conn, "--output", "json")
    assert listed.returncode == 0, listed.stderr
    users = {u["user"]: u["mechanisms"] for u in __import__("json").loads(listed.stdout)["users"]}
    assert users[ALICE] == [
        {"mechanism": "SCRAM-SHA-256", "iterations": 8192},
        {"mechanism": "SCRAM-SHA-512", "iterations": 8192},
    ]
    assert users["temp"] == [{"mechanism": "SCRAM-SHA-256", "iterations": 4096}]
    assert ADMIN in users
    few = floe("user", "create", "weak", "--password", "p", "--iterations", "100", *conn)
    assert few.returncode == 1
    assert (
        few.stderr.startswith("floe: error: UNACCEPTABLE_CREDENTIAL")
        and few.stderr.count("\n") == 1
    )
    deleted = floe("user", "delete", "temp", *conn)
    assert deleted.returncode == 0, deleted.stderr
    again = floe("user", "delete", "temp", *conn)
    assert (again.returncode, again.stderr) == (
        1,
        "floe: error: user 'temp' has no all credential\n",
    )


@pytest.mark.parametrize("client", ["confluent", "kafka-python", "aiokafka", "kcat"])
def test_clients_round_trip_over_sasl_ssl_scram_sha_512(secure: Secure, client: str) -> None:
    _ensure_alice(secure)
    topic = unique_topic(f"sasl-{client}")
    create_topic(secure.broker.bootstrap, topic, 1)
    round_trip(
        client, secure.sasl, topic,
        lambda: scram(client, secure.pki, ALICE, ALICE_PASSWORD, "SCRAM-SHA-512"),
    )  # fmt: skip


@pytest.mark.parametrize("client", ["confluent", "kafka-python", "aiokafka", "kcat"])
def test_clients_round_trip_over_mtls(secure: Secure, client: str) -> None:
    cert, key = secure.pki.client("bob", ou="eng")
    topic = unique_topic(f"mtls-{client}")
    create_topic(secure.broker.bootstrap, topic, 1)
    round_trip(client, secure.ssl, topic, lambda: mtls(client, secure.pki, cert, key))


def test_plain_and_scram_sha_256_work_too(secure: Secure) -> None:
    _ensure_alice(secure)
    topic = unique_topic("sasl-plain")
    create_topic(secure.broker.bootstrap, topic, 1)
    for mechanism in ("PLAIN", "SCRAM-SHA-256"):
        round_trip(
            "confluent", secure.sasl, topic,
            lambda m=mechanism: scram("confluent", secure.pki, ALICE, ALICE_PASSWORD, m),
        )  # fmt: skip
        topic = unique_topic("sasl-256")
        create_topic(secure.broker.bootstrap, topic, 1)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_a_wrong_password_fails_fast_with_an_authentication_error(
    secure: Secure, mechanism: str
) -> None:
    """librdkafka reports _AUTHENTICATION (not a timeout), and the broker holds each
    failure back only ``connection.failed.authentication.delay.ms``."""
    _ensure_alice(secure)
    errors: list[ck.KafkaError] = []
    settings = scram("confluent", secure.pki, ALICE, "wrong", mechanism)
    producer = ck.Producer(
        {"bootstrap.servers": secure.sasl, "error_cb": errors.append, **settings}
    )
    started = time.monotonic()
    while not errors and time.monotonic() - started < 20:
        producer.poll(0.1)
    assert errors, "no error reported in 20 s"  # an error, not a silent retry loop
    first = errors[0]
    assert first.code() == ck.KafkaError._AUTHENTICATION, first
    assert "Authentication failed during authentication due to invalid credentials" in first.str()


def test_kafka_python_and_aiokafka_and_kcat_see_a_wrong_password(
    secure: Secure, caplog: pytest.LogCaptureFixture
) -> None:
    """kafka-python retries a bootstrap until its own timeout, logging the broker's
    SaslAuthenticationFailedError at each try; aiokafka's start() and kcat fail."""
    _ensure_alice(secure)
    import kafka.errors
    from kafka import KafkaProducer

    with pytest.raises(kafka.errors.KafkaError):
        KafkaProducer(
            bootstrap_servers=secure.sasl, max_block_ms=5000,
            **scram("kafka-python", secure.pki, ALICE, "wrong", "SCRAM-SHA-512"),
        ).partitions_for("any")  # fmt: skip
    said = [r for r in caplog.records if "SaslAuthenticationFailedError" in r.getMessage()]
    assert said, "kafka-python never saw the authentication error"
    assert "invalid credentials" in said[0].getMessage()

    import asyncio

    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaError as AioKafkaError

    async def aio() -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=secure.sasl,
            **scram("aiokafka", secure.pki, ALICE, "wrong", "SCRAM-SHA-512"),
        )
        try:
            await producer.start()
        finally:
            await producer.stop()

    with pytest.raises(AioKafkaError):
        asyncio.run(asyncio.wait_for(aio(), 30))

    from helpers.clients import kcat_path

    settings = scram("kcat", secure.pki, ALICE, "wrong", "SCRAM-SHA-512")
    proc = subprocess.run(
        [kcat_path(), "-L", "-b", secure.sasl, "-m", "10",
         *[a for k, v in settings.items() for a in ("-X", f"{k}={v}")]],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode != 0 and "Authentication failed" in proc.stderr, proc.stderr


def test_a_client_without_a_certificate_cannot_use_the_mtls_listener(secure: Secure) -> None:
    """No certificate, or one of a CA the broker does not trust: the TLS handshake fails
    and librdkafka says so at once (not a timeout)."""
    other = (secure.pki.other_client_cert, secure.pki.other_client_key)
    for settings in (
        {"security.protocol": "SSL", "ssl.ca.location": str(secure.pki.ca_cert)},
        mtls("confluent", secure.pki, *other),
    ):
        errors: list[ck.KafkaError] = []
        producer = ck.Producer(
            {"bootstrap.servers": secure.ssl, "error_cb": errors.append, **settings}
        )
        started = time.monotonic()
        while not errors and time.monotonic() - started < 20:
            producer.poll(0.1)
        # TLS 1.3 checks the client's certificate after the client finished its side:
        # librdkafka sees the refusal as an SSL error or a closed connection
        refused = (ck.KafkaError._SSL, ck.KafkaError._TRANSPORT, ck.KafkaError._ALL_BROKERS_DOWN)
        assert errors and errors[0].code() in refused, errors
        del producer


def test_a_sasl_listener_answers_nothing_before_authentication(secure: Secure) -> None:
    """A Metadata request before SASL closes the connection (a TLS client that skips
    SASL learns nothing); ApiVersions is answered, as Kafka's brokers do."""
    import ssl

    context = ssl.create_default_context(cafile=str(secure.pki.ca_cert))
    host, port = secure.sasl.split(":")
    with (
        socket.create_connection((host, int(port)), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=host) as s,
    ):
        s.sendall(_request(18, 0, b""))  # ApiVersions v0
        size = struct.unpack(">i", _read(s, 4))[0]
        assert size > 6
        _read(s, size)
        s.sendall(_request(3, 1, struct.pack(">i", -1)))  # Metadata v1, all topics
        assert s.recv(4) == b""  # closed


def test_sasl_handshake_v0_is_followed_by_bare_tokens(secure: Secure) -> None:
    """SaslHandshake v0 (pre-KIP-152 clients): the PLAIN token goes as a bare
    size-prefixed frame, the broker answers with a bare (empty) token, then Kafka
    requests follow; a wrong password closes the connection."""
    import ssl

    _ensure_alice(secure)
    context = ssl.create_default_context(cafile=str(secure.pki.ca_cert))
    host, port = secure.sasl.split(":")
    mechanism = b"PLAIN"
    handshake = _request(17, 0, struct.pack(">h", len(mechanism)) + mechanism)
    for password, accepted in ((ALICE_PASSWORD, True), ("wrong", False)):
        with (
            socket.create_connection((host, int(port)), timeout=10) as raw,
            context.wrap_socket(raw, server_hostname=host) as s,
        ):
            s.sendall(handshake)
            answer = _read(s, struct.unpack(">i", _read(s, 4))[0])
            assert struct.unpack(">ih", answer[:6]) == (7, 0)  # correlation id, no error
            token = b"\0" + ALICE.encode() + b"\0" + password.encode()
            s.sendall(struct.pack(">i", len(token)) + token)
            if not accepted:
                assert s.recv(4) == b""  # closed after the failure delay
                continue
            assert _read(s, 4) == b"\0\0\0\0"  # a bare, empty token
            s.sendall(_request(3, 1, struct.pack(">i", -1)))  # Metadata v1
            size = struct.unpack(">i", _read(s, 4))[0]
            assert struct.unpack(">i", _read(s, size)[:4]) == (7,)


def test_a_failed_authentication_is_answered_before_the_broker_closes(secure: Secure) -> None:
    """After a failed SaslAuthenticate the broker leaves the closing to the client: a
    client that reads its socket late (kafka-python under load drops the bytes that
    arrive with the close) still reads the error. A client that never closes is
    closed by the broker a few seconds later."""
    import ssl

    _ensure_alice(secure)
    context = ssl.create_default_context(cafile=str(secure.pki.ca_cert))
    host, port = secure.sasl.split(":")
    mechanism = b"PLAIN"
    token = b"\0" + ALICE.encode() + b"\0wrong"
    with (
        socket.create_connection((host, int(port)), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=host) as s,
    ):
        s.sendall(_request(17, 1, struct.pack(">h", len(mechanism)) + mechanism))
        _read(s, struct.unpack(">i", _read(s, 4))[0])
        s.sendall(_request(36, 0, struct.pack(">i", len(token)) + token))
        time.sleep(1.0)  # a client slow to read its socket
        answer = _read(s, struct.unpack(">i", _read(s, 4))[0])
        correlation, code = struct.unpack(">ih", answer[:6])
        assert (correlation, code) == (7, 58)  # SASL_AUTHENTICATION_FAILED
        s.settimeout(0.5)
        with pytest.raises(TimeoutError):
            s.recv(1)  # still open: the client closes first
        s.settimeout(30)
        assert s.recv(1) == b""  # unless it never does


def test_the_plaintext_listener_stays_open_beside_them(secure: Secure) -> None:
    topic = unique_topic("plain")
    create_topic(secure.broker.bootstrap, topic, 1)
    round_trip("confluent", secure.broker.bootstrap, topic, dict)


def _ensure_alice(secure: Secure) -> None:
    conn = ["--brokers", secure.sasl, "--client-config", str(secure.admin_config)]
    made = floe("user", "create", ALICE, "--password", ALICE_PASSWORD, *conn)
    assert made.returncode == 0, made.stderr


def _request(api_key: int, version: int, body: bytes) -> bytes:
    client = b"test"
    header = struct.pack(">hhih", api_key, version, 7, len(client)) + client
    frame = header + body
    return struct.pack(">i", len(frame)) + frame


def _read(s: Any, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        assert chunk, "closed"
        out += chunk
    return out


def test_sessions_past_connections_max_reauth_ms_reauthenticate_or_reconnect(
    tmp_path: Path,
) -> None:
    """With ``connections.max.reauth.ms``, librdkafka re-authenticates on the same
    connection (KIP-368) and keeps producing; aiokafka, which does not, is disconnected
    at its first request after the expiry and carries on over a new connection. Every
    record is delivered either way."""
    pki = make_pki(tmp_path / "pki")
    b = Broker(tmp_path / "data")
    (sasl_port,) = fresh_ports(1)
    sasl = f"127.0.0.1:{sasl_port}"
    b.settings.update(
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{b.port},SASL_SSL://{sasl}",
            "ssl.certificate.location": str(pki.server_cert),
            "ssl.key.location": str(pki.server_key),
            "security.bootstrap.user": ALICE,
            "security.bootstrap.password": ALICE_PASSWORD,
            "connections.max.reauth.ms": "1500",
        }
    )
    try:
        b.start()
        topic = unique_topic("reauth")
        create_topic(b.bootstrap, topic, 1)
        settings = scram("confluent", pki, ALICE, ALICE_PASSWORD, "SCRAM-SHA-512")
        producer = ck.Producer({"bootstrap.servers": sasl, "linger.ms": 0, **settings})
        delivered: list[object] = []
        failed: list[object] = []
        until = time.monotonic() + 5
        sent = 0
        while time.monotonic() < until:
            producer.produce(
                topic, value=b"x",
                on_delivery=lambda e, m: (failed if e else delivered).append(e or m),
            )  # fmt: skip
            sent += 1
            producer.poll(0.1)
        assert producer.flush(20) == 0 and not failed, failed[:3]
        assert len(delivered) == sent
        del producer
        log = b.log_path.read_text()
        assert "sasl.reauthenticated" in log

        import asyncio

        from aiokafka import AIOKafkaProducer

        async def aio() -> int:
            p = AIOKafkaProducer(
                bootstrap_servers=sasl,
                **scram("aiokafka", pki, ALICE, ALICE_PASSWORD, "SCRAM-SHA-512"),
            )
            await p.start()
            try:
                n = 0
                for _ in range(4):
                    await p.send_and_wait(topic, b"y")
                    n += 1
                    await asyncio.sleep(1.0)
                return n
            finally:
                await p.stop()

        assert asyncio.run(asyncio.wait_for(aio(), 60)) == 4
        assert "the SASL session expired" in b.log_path.read_text()
        b.stop()
    finally:
        b.close()


def test_the_admin_api_never_shows_the_security_journal(secure: Secure) -> None:
    """The users' salted keys are on __floe_security: the admin API's message browser
    (and so the console) answers 404 for it, as for a topic that does not exist."""
    import urllib.error
    import urllib.request

    _ensure_alice(secure)
    url = f"{secure.broker.admin_url}/api/v1/topics/__floe_security/messages?limit=10"
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(url, timeout=10)
    assert refused.value.code == 404
