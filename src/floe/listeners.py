"""The writer's Kafka listeners (:func:`start_listeners`, one server per listener, the
first on the port a standby or member kept listening), and the one the table topics'
Spark tasks fetch through, with how they get in (:func:`pipeline_listener`,
:func:`pipeline_access`).
"""

from __future__ import annotations

import logging
import socket
import ssl
from pathlib import Path
from typing import TYPE_CHECKING

from floe.broker.core import Broker
from floe.config import BrokerConfig
from floe.config import broker as keys
from floe.config.security import ListenerSpec
from floe.errors import ConfigError
from floe.security.users import PIPELINE_USER
from floe.server.kafka import KafkaServer
from floe.tabletopic.spark.fetch import FetchAccess

if TYPE_CHECKING:
    from floe.cluster.interface import BrokerInfo

log = logging.getLogger("floe.app")  # kafka.listening and the others keep their name


def address(b: BrokerInfo) -> str:
    """``host:port`` of ``b`` (an IPv6 host in brackets)."""
    return f"[{b.host}]:{b.port}" if ":" in b.host else f"{b.host}:{b.port}"


def pipeline_listener(specs: list[ListenerSpec], authorizing: bool) -> ListenerSpec:
    """The listener the table topics' Spark tasks fetch from. With an authorizer, a SASL
    one first (they authenticate as the broker's internal user, a super user: no ACL to
    grant); else a PLAINTEXT one first (nothing to negotiate). An SSL listener comes last:
    the tasks present no client certificate."""
    order = (
        ("SASL_PLAINTEXT", "SASL_SSL", "PLAINTEXT", "SSL")
        if authorizing
        else ("PLAINTEXT", "SASL_PLAINTEXT", "SASL_SSL", "SSL")
    )
    return min(specs, key=lambda spec: order.index(spec.protocol))


def pipeline_access(config: BrokerConfig, spec: ListenerSpec, password: str) -> FetchAccess:
    """How the Spark tasks get in on ``spec``: TLS pinned to the broker's certificate,
    SASL as :data:`~floe.security.users.PIPELINE_USER` with ``password`` and the
    strongest enabled mechanism.

    Raises:
        ConfigError: the certificate file cannot be read.
    """
    from floe.config import security as sec

    pin = ""
    if spec.tls:
        path = config[sec.SSL_CERTIFICATE_LOCATION]
        try:
            pin = Path(path).read_text()
        except OSError as exc:
            raise ConfigError(f"cannot read ssl.certificate.location {path}: {exc}") from None
        if config[sec.SSL_CLIENT_AUTH] == "required" and not spec.sasl:
            log.error(
                "security.pipeline_listener listener=%s: table-topic rounds cannot fetch "
                "over an SSL listener that requires client certificates; add a SASL or "
                "PLAINTEXT listener",
                spec.name,
            )
    if not spec.sasl:
        return FetchAccess(tls_pin=pin)
    enabled = {m.strip() for m in config[sec.SASL_ENABLED_MECHANISMS].split(",")}
    mechanism = next(m for m in ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN") if m in enabled)
    return FetchAccess(pin, mechanism, PIPELINE_USER, password)


async def start_listeners(
    broker: Broker, specs: list[ListenerSpec], listening: socket.socket | None = None
) -> list[KafkaServer]:
    """Bind one Kafka server per listener, in order (the first on ``listening`` when
    given: the port a standby or member kept), and record each one's advertised
    address on the broker (the first's as ``advertised_host``/``advertised_port``).

    Raises:
        ConfigError: TLS settings that do not load.
        OSError: a listener's address cannot be bound (the message names it).
    """
    from floe.config import security as sec
    from floe.security.tls import PrincipalMapper, server_context

    config = broker.config
    contexts: dict[str, ssl.SSLContext] = {}
    for protocol in sorted({spec.protocol for spec in specs if spec.tls}):
        if not config[sec.SSL_CERTIFICATE_LOCATION] or not config[sec.SSL_KEY_LOCATION]:
            raise ConfigError(
                f"an SSL or SASL_SSL listener needs {sec.SSL_CERTIFICATE_LOCATION.name} and "
                f"{sec.SSL_KEY_LOCATION.name}"
            )
        # as Kafka (KIP-684): client certificates are for SSL listeners; a SASL_SSL
        # client authenticates with SASL
        client_auth = config[sec.SSL_CLIENT_AUTH] if protocol == "SSL" else "none"
        contexts[protocol] = server_context(
            config[sec.SSL_CERTIFICATE_LOCATION],
            config[sec.SSL_KEY_LOCATION],
            config[sec.SSL_KEY_PASSWORD] or None,
            config[sec.SSL_CA_LOCATION] or None,
            client_auth,
        )
    mapper = PrincipalMapper(config[sec.SSL_PRINCIPAL_MAPPING_RULES])
    servers: list[KafkaServer] = []
    try:
        for spec in specs:
            server = KafkaServer(
                broker, spec.host, spec.port, config[keys.SOCKET_REQUEST_MAX_BYTES],
                listener=spec, tls=contexts.get(spec.protocol), mapper=mapper,
            )  # fmt: skip
            await server.start(listening if not servers else None)
            servers.append(server)
            host = spec.advertised_host
            if host in ("", "0.0.0.0", "::"):
                host = socket.getfqdn()
            broker.addresses[spec.name] = (host, spec.advertised_port or server.port)
            log.info(
                "kafka.listening listener=%s protocol=%s bind=%s:%d advertised=%s:%d",
                spec.name, spec.protocol, spec.host, server.port, *broker.addresses[spec.name],
            )  # fmt: skip
    except BaseException:
        for server in servers:
            await server.stop(grace_s=0)
        raise
    broker.advertised_host, broker.advertised_port = broker.addresses[specs[0].name]
    return servers
