"""Declaring configuration keys: each key once, with type, default, bounds and doc.

A :class:`ConfigKey` parses raw values (TOML values, environment strings, Kafka
config strings) into its type and validates them. Broker keys live in
:mod:`floe.config.broker`, topic keys in :mod:`floe.config.topic`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from floe.errors import ConfigError

T = TypeVar("T", int, float, str, bool)

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


@dataclass(frozen=True)
class ConfigKey(Generic[T]):
    """One configuration key.

    Attributes:
        name: dotted name, as in ``floe.toml`` and Kafka configs (``log.segment.bytes``).
        type: ``int``, ``float``, ``str`` or ``bool``.
        default: value when nothing sets the key.
        doc: one or two sentences for operators; shown by ``floe config``.
        min: inclusive lower bound for numbers.
        max: inclusive upper bound for numbers.
        choices: the allowed values for strings (a list value is comma separated).
        is_list: the value is a comma-separated list whose items must be in ``choices``.
        dynamic: can be changed on a running broker (topic keys: by AlterConfigs).
        sensitive: the value may hold a secret (a password, a URL with credentials):
            DescribeConfigs answers it as Kafka does a password (``is_sensitive``, value
            null), ``floe config`` masks it.
        check: an extra validation returning an error message or ``None``.
    """

    name: str
    type: type[T]
    default: T
    doc: str
    min: float | None = None
    max: float | None = None
    choices: tuple[str, ...] = ()
    is_list: bool = False
    dynamic: bool = True
    sensitive: bool = False
    check: Callable[[T], str | None] | None = field(default=None, compare=False)

    @property
    def env_name(self) -> str:
        """The environment variable that overrides this key (``FLOE_LOG_SEGMENT_BYTES``)."""
        return "FLOE_" + self.name.upper().replace(".", "_").replace("-", "_")

    def parse(self, raw: object) -> T:
        """Convert and validate a raw value.

        Raises:
            ConfigError: the value has the wrong type or is out of bounds; the message
                names the key and says why, in one line.
        """
        value: T = self._convert(raw)
        self._validate(value)
        return value

    def _convert(self, raw: object) -> Any:
        kind = self.type
        try:
            if kind is bool:
                if isinstance(raw, bool):
                    return raw
                text = str(raw).strip().lower()
                if text in _TRUE:
                    return True
                if text in _FALSE:
                    return False
                raise ValueError(text)
            if kind is int:
                if isinstance(raw, (bool, float)):
                    raise ValueError(raw)
                return int(str(raw).strip()) if not isinstance(raw, int) else raw
            if kind is float:
                if isinstance(raw, bool):
                    raise ValueError(raw)
                return float(raw)  # type: ignore[arg-type]
            if isinstance(raw, list | tuple) and self.is_list:
                return ",".join(str(v).strip() for v in raw)
            if not isinstance(raw, str):
                raise ValueError(raw)
            return raw.strip()
        except (ValueError, TypeError):
            raise ConfigError(f"{self.name}: expected {kind.__name__}, got {raw!r}") from None

    def _validate(self, value: T) -> None:
        if isinstance(value, int | float) and not isinstance(value, bool):
            if self.min is not None and value < self.min:
                raise ConfigError(f"{self.name}: {value} is below the minimum {_num(self.min)}")
            if self.max is not None and value > self.max:
                raise ConfigError(f"{self.name}: {value} is above the maximum {_num(self.max)}")
        if isinstance(value, str) and self.choices:
            items = [v.strip() for v in value.split(",")] if self.is_list else [value]
            bad = [v for v in items if v not in self.choices]
            if bad or not items or items == [""]:
                raise ConfigError(f"{self.name}: {value!r} is not one of {', '.join(self.choices)}")
        if self.check is not None:
            problem = self.check(value)
            if problem:
                raise ConfigError(f"{self.name}: {problem}")

    def render(self, value: object) -> str:
        """The Kafka string form of a value (``true``/``false`` for booleans)."""
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value)


def check_with(parse: Callable[[str], object]) -> Callable[[str], str | None]:
    """A key's ``check`` from a parser that raises ``ConfigError("<key>: <why>")``: the
    why, or None when ``parse`` takes the value."""

    def check(value: str) -> str | None:
        try:
            parse(value)
        except ConfigError as exc:
            return str(exc).split(": ", 1)[1]
        return None

    return check


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


class KeySet:
    """An ordered, name-indexed collection of declared keys."""

    def __init__(self, keys: Iterable[ConfigKey[Any]]) -> None:
        self._keys: dict[str, ConfigKey[Any]] = {}
        for key in keys:
            if key.name in self._keys:
                raise ValueError(f"config key declared twice: {key.name}")
            self._keys[key.name] = key

    def __iter__(self) -> Any:
        return iter(self._keys.values())

    def __contains__(self, name: object) -> bool:
        return name in self._keys

    def __len__(self) -> int:
        return len(self._keys)

    def get(self, name: str) -> ConfigKey[Any] | None:
        return self._keys.get(name)

    def __getitem__(self, name: str) -> ConfigKey[Any]:
        try:
            return self._keys[name]
        except KeyError:
            raise ConfigError(f"unknown config key {name!r}") from None

    def parse_all(self, raw: Mapping[str, object]) -> dict[str, Any]:
        """Parse several raw values at once.

        Raises:
            ConfigError: the first unknown key or invalid value.
        """
        return {name: self[name].parse(value) for name, value in raw.items()}
