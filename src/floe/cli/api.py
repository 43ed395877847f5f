"""The CLI's client of the admin HTTP API, the one admin facade the console uses too
(:mod:`floe.admin`).

:func:`call` sends one request to ``/api/v1/...`` and decodes the JSON answer;
:func:`run_api` runs a verb ``(url, args) -> document`` against the URL
:func:`floe.cli.connect.admin` names (``--admin``, ``cli.admin``, else the server
config's ``admin.*``) and prints the document (:func:`floe.cli.output.emit`). Failures
are one line on stderr and exit code 1: an unreachable API
(``floe: cannot reach the admin API at URL: connection refused``), or the API's error
message (``floe: error: unknown topic 'x'``); ``--debug`` adds the stack trace.
"""

from __future__ import annotations

import argparse
import json
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from floe.cli import connect
from floe.cli.output import CliError, add_output, emit, fail

TIMEOUT_S = 30.0

Verb = Callable[[str, argparse.Namespace], dict[str, Any]]


class UnreachableError(Exception):
    """No connection to the admin API (printed without the ``error:`` label)."""


def add_common(
    parser: argparse.ArgumentParser, config_flags: tuple[str, ...] = ("--config", "-c")
) -> None:
    """``--admin``, the config file flag and ``--output``: every admin API verb has them."""
    connect.add_connection(parser, admin=True, config_flags=config_flags)
    add_output(parser)


def run_api(args: argparse.Namespace, verb: Verb) -> int:
    """Run ``verb`` against the admin API and print its document; returns the exit code."""
    try:
        emit(args, verb(connect.admin(args), args))
    except UnreachableError as exc:
        return fail(args, exc, prefix="floe")
    except CliError as exc:
        return fail(args, exc)
    return 0


def segment(name: str) -> str:
    """A topic or group name as one URL path segment."""
    return quote(name, safe="")


def fetch(
    url: str, path: str, method: str = "GET", body: Any = None, timeout_s: float = TIMEOUT_S
) -> Any:
    """Send ``method url + path`` (``body`` as JSON) and decode the JSON answer, waiting
    ``timeout_s`` at most; with the credentials and CA the client properties give for
    ``url`` (:func:`floe.cli.connect.http_access`).

    Raises:
        UnreachableError: no connection (refused, timeout, unknown host).
        CliError: an error answer (its ``message``) or a body that is not JSON.
    """
    data = None if body is None else json.dumps(body).encode()
    access = connect.http_access(url)
    request = urllib.request.Request(url + path, data=data, method=method, headers=access.headers())
    if data is not None:
        request.add_header("Content-Type", "application/json")
    tls = access.tls() if url.startswith("https:") else None
    try:
        with urllib.request.urlopen(request, timeout=timeout_s, context=tls) as response:
            answer = response.read()
    except urllib.error.HTTPError as exc:
        raise CliError(_error_message(exc)) from None
    except urllib.error.URLError as exc:
        raise UnreachableError(
            f"cannot reach the admin API at {url}: {_reason(exc.reason)}"
        ) from None
    except OSError as exc:  # timeouts while reading, resets
        raise UnreachableError(f"cannot reach the admin API at {url}: {_reason(exc)}") from None
    try:
        return json.loads(answer)
    except ValueError:
        raise CliError(f"the admin API at {url} answered something that is not JSON") from None


def _reason(reason: object) -> str:
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused"
    if isinstance(reason, TimeoutError):
        return f"no answer within {TIMEOUT_S:g} s"
    if isinstance(reason, OSError) and reason.strerror:
        return reason.strerror.lower()
    return str(reason)


def _error_message(exc: urllib.error.HTTPError) -> str:
    try:
        message = json.loads(exc.read())["message"]
    except Exception:
        return f"HTTP {exc.code} {exc.reason}"
    return str(message).splitlines()[0] if message else f"HTTP {exc.code}"
