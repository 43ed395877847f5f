"""Keys the ``floe`` command line reads to find a Floe to talk to (``floe up`` ignores
them): the ``[cli]`` table of ``floe.toml``, ``FLOE_CLI_*`` or ``--set cli.*=...``.

Empty (the default) means "the Floe this configuration describes": the addresses are
derived from ``host``/``kafka.port``/``advertised.*``, ``registry.*`` and ``admin.*``.
A ``--brokers``/``--registry``/``--admin`` flag beats both, so a ``floe.toml`` (or
``--config remote.toml``) with only a ``[cli]`` table is a profile for a remote Floe.
"""

from __future__ import annotations

from floe.config.keys import ConfigKey

CLI_BROKERS = ConfigKey(
    "cli.brokers",
    str,
    "",
    "Bootstrap HOST:PORT[,HOST:PORT] the floe CLI connects to (empty: this configuration's "
    "advertised or bound Kafka address).",
    dynamic=False,
)
CLI_REGISTRY = ConfigKey(
    "cli.registry",
    str,
    "",
    "Schema Registry URL the floe CLI uses (empty: http://registry.host:registry.port).",
    dynamic=False,
)
CLI_ADMIN = ConfigKey(
    "cli.admin",
    str,
    "",
    "Admin API URL the floe CLI uses (empty: http://admin.host:admin.port).",
    dynamic=False,
)

CLI_CLIENT_CONFIG = ConfigKey(
    "cli.client.config",
    str,
    "",
    "A file of Kafka client properties (librdkafka names, KEY=VALUE lines: "
    "security.protocol, sasl.mechanism, sasl.username, sasl.password, ssl.ca.location...) "
    "the floe CLI's Kafka clients use; --client-config beats it.",
    dynamic=False,
)

CLI_KEYS = (CLI_BROKERS, CLI_REGISTRY, CLI_ADMIN, CLI_CLIENT_CONFIG)
