"""Configuration: declared keys, and loading them from defaults, file, env and flags."""

from floe.config.keys import ConfigKey, KeySet
from floe.config.loader import BrokerConfig, load_config

__all__ = ["BrokerConfig", "ConfigKey", "KeySet", "load_config"]
