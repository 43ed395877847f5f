"""The configuration reference (docs/configuration.md), written from the declarations.

Run ``python -m floe.config.reference > docs/configuration.md`` after changing a key; a
unit test fails while the committed page differs from :func:`render`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from floe.config.broker import BROKER_KEYS
from floe.config.keys import ConfigKey
from floe.config.tabletopic import AUTOMQ_PREFIX, PREFIX, TABLE_TOPIC_KEYS
from floe.config.topic import TOPIC_KEYS

_INTRO = """\
# Configuration reference

Written by `python -m floe.config.reference` from the key declarations in
`src/floe/config/` (each key is declared once, with its type, default, bounds and
documentation); do not edit by hand.

**Broker keys** are read, later sources winning, from the defaults below, `floe.toml`
(`./floe.toml` or `--config FILE`; dotted names or TOML tables: `[log] segment.bytes =
...`), the `FLOE_*` environment variable named in the table, and `floe up --set KEY=VALUE`.
`floe config` prints the effective value of every key and where it came from.
Open-ended families (`[catalog.properties]`, `[catalog.spark]`, `[catalog.pyiceberg]`,
`[spark]`) are described in [table-topics.md](table-topics.md#broker-configuration-floetoml).

**Topic keys** are set per topic at creation (CreateTopics, `floe topic create --config`)
or live (AlterConfigs, IncrementalAlterConfigs, `floe topic alter`), and described by
DescribeConfigs; a topic key with a broker default (`log.retention.ms` ->
`retention.ms`) falls back to the broker's value.

**Table-topic keys** are topic keys too; each is also accepted with the prefix
`automq.` (see [table-topics.md](table-topics.md#topic-configuration)).
"""


SENSITIVE_NOTE = "Sensitive: DescribeConfigs answers it with a null value, `floe config` masks it."


def _allowed(key: ConfigKey[Any]) -> str:
    if key.choices:
        return ", ".join(key.choices) + (" (comma-separated list)" if key.is_list else "")
    if key.min is not None or key.max is not None:
        low = "" if key.min is None else _number(key.min)
        high = "" if key.max is None else _number(key.max)
        return f"{low}..{high}"
    return ""


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _table(keys: Iterable[ConfigKey[Any]], *, env: bool) -> list[str]:
    head = "| key | type | default | allowed | " + ("environment | " if env else "") + "meaning |"
    rule = "| --- | --- | --- | --- | " + ("--- | " if env else "") + "--- |"
    rows = [head, rule]
    for key in keys:
        default = key.render(key.default)
        shown = f"`{default}`" if default != "" else "(empty)"
        cells = [
            f"`{key.name}`",
            key.type.__name__,
            "(hidden)" if key.sensitive and default else shown,
            _cell(_allowed(key)),
        ]
        if env:
            cells.append(f"`{key.env_name}`")
        doc = key.doc + (f" {SENSITIVE_NOTE}" if key.sensitive else "")
        cells.append(_cell(doc))
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def render() -> str:
    """The whole page."""
    lines = [_INTRO, "## Broker keys", "", *_table(BROKER_KEYS, env=True), ""]
    lines += ["## Topic keys", "", *_table(TOPIC_KEYS, env=False), ""]
    lines += [
        "## Table-topic keys",
        "",
        f"Also accepted as `{AUTOMQ_PREFIX}X` for each `{PREFIX}X` below.",
        "",
        *_table(TABLE_TOPIC_KEYS, env=False),
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(render(), end="")
