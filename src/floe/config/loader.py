"""Loading the effective broker configuration.

Precedence, lowest first: declared defaults, ``floe.toml``, ``FLOE_*`` environment
variables, explicit overrides (command-line options).

Besides the declared keys, two open families pass through as strings (from
``floe.toml`` and command-line overrides, not from the environment, whose variable
names cannot spell them back):

* ``spark.*`` keys that are not declared (``[spark] "sql.shuffle.partitions" = 4``) are
  Spark confs, given to the SparkSession under their full name;
* ``catalog.properties.*``, ``catalog.spark.*`` and ``catalog.pyiceberg.*``
  (``[catalog.properties]``...) are Iceberg catalog properties for both engines, for
  Spark only, and for pyiceberg only.

Any other unknown key is an error (a typo must not be silently ignored).
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from floe.config.broker import (
    BROKER_KEYS,
    CLUSTER_CACHE_MAX_BYTES,
    CLUSTER_METADATA_URL,
    STORAGE_S3_CACHE_MAX_BYTES,
)
from floe.config.keys import ConfigKey
from floe.errors import ConfigError

T = TypeVar("T", int, float, str, bool)

DEFAULT_CONFIG_FILE = "floe.toml"


@dataclass(frozen=True)
class BrokerConfig:
    """The effective broker configuration, immutable once loaded.

    Attributes:
        values: every declared key's value.
        sources: where each value came from (default, file path, env var, override).
    """

    values: Mapping[str, Any]
    sources: Mapping[str, str] = field(default_factory=dict)
    passthrough: Mapping[str, str] = field(default_factory=dict)
    """Undeclared ``spark.*`` and ``catalog.{properties,spark,pyiceberg}.*`` keys by full
    name, as strings (their sources are in ``sources`` too)."""

    def __getitem__(self, key: ConfigKey[T]) -> T:
        value: T = self.values[key.name]
        return value

    def explicit(self) -> dict[str, Any]:
        """Values that are not the declared default (topic configs resolve through these)."""
        return {k: v for k, v in self.values.items() if self.sources.get(k) != "default"}

    def with_prefix(self, prefix: str) -> dict[str, str]:
        """Passthrough entries under ``prefix``, keyed by the rest of the name
        (``with_prefix("catalog.properties.")`` -> Iceberg catalog properties)."""
        return {k[len(prefix) :]: v for k, v in self.passthrough.items() if k.startswith(prefix)}


PASSTHROUGH_PREFIXES = ("spark.", "catalog.properties.", "catalog.spark.", "catalog.pyiceberg.")
"""Undeclared keys under these prefixes are kept as strings instead of rejected."""

SENSITIVE_WORDS = ("password", "passwd", "secret", "credential", "token", "key", "authorization")


def is_passthrough(name: str) -> bool:
    """An undeclared key that is accepted verbatim (see the module docstring)."""
    return name not in BROKER_KEYS and name.startswith(PASSTHROUGH_PREFIXES)


_SECRET_IN_VALUE = re.compile(
    r"://[^/\s@]*:[^/\s@]*@"  # scheme://user:password@host
    r"|(?:password|passwd|pwd|secret|token|credential)[\w.-]*=",  # ...?password=...
    re.IGNORECASE,
)


def looks_sensitive(name: str, value: str = "") -> bool:
    """Whether a passthrough key probably holds a secret: its last name part has one of
    :data:`SENSITIVE_WORDS`, or its value is a URL with a password or a secret-named
    parameter. ``floe config`` masks it, DescribeConfigs answers it as sensitive."""
    last = name.lower().rsplit(".", 1)[-1]
    return any(word in last for word in SENSITIVE_WORDS) or bool(_SECRET_IN_VALUE.search(value))


_SECRETS_TO_MASK = re.compile(
    r"(?P<head>://[^/\s@:]*:)[^/\s@]*(?=@)"  # scheme://user:password@host
    r"|(?P<name>(?:password|passwd|pwd|secret|token|credential)[\w.-]*=)[^&;\s]*",
    re.IGNORECASE,
)


def mask_secrets(value: str) -> str:
    """``value`` with the secrets :func:`looks_sensitive` finds in values (a URL's
    password, ``password=...`` parameters) replaced by ``********``, for log lines."""
    return _SECRETS_TO_MASK.sub(lambda m: (m.group("head") or m.group("name")) + "********", value)


def _passthrough_value(name: str, raw: object) -> str:
    if isinstance(raw, bool):
        return "true" if raw else "false"
    if isinstance(raw, int | float | str):
        return str(raw)
    raise ConfigError(f"{name}: expected a string, number or boolean, got {raw!r}")


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in table.items():
        name = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, name + "."))
        else:
            out[name] = v
    return out


def load_config(
    path: str | Path | None = None,
    overrides: Mapping[str, object] | None = None,
    environ: Mapping[str, str] | None = None,
) -> BrokerConfig:
    """Build the effective configuration.

    Args:
        path: a TOML file; ``None`` reads ``./floe.toml`` when it exists.
        overrides: values from the command line, by key name.
        environ: the environment to read ``FLOE_*`` variables from (default ``os.environ``).

    Raises:
        ConfigError: unreadable file, unknown key, or an invalid value.
    """
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {key.name: key.default for key in BROKER_KEYS}
    sources = dict.fromkeys(values, "default")
    passthrough: dict[str, str] = {}

    file = Path(path) if path is not None else Path(DEFAULT_CONFIG_FILE)
    if path is not None or file.exists():
        try:
            data = tomllib.loads(file.read_text())
        except FileNotFoundError:
            raise ConfigError(f"config file not found: {file}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{file}: {exc}") from None
        for name, raw in _flatten(data).items():
            key = BROKER_KEYS.get(name)
            if key is None and is_passthrough(name):
                passthrough[name] = _passthrough_value(name, raw)
                sources[name] = str(file)
                continue
            if key is None:
                raise ConfigError(f"{file}: unknown config key {name!r}")
            values[name] = key.parse(raw)
            sources[name] = str(file)

    for key in BROKER_KEYS:
        if key.env_name in env:
            values[key.name] = key.parse(env[key.env_name])
            sources[key.name] = key.env_name

    for name, raw in (overrides or {}).items():
        if raw is None:
            continue
        if is_passthrough(name):
            passthrough[name] = _passthrough_value(name, raw)
            sources[name] = "command line"
            continue
        key = BROKER_KEYS[name]
        values[name] = key.parse(raw)
        sources[name] = "command line"
    if values[CLUSTER_METADATA_URL.name] and sources[STORAGE_S3_CACHE_MAX_BYTES.name] == "default":
        values[STORAGE_S3_CACHE_MAX_BYTES.name] = CLUSTER_CACHE_MAX_BYTES  # see its doc
    return BrokerConfig(values, sources, passthrough)
