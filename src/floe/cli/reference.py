"""docs/cli.md, generated from the ``floe`` argparse tree: ``python -m floe.cli.reference
> docs/cli.md``. A unit test checks the file is current, so the reference cannot drift
from the parser."""

from __future__ import annotations

import argparse

from floe.cli.completion import subcommands, walk
from floe.cli.main import build_parser

INTRO = """# floe CLI reference

Generated from the argument parser by `python -m floe.cli.reference > docs/cli.md`
(a unit test fails when it is stale). `floe COMMAND --help` prints the same.

Conventions:

- **Where Floe is.** Commands that talk to Floe take `--brokers`/`-b HOST:PORT`,
  `--registry URL` and/or `--admin URL`. Without them, the `[cli]` table of `floe.toml`
  (`cli.brokers`, `cli.registry`, `cli.admin`; or `FLOE_CLI_*`) names them, and without
  those the addresses of the Floe that configuration describes (`kafka.port`,
  `registry.port`, `admin.port`...). `--config FILE` (`--config-file` for `floe topic`,
  whose `--config` sets topic configs) picks another file, so a file holding only

  ```toml
  [cli]
  brokers = "floe.example.com:9092"
  registry = "http://floe.example.com:8081"
  admin = "http://floe.example.com:8080"
  ```

  is a profile for a remote Floe.
- **Output.** Read commands take `--output`/`-o table|json|yaml` (default `table`).
  `floe consume -o json` prints one object per line, `-o yaml` one list item per record.
- **Errors** are one line on stderr and a non-zero exit code; `--debug` (before or
  after the command) adds the stack trace.
- **Completion:** `eval "$(floe completion bash)"` (or `zsh`) in your shell's rc file.
"""


def _flags(action: argparse.Action) -> str:
    """The flags and the value they take, as a table cell (``|`` escaped)."""
    if action.choices:
        value = "\\|".join(str(c) for c in action.choices)
    else:
        value = str(
            action.metavar or (action.dest if not action.option_strings else action.dest.upper())
        )
    if not action.option_strings:
        return f"`{value}`"
    flags = ", ".join(f"`{s}`" for s in action.option_strings)
    return flags if action.nargs == 0 else f"{flags} `{value}`"


def _default(action: argparse.Action) -> str:
    default = action.default
    if action.nargs == 0 or default in (None, [], argparse.SUPPRESS):
        return ""
    return f"`{default}`"


def _helps(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> dict[tuple[str, ...], str]:
    """Each command path's one-line help, as ``floe --help`` lists it."""
    out: dict[tuple[str, ...], str] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                out[(*path, choice.dest)] = choice.help or ""
            for name, child in action.choices.items():
                out.update(_helps(child, (*path, name)))
    return out


def markdown(parser: argparse.ArgumentParser) -> str:
    """The reference: one section per command that runs (leaves of the tree)."""
    out = [INTRO]
    helps = _helps(parser)
    for path, p in walk(parser):
        if not path or subcommands(p):
            continue
        out.append(f"## `{' '.join(('floe', *path))}`\n")
        if helps.get(path):
            out.append(f"{helps[path][0].upper()}{helps[path][1:]}.\n")
        rows = [
            a
            for a in p._actions
            if not isinstance(a, argparse._HelpAction) and a.help != argparse.SUPPRESS
        ]
        rows = [a for a in rows if a.dest != "debug"]
        if not rows:
            continue
        out.append("| argument | default | description |\n|---|---|---|")
        for a in rows:
            text = (a.help or "").replace("|", "\\|") % {"default": a.default}
            out.append(f"| {_flags(a)} | {_default(a)} | {text} |")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


if __name__ == "__main__":
    print(markdown(build_parser()), end="")
