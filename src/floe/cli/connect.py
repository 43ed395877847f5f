"""Where the CLI finds Floe: ``--brokers``, ``--registry`` and ``--admin``, else the
``cli.*`` keys (a profile: ``[cli]`` in ``floe.toml``, ``FLOE_CLI_*``), else the
addresses of the Floe that configuration describes (``host``/``kafka.port``,
``registry.*``, ``admin.*``), so on the machine running ``floe up`` no flag is needed.

``--config FILE`` picks the file (default ``./floe.toml`` when it exists), so
``floe group list --config remote.toml`` manages another Floe.

The client properties file (``--client-config``, else ``cli.client.config``) secures
every connection the CLI opens: Kafka clients take it whole; the admin API and the
Schema Registry get its ``sasl.username``/``sasl.password`` as HTTP Basic credentials
and trust its ``ssl.ca.location`` for ``https://`` URLs (:func:`http_access`).
"""

from __future__ import annotations

import argparse
import base64
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from floe.cli.output import CliError

_ANY_HOST = ("", "0.0.0.0", "::")


def add_connection(
    parser: argparse.ArgumentParser,
    *,
    brokers: bool = False,
    registry: bool = False,
    admin: bool = False,
    config_flags: tuple[str, ...] = ("--config", "-c"),
) -> None:
    """The address flags a command needs, plus the config file flag (``floe topic``
    names it ``--config-file``: its ``--config`` sets topic configs, as in Kafka)."""
    if brokers:
        parser.add_argument(
            "--brokers", "-b", metavar="HOST:PORT", help="bootstrap servers (default: cli.brokers)"
        )
    if brokers or registry or admin:
        parser.add_argument(
            "--client-config",
            metavar="FILE",
            help="client properties: security.protocol, sasl.*, ssl.* (Kafka clients; "
            "sasl.username/password and ssl.ca.location for the admin API and registry too; "
            "default: cli.client.config)",
        )
    if registry:
        parser.add_argument(
            "--registry", metavar="URL", help="Schema Registry URL (default: cli.registry)"
        )
    if admin:
        parser.add_argument("--admin", metavar="URL", help="admin API URL (default: cli.admin)")
    parser.add_argument(
        *config_flags,
        dest="config_file",
        metavar="FILE",
        help="config file with a [cli] profile (default ./floe.toml if present)",
    )


def _config(args: argparse.Namespace) -> Any:
    """The configuration ``floe up`` would load, with ``--data-dir``/``--set`` when the
    command has them.

    Raises:
        CliError: the configuration does not load.
    """
    from floe.config import load_config
    from floe.errors import ConfigError

    overrides: dict[str, object] = {"data.dir": getattr(args, "data_dir", None)}
    for item in getattr(args, "set", []):
        name, sep, value = item.partition("=")
        if not sep:
            raise CliError(f"--set expects KEY=VALUE, got {item!r}")
        overrides[name.strip()] = value
    try:
        return load_config(args.config_file, overrides)
    except ConfigError as exc:
        raise CliError(str(exc)) from None


def _url(host: str, port: int, tls: bool) -> str:
    host = "127.0.0.1" if host in _ANY_HOST else host
    scheme = "https" if tls else "http"
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"


def _fixed(port: int, key: str, flag: str) -> int:
    if port == 0:
        raise CliError(f"{key} is 0 (any free port): pass {flag} with the address floe up uses")
    return port


def brokers(args: argparse.Namespace) -> str:
    """Bootstrap servers.

    Raises:
        CliError: the configuration does not load, or its Kafka port is 0.
    """
    if args.brokers:
        return str(args.brokers)
    from floe.config import broker as keys
    from floe.config.cli import CLI_BROKERS

    config = _config(args)
    if config[CLI_BROKERS]:
        return str(config[CLI_BROKERS])
    host = config[keys.ADVERTISED_HOST] or config[keys.HOST]
    host = "127.0.0.1" if host in _ANY_HOST else host
    port = config[keys.ADVERTISED_PORT] or _fixed(
        config[keys.KAFKA_PORT], "kafka.port", "--brokers"
    )
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def client_settings(args: argparse.Namespace) -> dict[str, str]:
    """The Kafka client properties of ``--client-config`` (else ``cli.client.config``):
    ``KEY=VALUE`` lines, ``#`` comments and blank lines ignored, as Kafka's
    ``--command-config`` files and librdkafka's property names.

    Raises:
        CliError: the file cannot be read or a line is not KEY=VALUE.
    """
    path = getattr(args, "client_config", None)
    if not path:
        from floe.config.cli import CLI_CLIENT_CONFIG

        path = _config(args)[CLI_CLIENT_CONFIG]
    if not path:
        return {}
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise CliError(f"cannot read the client config {path}: {exc.strerror}") from None
    out: dict[str, str] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise CliError(f"{path}:{n}: expected KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


def registry(args: argparse.Namespace) -> str:
    """The Schema Registry URL, without a trailing ``/``.

    Raises:
        CliError: the configuration does not load, or its registry port is 0.
    """
    return _remember(_registry_url(args), args)


def _registry_url(args: argparse.Namespace) -> str:
    if args.registry:
        return str(args.registry).rstrip("/")
    from floe.config import broker as keys
    from floe.config import security as sec
    from floe.config.cli import CLI_REGISTRY

    config = _config(args)
    if config[CLI_REGISTRY]:
        return str(config[CLI_REGISTRY]).rstrip("/")
    port = _fixed(config[keys.REGISTRY_PORT], "registry.port", "--registry")
    return _url(
        config[keys.REGISTRY_HOST] or config[keys.HOST], port, config[sec.REGISTRY_SSL_ENABLE]
    )


def admin(args: argparse.Namespace) -> str:
    """The admin API URL, without a trailing ``/``.

    Raises:
        CliError: the configuration does not load, or its admin port is 0.
    """
    return _remember(_admin_url(args), args)


def _admin_url(args: argparse.Namespace) -> str:
    if args.admin:
        return str(args.admin).rstrip("/")
    from floe.config import broker as keys
    from floe.config import security as sec
    from floe.config.cli import CLI_ADMIN

    config = _config(args)
    if config[CLI_ADMIN]:
        return str(config[CLI_ADMIN]).rstrip("/")
    port = _fixed(config[keys.ADMIN_PORT], "admin.port", "--admin")
    host = config[keys.ADMIN_HOST] or config[keys.HOST]
    return _url(host, port, config[sec.ADMIN_SSL_ENABLE])


@dataclass(frozen=True)
class HttpAccess:
    """How to reach an HTTP endpoint of Floe: Basic credentials and the CA to trust."""

    user: str = ""
    password: str = ""
    ca_location: str = ""

    def headers(self) -> dict[str, str]:
        """The ``Authorization`` header, when there are credentials."""
        if not self.user:
            return {}
        token = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
        return {"Authorization": f"Basic {token}"}

    def tls(self) -> ssl.SSLContext:
        """A client context trusting ``ca_location`` (else the system's CAs).

        Raises:
            CliError: the CA file does not load.
        """
        try:
            return ssl.create_default_context(cafile=self.ca_location or None)
        except (OSError, ssl.SSLError) as exc:
            raise CliError(f"cannot load ssl.ca.location {self.ca_location}: {exc}") from None


_ACCESS: dict[str, HttpAccess] = {}


def _remember(url: str, args: argparse.Namespace) -> str:
    settings = client_settings(args) if hasattr(args, "client_config") else {}
    _ACCESS[url] = HttpAccess(
        settings.get("sasl.username", ""),
        settings.get("sasl.password", ""),
        settings.get("ssl.ca.location", ""),
    )
    return url


def http_access(url: str) -> HttpAccess:
    """The credentials and CA for ``url``, as the client properties gave them when
    :func:`admin` or :func:`registry` named it (none for another URL)."""
    return _ACCESS.get(url, HttpAccess())
