"""Listener and security keys: Kafka's listener model (``listeners``,
``advertised.listeners``, ``listener.security.protocol.map``), TLS from PEM files, SASL
mechanisms, re-authentication and the bootstrap user (docs/security.md).

Each key is declared once here; :func:`parse_listeners` turns the listener strings into
:class:`ListenerSpec` values (the composition root binds one Kafka server per listener).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from floe.config.keys import ConfigKey, check_with
from floe.errors import ConfigError

if TYPE_CHECKING:
    from floe.config.loader import BrokerConfig

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_NAME = re.compile(r"[A-Za-z0-9_]+")
_LISTENER = re.compile(r"(?P<name>[^:/]+)://(?P<host>\[[^\]]*\]|[^:\[\]]*):(?P<port>[0-9]+)")
_DEFAULT_MAP = ",".join(f"{p}:{p}" for p in PROTOCOLS)


LISTENERS = ConfigKey(
    "listeners",
    str,
    "",
    "Kafka listeners, comma separated NAME://host:port (port 0: any free port), e.g. "
    "PLAINTEXT://127.0.0.1:9092,SASL_SSL://0.0.0.0:9093. Empty: one PLAINTEXT listener "
    "on host:kafka.port. A name's security protocol comes from "
    "listener.security.protocol.map.",
    dynamic=False,
    check=check_with(lambda v: _split_listeners(v, "listeners")),
)
ADVERTISED_LISTENERS = ConfigKey(
    "advertised.listeners",
    str,
    "",
    "What clients are told per listener, NAME://host:port (a listener left out is "
    "advertised at advertised.host, else its bind host, and its bound port).",
    dynamic=False,
    check=check_with(lambda v: _split_listeners(v, "listeners")),
)
LISTENER_SECURITY_PROTOCOL_MAP = ConfigKey(
    "listener.security.protocol.map",
    str,
    _DEFAULT_MAP,
    "Each listener name's security protocol, NAME:PROTOCOL pairs (PLAINTEXT, SSL, "
    "SASL_PLAINTEXT, SASL_SSL); a name that is itself a protocol needs no entry.",
    dynamic=False,
    check=check_with(lambda v: protocol_map(v)),  # noqa: PLW0108 (defined below)
)
SASL_ENABLED_MECHANISMS = ConfigKey(
    "sasl.enabled.mechanisms",
    str,
    "SCRAM-SHA-256,SCRAM-SHA-512,PLAIN",
    "SASL mechanisms the SASL listeners offer. PLAIN checks the password against the "
    "user's SCRAM credentials; use it over SASL_SSL only.",
    choices=MECHANISMS,
    is_list=True,
    dynamic=False,
)
SSL_CERTIFICATE_LOCATION = ConfigKey(
    "ssl.certificate.location",
    str,
    "",
    "PEM file with the broker's certificate (and its chain) for SSL and SASL_SSL listeners.",
    dynamic=False,
)
SSL_KEY_LOCATION = ConfigKey(
    "ssl.key.location",
    str,
    "",
    "PEM file with the private key of ssl.certificate.location.",
    dynamic=False,
)
SSL_KEY_PASSWORD = ConfigKey(
    "ssl.key.password",
    str,
    "",
    "Password of an encrypted ssl.key.location (empty: the key is not encrypted).",
    dynamic=False,
    sensitive=True,
)
SSL_CA_LOCATION = ConfigKey(
    "ssl.ca.location",
    str,
    "",
    "PEM file of the CA certificates client certificates must chain to (needed when "
    "ssl.client.auth is requested or required).",
    dynamic=False,
)
SSL_CLIENT_AUTH = ConfigKey(
    "ssl.client.auth",
    str,
    "none",
    "Client certificates on SSL listeners: required (mTLS: the certificate's subject is "
    "the principal), requested (used when sent), or none.",
    choices=("none", "requested", "required"),
    dynamic=False,
)
SSL_PRINCIPAL_MAPPING_RULES = ConfigKey(
    "ssl.principal.mapping.rules",
    str,
    "DEFAULT",
    "Kafka's rules turning a client certificate's subject into a user name, e.g. "
    "RULE:^CN=(.*?),.*$/$1/,DEFAULT (DEFAULT: the whole subject, CN=alice,O=acme).",
    dynamic=False,
)
CONNECTIONS_MAX_REAUTH_MS = ConfigKey(
    "connections.max.reauth.ms",
    int,
    0,
    "Longest a SASL session lasts before the client must re-authenticate on the same "
    "connection (KIP-368; clients that do not are disconnected at their next request "
    "after it). 0: sessions never expire.",
    min=0,
    max=2**63 - 1,
    dynamic=False,
)
FAILED_AUTHENTICATION_DELAY_MS = ConfigKey(
    "connection.failed.authentication.delay.ms",
    int,
    100,
    "How long a failed authentication's answer is held back before the connection closes "
    "(slows password guessing).",
    min=0,
    max=60_000,
    dynamic=False,
)
SECURITY_BOOTSTRAP_USER = ConfigKey(
    "security.bootstrap.user",
    str,
    "",
    "A SCRAM user created at start when it has no credentials yet (the first admin); "
    "never overwrites a password changed since.",
    dynamic=False,
)
SECURITY_BOOTSTRAP_PASSWORD = ConfigKey(
    "security.bootstrap.password",
    str,
    "",
    "The bootstrap user's password (set it from the environment: "
    "FLOE_SECURITY_BOOTSTRAP_PASSWORD).",
    dynamic=False,
    sensitive=True,
)

AUTHORIZER_ENABLE = ConfigKey(
    "authorizer.enable",
    bool,
    False,
    "Check every Kafka request against the ACLs (Kafka's StandardAuthorizer semantics: "
    "deny wins, super.users bypass). Off: every client may do everything.",
    dynamic=False,
)
SUPER_USERS = ConfigKey(
    "super.users",
    str,
    "",
    "Principals every ACL check allows, separated by ';' (User:admin;User:CN=ops,O=acme). "
    "The bootstrap user is one.",
    dynamic=False,
)
ALLOW_EVERYONE_IF_NO_ACL_FOUND = ConfigKey(
    "allow.everyone.if.no.acl.found",
    bool,
    False,
    "With the authorizer on, allow a request on a resource no ACL names (Kafka's default: "
    "false, deny).",
    dynamic=False,
)
REGISTRY_AUTHENTICATION = ConfigKey(
    "registry.authentication",
    str,
    "none",
    "Schema Registry authentication: basic (HTTP Basic, user:password checked against the "
    "SCRAM users, as Confluent's basic.auth.user.info sends it; every request but GET / "
    "needs it) or none (every request is User:ANONYMOUS). With authorizer.enable, subjects "
    "are checked against their topic's ACLs either way.",
    choices=("none", "basic"),
    dynamic=False,
)
REGISTRY_SSL_ENABLE = ConfigKey(
    "registry.ssl.enable",
    bool,
    False,
    "Serve the Schema Registry over HTTPS with ssl.certificate.location and "
    "ssl.key.location (TLS 1.2+).",
    dynamic=False,
)
ADMIN_AUTHENTICATION = ConfigKey(
    "admin.authentication",
    str,
    "none",
    "Admin API and console authentication: basic (the SCRAM users: the console asks for a "
    "user and password and keeps a session cookie; API clients send HTTP Basic "
    "credentials) or none (every request is User:ANONYMOUS). With authorizer.enable, "
    "every page and route is checked against the ACLs either way.",
    choices=("none", "basic"),
    dynamic=False,
)
ADMIN_SESSION_TIMEOUT_MS = ConfigKey(
    "admin.session.timeout.ms",
    int,
    8 * 3600 * 1000,
    "How long a console login lasts; the session also ends when its user is deleted or "
    "their password changes, and when the broker restarts.",
    min=60_000,
    dynamic=False,
)
ADMIN_ALLOWED_HOSTS = ConfigKey(
    "admin.allowed.hosts",
    str,
    "",
    "Host names (comma separated; * for any) the admin API and console answer to, "
    "against DNS rebinding: a request whose Host header names another host is refused "
    "with 403, and a state-changing request whose Origin is another site too. Always "
    "allowed: localhost, 127.0.0.1, ::1, admin.host, advertised.host and the machine's "
    "host name.",
    dynamic=False,
)
ADMIN_SQL_PRINCIPALS = ConfigKey(
    "admin.sql.principals",
    str,
    "",
    "With authorizer.enable, the principals that may run SQL in the admin API and "
    "console, separated by ';' (User:analyst;User:ops); super users always may. SQL reads "
    "every table in the catalog, so topic ACLs do not govern it.",
    dynamic=False,
)
ADMIN_SSL_ENABLE = ConfigKey(
    "admin.ssl.enable",
    bool,
    False,
    "Serve the admin API and console over HTTPS with ssl.certificate.location and "
    "ssl.key.location (TLS 1.2+); the session cookie is then Secure.",
    dynamic=False,
)

SECURITY_KEYS = (
    LISTENERS,
    ADVERTISED_LISTENERS,
    LISTENER_SECURITY_PROTOCOL_MAP,
    SASL_ENABLED_MECHANISMS,
    SSL_CERTIFICATE_LOCATION,
    SSL_KEY_LOCATION,
    SSL_KEY_PASSWORD,
    SSL_CA_LOCATION,
    SSL_CLIENT_AUTH,
    SSL_PRINCIPAL_MAPPING_RULES,
    CONNECTIONS_MAX_REAUTH_MS,
    FAILED_AUTHENTICATION_DELAY_MS,
    SECURITY_BOOTSTRAP_USER,
    SECURITY_BOOTSTRAP_PASSWORD,
    AUTHORIZER_ENABLE,
    SUPER_USERS,
    ALLOW_EVERYONE_IF_NO_ACL_FOUND,
    REGISTRY_AUTHENTICATION,
    REGISTRY_SSL_ENABLE,
    ADMIN_AUTHENTICATION,
    ADMIN_SESSION_TIMEOUT_MS,
    ADMIN_ALLOWED_HOSTS,
    ADMIN_SQL_PRINCIPALS,
    ADMIN_SSL_ENABLE,
)


@dataclass(frozen=True, slots=True)
class ListenerSpec:
    """One Kafka listener: its name, security protocol, bind address and the address
    clients are told (``advertised_port`` 0: the bound port)."""

    name: str
    protocol: str
    host: str
    port: int
    advertised_host: str
    advertised_port: int

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")


def protocol_map(value: str) -> dict[str, str]:
    """``listener.security.protocol.map`` as {NAME: PROTOCOL}.

    Raises:
        ConfigError: an entry that is not NAME:PROTOCOL, or an unknown protocol.
    """
    out: dict[str, str] = {}
    for item in filter(None, (v.strip() for v in value.split(","))):
        name, sep, protocol = item.partition(":")
        if not sep or not _NAME.fullmatch(name) or protocol not in PROTOCOLS:
            raise ConfigError(
                f"{LISTENER_SECURITY_PROTOCOL_MAP.name}: {item!r} is not NAME:PROTOCOL with "
                f"PROTOCOL one of {', '.join(PROTOCOLS)}"
            )
        out[name] = protocol
    return out


def _split_listeners(value: str, key: str) -> list[tuple[str, str, int]]:
    """``NAME://host:port,...`` as (name, host, port) in order.

    Raises:
        ConfigError: a malformed entry or a name listed twice.
    """
    out: list[tuple[str, str, int]] = []
    for item in filter(None, (v.strip() for v in value.split(","))):
        m = _LISTENER.fullmatch(item)
        if m is None or not _NAME.fullmatch(m["name"]) or int(m["port"]) > 65535:
            raise ConfigError(f"{key}: {item!r} is not NAME://host:port")
        name = m["name"]
        if any(name == n for n, _, _ in out):
            raise ConfigError(f"{key}: listener {name} is listed twice")
        out.append((name, m["host"].strip("[]"), int(m["port"])))
    return out


def parse_listeners(
    listeners: str,
    advertised: str,
    protocols: str,
    *,
    host: str,
    port: int,
    advertised_host: str,
    advertised_port: int,
) -> list[ListenerSpec]:
    """The listeners to bind, in order (the first one is the one other brokers and the
    CLI use). Empty ``listeners``: one PLAINTEXT listener on ``host:port`` advertised
    as ``advertised_host:advertised_port`` (the pre-listeners keys).

    Raises:
        ConfigError: a listener name without a protocol, an advertised listener that is
            not a listener, or a malformed value.
    """
    if not listeners.strip():
        return [
            ListenerSpec("PLAINTEXT", "PLAINTEXT", host, port, advertised_host or host,
                         advertised_port)
        ]  # fmt: skip
    pmap = protocol_map(protocols)
    told = {n: (h, p) for n, h, p in _split_listeners(advertised, ADVERTISED_LISTENERS.name)}
    out = []
    for name, bind_host, bind_port in _split_listeners(listeners, LISTENERS.name):
        protocol = pmap.get(name) or (name if name in PROTOCOLS else None)
        if protocol is None:
            raise ConfigError(
                f"{LISTENERS.name}: listener {name} has no security protocol: add "
                f"{name}:<PROTOCOL> to {LISTENER_SECURITY_PROTOCOL_MAP.name}"
            )
        adv_host, adv_port = told.pop(name, (advertised_host or bind_host, 0))
        out.append(ListenerSpec(name, protocol, bind_host, bind_port, adv_host, adv_port))
    if told:
        raise ConfigError(
            f"{ADVERTISED_LISTENERS.name}: {', '.join(sorted(told))} is not in {LISTENERS.name}"
        )
    return out


def listener_specs(config: BrokerConfig) -> list[ListenerSpec]:
    """:func:`parse_listeners` on a loaded configuration.

    Raises:
        ConfigError: as :func:`parse_listeners`.
    """
    from floe.config import broker as keys

    return parse_listeners(
        config[LISTENERS],
        config[ADVERTISED_LISTENERS],
        config[LISTENER_SECURITY_PROTOCOL_MAP],
        host=config[keys.HOST],
        port=config[keys.KAFKA_PORT],
        advertised_host=config[keys.ADVERTISED_HOST],
        advertised_port=config[keys.ADVERTISED_PORT],
    )
