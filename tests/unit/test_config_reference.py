"""docs/configuration.md is the page the key declarations render (regenerate it with
``python -m floe.config.reference > docs/configuration.md``)."""

from pathlib import Path

from floe.config.broker import BROKER_KEYS
from floe.config.reference import render

PAGE = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_the_committed_reference_is_current() -> None:
    assert PAGE.read_text() == render(), (
        "docs/configuration.md is stale: python -m floe.config.reference > docs/configuration.md"
    )


def test_every_broker_key_is_on_the_page() -> None:
    text = render()
    for key in BROKER_KEYS:
        assert f"| `{key.name}` |" in text and key.env_name in text
