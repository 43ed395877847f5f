"""``floe acl add|list|remove``: Kafka ACLs, through Kafka's own APIs.

The flags are ``kafka-acls``'s: ``--allow-principal``/``--deny-principal`` (``User:alice``,
``User:*`` for everyone; repeatable), ``--allow-host``/``--deny-host`` (default ``*``),
``--operation`` (repeatable; default All), and the resources ``--topic``, ``--group``,
``--transactional-id`` (each repeatable) and ``--cluster``, with
``--resource-pattern-type`` literal (default) or prefixed, and for list and remove also
any (every pattern type, the exact name) or match (every ACL that applies to the
named resource: its literal ACLs, the ``*`` ones and the matching prefixes).

``add`` creates every combination of principal, host, operation and resource
(CreateAcls). ``list`` shows the ACLs of the named resources, or all of them
(DescribeAcls). ``remove`` deletes the named resources' ACLs: those of the principals
given, limited to the hosts and operations given if any, or all of them (DeleteAcls);
unlike ``kafka-acls`` it does not ask for confirmation. The brokers answer
SECURITY_DISABLED while ``authorizer.enable`` is off.
"""

from __future__ import annotations

import argparse
import itertools
from typing import Any

from floe.cli.admin import TIMEOUT_S, add_common, kafka_admin, result, run_admin
from floe.cli.output import CliError

OPERATIONS = (
    "ALL", "READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "CLUSTER_ACTION",
    "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE",
)  # fmt: skip
"""The operations confluent-kafka's AclOperation knows (not Kafka's token operations)."""
CLUSTER_NAME = "kafka-cluster"
HEADER = ["PRINCIPAL", "HOST", "OPERATION", "PERMISSION", "RESOURCE", "PATTERN", "NAME"]


def add_parser(sub: Any) -> None:
    """Register ``floe acl`` and its verbs on the top-level subparsers."""
    common = argparse.ArgumentParser(add_help=False)
    add_common(common)
    acl = sub.add_parser("acl", help="Kafka ACLs: add, list, remove")
    verbs = acl.add_subparsers(dest="verb", required=True)
    add = verbs.add_parser(
        "add", parents=[common], help="allow or deny principals operations on resources"
    )
    _entries(add, default="*, any host", default_operation="All")
    _resources(add, ("literal", "prefixed"))
    lst = verbs.add_parser("list", parents=[common], help="the ACLs of resources (default: all)")
    lst.add_argument(
        "--principal", action="append", default=[], help="only this principal's (repeatable)"
    )
    _resources(lst, ("literal", "prefixed", "any", "match"))
    remove = verbs.add_parser(
        "remove", parents=[common], help="delete ACLs of resources (all, or the principals')"
    )
    _entries(remove, default="any", default_operation="any")
    _resources(remove, ("literal", "prefixed", "any", "match"))


def _entries(p: argparse.ArgumentParser, default: str, default_operation: str) -> None:
    for permission in ("allow", "deny"):
        p.add_argument(
            f"--{permission}-principal",
            action="append",
            default=[],
            metavar="PRINCIPAL",
            help=f"principal to {permission}, Type:name (User:alice, User:* for all; repeatable)",
        )
        p.add_argument(
            f"--{permission}-host",
            action="append",
            default=[],
            metavar="HOST",
            help=f"host of the --{permission}-principal ACLs (repeatable; default {default})",
        )
    p.add_argument(
        "--operation",
        action="append",
        default=[],
        type=_operation,
        help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
        f"AlterConfigs, IdempotentWrite or All (repeatable; default {default_operation})",
    )


def _resources(p: argparse.ArgumentParser, patterns: tuple[str, ...]) -> None:
    p.add_argument("--topic", action="append", default=[], help="a topic (repeatable)")
    p.add_argument("--group", action="append", default=[], help="a consumer group (repeatable)")
    p.add_argument(
        "--transactional-id", action="append", default=[], help="a transactional id (repeatable)"
    )
    p.add_argument("--cluster", action="store_true", help=f"the cluster ({CLUSTER_NAME})")
    p.add_argument(
        "--resource-pattern-type",
        choices=patterns,
        default="literal",
        help="how the names match: " + ", ".join(patterns) + " (default literal)",
    )


def _operation(text: str) -> str:
    """An operation name as Kafka's tools accept it (Read, DescribeConfigs,
    describe_configs...), as confluent-kafka's name; ``any`` stays ``ANY``."""
    wanted = text.replace("_", "").replace("-", "").upper()
    for name in (*OPERATIONS, "ANY"):
        if name.replace("_", "") == wanted:
            return name
    raise argparse.ArgumentTypeError(f"unknown operation {text!r}")


def run(args: argparse.Namespace) -> int:
    """Run one ``floe acl`` verb; returns the exit code."""
    verbs = {"add": _add, "list": _list, "remove": _remove}
    return run_admin(args, verbs[args.verb])


Resource = tuple[str, str | None]
"""A confluent-kafka resource type name and a resource name (None: any, in a filter)."""
Entry = tuple[str | None, str | None, str, str]
"""Principal, host (None: any, in a filter), operation and permission names."""


def _named(args: argparse.Namespace) -> list[Resource]:
    """The resources the flags name."""
    named: list[Resource] = [("TOPIC", t) for t in args.topic]
    named += [("GROUP", g) for g in args.group]
    named += [("TRANSACTIONAL_ID", t) for t in args.transactional_id]
    if args.cluster:
        named.append(("BROKER", CLUSTER_NAME))  # confluent-kafka's name for CLUSTER (4)
    return named


def _principals(names: list[str]) -> list[str]:
    """Raises: CliError: a principal that is not ``Type:name``."""
    for p in names:
        kind, _, name = p.partition(":")
        if not kind or not name:
            raise CliError(f"a principal is Type:name (User:alice), not {p!r}")
    return names


def _entries_of(args: argparse.Namespace, any_host: str | None, any_operation: str) -> list[Entry]:
    """Every combination of principal, host and operation the flags give, ALLOW for
    the --allow-* flags and DENY for the --deny-* ones."""
    operations = list(dict.fromkeys(args.operation)) or [any_operation]
    entries: list[Entry] = []
    for permission in ("ALLOW", "DENY"):
        principals = _principals(getattr(args, f"{permission.lower()}_principal"))
        hosts: list[str | None] = [*getattr(args, f"{permission.lower()}_host")] or [any_host]
        entries += [
            (principal, host, operation, permission)
            for principal, host, operation in itertools.product(principals, hosts, operations)
        ]
    return entries


def _combine(cls: Any, named: list[Resource], pattern: str, entries: list[Entry]) -> list[Any]:
    """A confluent-kafka ``cls`` (AclBinding or AclBindingFilter) per resource and entry."""
    ka = kafka_admin()
    return [
        cls(
            ka.ResourceType[rtype],
            name,
            ka.ResourcePatternType[pattern.upper()],
            principal,
            host,
            ka.AclOperation[operation],
            ka.AclPermissionType[permission],
        )
        for (rtype, name), (principal, host, operation, permission) in itertools.product(
            named, entries
        )
    ]


def _add(admin: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Raises: CliError: no principal or no resource given."""
    named = _named(args)
    entries = _entries_of(args, "*", "ALL")
    if not entries:
        raise CliError("name a principal: --allow-principal or --deny-principal")
    if not named:
        raise CliError("name a resource: --topic, --group, --transactional-id or --cluster")
    bindings = _combine(kafka_admin().AclBinding, named, args.resource_pattern_type, entries)
    for future in admin.create_acls(bindings, request_timeout=TIMEOUT_S).values():
        result(future)
    return _document(bindings)


def _list(admin: Any, args: argparse.Namespace) -> dict[str, Any]:
    named, pattern = _named(args), args.resource_pattern_type
    if not named:  # everything, whatever --resource-pattern-type says (as kafka-acls)
        named, pattern = [("ANY", None)], "any"
    principals = set(_principals(args.principal))
    found: dict[Any, None] = {}
    for acl_filter in _combine(
        kafka_admin().AclBindingFilter, named, pattern, [(None, None, "ANY", "ANY")]
    ):
        for binding in admin.describe_acls(acl_filter, request_timeout=TIMEOUT_S).result(TIMEOUT_S):
            if not principals or binding.principal in principals:
                found[binding] = None
    return _document(list(found))


def _remove(admin: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Raises: CliError: no resource given (removing every ACL takes naming them)."""
    named = _named(args)
    if not named:
        raise CliError("name a resource: --topic, --group, --transactional-id or --cluster")
    entries = _entries_of(args, None, "ANY") or [(None, None, "ANY", "ANY")]
    filters = _combine(kafka_admin().AclBindingFilter, named, args.resource_pattern_type, entries)
    deleted: dict[Any, None] = {}
    for future in admin.delete_acls(filters, request_timeout=TIMEOUT_S).values():
        for binding in result(future):
            deleted[binding] = None
    return _document(list(deleted))


def _document(bindings: list[Any]) -> dict[str, Any]:
    """The bindings as a document (sorted) and a table."""
    acls = sorted(
        (
            {
                "principal": b.principal,
                "host": b.host,
                "operation": b.operation.name,
                "permission": b.permission_type.name,
                "resource_type": "CLUSTER" if b.restype.name == "BROKER" else b.restype.name,
                "pattern_type": b.resource_pattern_type.name,
                "resource_name": b.name,
            }
            for b in bindings
        ),
        key=lambda a: (a["resource_type"], a["resource_name"], a["pattern_type"],
                       a["principal"], a["host"], a["operation"], a["permission"]),
    )  # fmt: skip
    rows = [
        [a["principal"], a["host"], a["operation"], a["permission"], a["resource_type"],
         a["pattern_type"], a["resource_name"]]
        for a in acls
    ]  # fmt: skip
    return {"acls": acls, "_table": [HEADER, *rows]}
