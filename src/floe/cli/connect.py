"""Where the CLI finds Floe: ``--brokers``, ``--registry`` and ``--admin``, else the
``cli.*`` keys (a profile: ``[cli]`` in ``floe.toml``, ``FLOE_CLI_*``), else the
addresses of the Floe that configuration describes (``host``/``kafka.port``,
``registry.*``, ``admin.*``), so on the machine running ``floe up`` no flag is needed.

``--config FILE`` picks the file (default ``./floe.toml`` when it exists), so
``floe group list --config remote.toml`` manages another Floe.
"""

from __future__ import annotations

import argparse
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
        parser.add_argument(
            "--client-config",
            metavar="FILE",
            help="Kafka client properties: security.protocol, sasl.*, ssl.* "
            "(default: cli.client.config)",
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


def _url(host: str, port: int) -> str:
    host = "127.0.0.1" if host in _ANY_HOST else host
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


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
    if args.registry:
        return str(args.registry).rstrip("/")
    from floe.config import broker as keys
    from floe.config.cli import CLI_REGISTRY

    config = _config(args)
    if config[CLI_REGISTRY]:
        return str(config[CLI_REGISTRY]).rstrip("/")
    port = _fixed(config[keys.REGISTRY_PORT], "registry.port", "--registry")
    return _url(config[keys.REGISTRY_HOST] or config[keys.HOST], port)


def admin(args: argparse.Namespace) -> str:
    """The admin API URL, without a trailing ``/``.

    Raises:
        CliError: the configuration does not load, or its admin port is 0.
    """
    if args.admin:
        return str(args.admin).rstrip("/")
    from floe.config import broker as keys
    from floe.config.cli import CLI_ADMIN

    config = _config(args)
    if config[CLI_ADMIN]:
        return str(config[CLI_ADMIN]).rstrip("/")
    port = _fixed(config[keys.ADMIN_PORT], "admin.port", "--admin")
    return _url(config[keys.ADMIN_HOST], port)
