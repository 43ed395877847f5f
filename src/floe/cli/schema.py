"""``floe schema``: talk to a running Schema Registry over its REST API.

Standard-library HTTP only (``urllib``), so the CLI starts fast and works against any
Confluent-compatible registry (``--registry``, else ``cli.registry``, else the configured
``registry.host``/``registry.port``: :mod:`floe.cli.connect`). Failures print one line
on stderr and exit 1.
"""

from __future__ import annotations

import argparse
import json
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from floe.cli import connect
from floe.cli.output import CliError, add_output, dump, fail

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
TIMEOUT_S = 30.0
_TYPES_BY_SUFFIX = {".avsc": "AVRO", ".json": "JSON", ".proto": "PROTOBUF"}
LEVELS = (
    "NONE",
    "BACKWARD",
    "BACKWARD_TRANSITIVE",
    "FORWARD",
    "FORWARD_TRANSITIVE",
    "FULL",
    "FULL_TRANSITIVE",
)


def add_parser(sub: Any) -> None:
    """Register ``floe schema`` and its verbs on the top-level subparsers."""
    common = argparse.ArgumentParser(add_help=False)
    connect.add_connection(common, registry=True)
    add_output(common)
    schema = sub.add_parser("schema", help="register, inspect and check schemas")
    verbs = schema.add_subparsers(dest="verb", required=True)

    def with_schema_file(p: argparse.ArgumentParser) -> None:
        p.add_argument("subject")
        p.add_argument("file", type=Path)
        p.add_argument(
            "--type",
            choices=("AVRO", "JSON", "PROTOBUF"),
            help="schema type (default: from the file suffix .avsc/.json/.proto, else AVRO)",
        )
        p.add_argument(
            "--references",
            help='JSON list of {"name","subject","version"} the schema refers to',
        )

    register = verbs.add_parser("register", parents=[common], help="register a schema")
    with_schema_file(register)
    verbs.add_parser("list", parents=[common], help="list subjects")
    get = verbs.add_parser("get", parents=[common], help="show a subject version")
    get.add_argument("subject")
    get.add_argument("version", nargs="?", default="latest")
    compat = verbs.add_parser(
        "compat", parents=[common], help="check a schema against a subject (exit 1 if not)"
    )
    with_schema_file(compat)
    config = verbs.add_parser("config", parents=[common], help="show or set a compatibility level")
    config.add_argument("subject", nargs="?")
    config.add_argument("--level", type=str.upper, choices=LEVELS)


def _request(base: str, method: str, path: str, body: object = None) -> Any:
    """One JSON request; returns the decoded JSON answer.

    Raises:
        CliError: the registry is unreachable or answered with an error.
    """
    data = None if body is None else json.dumps(body).encode()
    access = connect.http_access(base)
    req = urllib.request.Request(
        base.rstrip("/") + path,
        data=data,
        method=method,
        headers={"Content-Type": CONTENT_TYPE, "Accept": CONTENT_TYPE, **access.headers()},
    )
    tls = access.tls() if base.startswith("https:") else None
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S, context=tls) as resp:
            return json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        try:
            err = json.loads(raw)
            message = f"{err['message']} (error code {err['error_code']})"
        except (ValueError, KeyError, TypeError):
            message = f"HTTP {exc.code} {raw[:200].decode(errors='replace')}"
        raise CliError(message) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise CliError(f"cannot reach the registry at {base}: {reason}") from None


def _quote(subject: str) -> str:
    return urllib.parse.quote(subject, safe="")


def _schema_body(args: argparse.Namespace) -> dict[str, Any]:
    try:
        text = args.file.read_text()
    except OSError as exc:
        raise CliError(f"cannot read {args.file}: {exc.strerror or exc}") from None
    body: dict[str, Any] = {
        "schema": text,
        "schemaType": args.type or _TYPES_BY_SUFFIX.get(args.file.suffix.lower(), "AVRO"),
    }
    if args.references:
        try:
            body["references"] = json.loads(args.references)
        except ValueError as exc:
            raise CliError(f"--references is not JSON: {exc}") from None
    return body


def _run(args: argparse.Namespace) -> tuple[object, str, int]:
    """Do the verb; returns (JSON result, text rendering, exit code)."""
    base = connect.registry(args)
    if args.verb == "register":
        result = _request(
            base, "POST", f"/subjects/{_quote(args.subject)}/versions", _schema_body(args)
        )
        got = _request(base, "GET", f"/subjects/{_quote(args.subject)}/versions/latest")
        out = {"subject": args.subject, "id": result["id"], "version": got["version"]}
        return out, f"registered {args.subject} version {got['version']} id {result['id']}", 0
    if args.verb == "list":
        subjects = _request(base, "GET", "/subjects")
        return subjects, "\n".join(subjects), 0
    if args.verb == "get":
        path = f"/subjects/{_quote(args.subject)}/versions/{_quote(args.version)}"
        sv = _request(base, "GET", path)
        head = (
            f"{sv['subject']} version {sv['version']} id {sv['id']} {sv.get('schemaType', 'AVRO')}"
        )
        return sv, f"{head}\n{sv['schema']}", 0
    if args.verb == "compat":
        path = f"/compatibility/subjects/{_quote(args.subject)}/versions?verbose=true"
        result = _request(base, "POST", path, _schema_body(args))
        if result["is_compatible"]:
            return result, "compatible", 0
        return result, "\n".join(["incompatible", *result.get("messages", [])]), 1
    path = "/config" + (f"/{_quote(args.subject)}" if args.subject else "")
    if args.level:
        result = _request(base, "PUT", path, {"compatibility": args.level})
        return result, result["compatibility"], 0
    query = "?defaultToGlobal=true" if args.subject else ""
    result = _request(base, "GET", path + query)
    return result, result["compatibilityLevel"], 0


def run(args: argparse.Namespace) -> int:
    """Run ``floe schema VERB``; returns the exit code."""
    try:
        result, text, code = _run(args)
    except CliError as exc:
        return fail(args, exc, prefix="floe schema: error")
    print(text if args.output == "table" else dump(result, args.output))
    return code
