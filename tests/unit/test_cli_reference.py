"""docs/cli.md is what the ``floe`` parser renders (regenerate it with
``python -m floe.cli.reference > docs/cli.md``)."""

from pathlib import Path

from floe.cli.main import build_parser
from floe.cli.reference import markdown

PAGE = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def test_the_committed_cli_reference_is_current() -> None:
    assert PAGE.read_text() == markdown(build_parser()), (
        "docs/cli.md is stale: python -m floe.cli.reference > docs/cli.md"
    )


def test_every_command_has_a_section() -> None:
    text = markdown(build_parser())
    for command in ("topic create", "produce", "consume", "group describe", "schema get"):
        assert f"## `floe {command}`" in text
    assert "| `--output`, `-o` `table\\|json\\|yaml` | `table` |" in text
