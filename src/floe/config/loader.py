"""Loading the effective broker configuration.

Precedence, lowest first: declared defaults, ``floe.toml``, ``FLOE_*`` environment
variables, explicit overrides (command-line options).
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from floe.config.broker import BROKER_KEYS
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

    def __getitem__(self, key: ConfigKey[T]) -> T:
        value: T = self.values[key.name]
        return value

    def explicit(self) -> dict[str, Any]:
        """Values that are not the declared default (topic configs resolve through these)."""
        return {k: v for k, v in self.values.items() if self.sources.get(k) != "default"}


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
        key = BROKER_KEYS[name]
        values[name] = key.parse(raw)
        sources[name] = "command line"
    return BrokerConfig(values, sources)
