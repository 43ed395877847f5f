"""``floe user create|list|delete``: SCRAM users, through Kafka's own APIs.

The CLI talks to the brokers as ``kafka-configs --alter --add-config 'SCRAM-SHA-512=
[password=...]'`` does: confluent-kafka's AdminClient salts and hashes the password on
this machine (AlterUserScramCredentials), so it never crosses the network, and the
broker stores only SCRAM's derived keys. ``--client-config`` (or ``cli.client.config``)
holds the caller's own credentials when the listener asks for them.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from typing import Any

from floe.cli.admin import TIMEOUT_S, add_common, kafka_admin, result, run_admin
from floe.cli.output import CliError

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
DEFAULT_ITERATIONS = 8192
"""Between Kafka's bounds (4096..16384): PBKDF2 rounds a guess costs."""


def add_parser(sub: Any) -> None:
    """Register ``floe user`` and its verbs on the top-level subparsers."""
    common = argparse.ArgumentParser(add_help=False)
    add_common(common)
    user = sub.add_parser("user", help="SCRAM users: create, list, delete")
    verbs = user.add_subparsers(dest="verb", required=True)
    create = verbs.add_parser(
        "create", parents=[common], help="create a user or set its password (SCRAM)"
    )
    create.add_argument("name")
    secret = create.add_mutually_exclusive_group()
    secret.add_argument(
        "--password-stdin", action="store_true", help="read the password from stdin"
    )
    secret.add_argument("--password", help="the password (visible to other local users)")
    _mechanism(create)
    create.add_argument(
        "--iterations", type=int, default=DEFAULT_ITERATIONS, help="4096..16384 (default 8192)"
    )
    verbs.add_parser("list", parents=[common], help="users and their SCRAM mechanisms")
    delete = verbs.add_parser("delete", parents=[common], help="delete a user's credentials")
    delete.add_argument("name")
    _mechanism(delete)


def _mechanism(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--mechanism",
        choices=(*MECHANISMS, "all"),
        default="all",
        help="which SCRAM credential (default: both)",
    )


def run(args: argparse.Namespace) -> int:
    """Run one ``floe user`` verb; returns the exit code."""
    verbs = {"create": _create, "list": _list, "delete": _delete}
    return run_admin(args, verbs[args.verb])


def _chosen(args: argparse.Namespace) -> list[Any]:
    names = MECHANISMS if args.mechanism == "all" else (args.mechanism,)
    return [kafka_admin().ScramMechanism[n.replace("-", "_")] for n in names]


def _password(args: argparse.Namespace) -> str:
    if args.password is not None:
        password = str(args.password)
    elif args.password_stdin or not sys.stdin.isatty():
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = getpass.getpass(f"Password for {args.name}: ")
    if not password:
        raise CliError("the password is empty")
    return password


def _create(admin: Any, args: argparse.Namespace) -> dict[str, Any]:
    ka = kafka_admin()
    password = _password(args).encode()
    changes = [
        ka.UserScramCredentialUpsertion(
            args.name, ka.ScramCredentialInfo(m, args.iterations), password
        )
        for m in _chosen(args)
    ]
    _alter(admin, changes)
    names = [_name(m) for m in _chosen(args)]
    return {
        "user": args.name, "mechanisms": names, "iterations": args.iterations,
        "_table": [["USER", "MECHANISMS", "ITERATIONS"],
                   [args.name, ", ".join(names), str(args.iterations)]],
    }  # fmt: skip


def _delete(admin: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Delete the chosen credentials the user has (``all``: whichever it has).

    Raises:
        CliError: the user has none of them.
    """
    ka = kafka_admin()
    held = {_name(m) for m in _held(admin, args.name)}
    chosen = [m for m in _chosen(args) if _name(m) in held]
    if not chosen:
        raise CliError(f"user {args.name!r} has no {args.mechanism} credential")
    _alter(admin, [ka.UserScramCredentialDeletion(args.name, m) for m in chosen])
    names = [_name(m) for m in chosen]
    return {
        "user": args.name, "deleted": names,
        "_table": [["USER", "DELETED"], [args.name, ", ".join(names)]],
    }  # fmt: skip


def _name(mechanism: Any) -> str:
    return str(mechanism.name).replace("_", "-")


def _held(admin: Any, name: str) -> list[Any]:
    """The mechanisms ``name`` has credentials for (none: an unknown user)."""
    described = admin.describe_user_scram_credentials(request_timeout=TIMEOUT_S)
    try:
        d = described[name].result(TIMEOUT_S) if isinstance(described, dict) else None
    except Exception as exc:
        if "RESOURCE_NOT_FOUND" in str(exc):
            return []
        raise
    if d is None:
        d = described.result(TIMEOUT_S).get(name)
    return [] if d is None else [info.mechanism for info in d.scram_credential_infos]


def _alter(admin: Any, changes: list[Any]) -> None:
    """One AlterUserScramCredentials per change (a request may name a user only once).

    Raises:
        KafkaException: the broker refused one (its error name and message).
    """
    for change in changes:
        for future in admin.alter_user_scram_credentials([change]).values():
            result(future)


def _list(admin: Any, args: argparse.Namespace) -> dict[str, Any]:
    described = admin.describe_user_scram_credentials(request_timeout=TIMEOUT_S).result(TIMEOUT_S)
    users = [
        {
            "user": name,
            "mechanisms": [
                {"mechanism": _name(info.mechanism), "iterations": info.iterations}
                for info in d.scram_credential_infos
            ],
        }
        for name, d in sorted(described.items())
    ]
    rows = [
        [u["user"], ", ".join(f"{m['mechanism']} ({m['iterations']})" for m in u["mechanisms"])]
        for u in users
    ]
    return {"users": users, "_table": [["USER", "MECHANISMS (ITERATIONS)"], *rows]}
