"""DescribeUserScramCredentials (50) and AlterUserScramCredentials (51): the SCRAM
users, as Kafka's tools and AdminClients manage them (``kafka-configs --alter
--add-config 'SCRAM-SHA-256=[password=...]'``, ``AdminClient.alter_user_scram_credentials``).

The client salts and hashes the password; the broker stores the salt, iteration count
and the two keys SCRAM derives from the salted password, never the password itself
(``floe.security.users``). Errors are Kafka's, per user: an empty name or iterations
outside 4096..16384 are UNACCEPTABLE_CREDENTIAL, an unknown mechanism
UNSUPPORTED_SASL_MECHANISM, a user named twice DUPLICATE_RESOURCE, deleting or
describing a credential that does not exist RESOURCE_NOT_FOUND.
"""

from __future__ import annotations

import logging
from collections import Counter
from datetime import timedelta
from typing import Any

from floe.broker import authz
from floe.broker.build import build
from floe.broker.core import Broker, Reply, RequestContext
from floe.errors import ErrorCode
from floe.security.acl import AclOperation as Op
from floe.security.scram import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    ScramCredential,
    from_salted_password,
)
from floe.security.users import RESERVED_PREFIX

log = logging.getLogger("floe.broker.users")

MECHANISM_BY_TYPE = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
"""Kafka's ScramMechanism numbers."""
TYPE_BY_MECHANISM = {m: t for t, m in MECHANISM_BY_TYPE.items()}
_DIGEST_BYTES = {"SCRAM-SHA-256": 32, "SCRAM-SHA-512": 64}


def handle_describe(broker: Broker, ctx: RequestContext, req: Any) -> Reply:
    if not authz.on_cluster(broker, ctx, Op.DESCRIBE):
        return build(
            ctx.response_class,
            {
                "throttle_time": timedelta(0),
                "error_code": ErrorCode.cluster_authorization_failed,
                # a message, not null: librdkafka 2.16 frees whatever is here
                "error_message": "Cluster authorization failed.",
                "results": [],
            },
        )
    users = broker.users
    results: list[dict[str, Any]] = []
    if users is not None:
        named = [u.name for u in req.users] if req.users else None
        twice = {n for n, k in Counter(named or ()).items() if k > 1}
        known = users.describe(None if named is None else set(named) - twice)
        for name in dict.fromkeys(named) if named is not None else sorted(known):
            if name in twice:
                results.append(_error(name, ErrorCode.duplicate_resource,
                                      "Cannot describe SCRAM credentials for the same user "
                                      "twice in a single request"))  # fmt: skip
            elif not known.get(name):
                results.append(_error(name, ErrorCode.resource_not_found,
                                      "Attempt to describe a user credential that does not "
                                      "exist"))  # fmt: skip
            else:
                infos = [
                    {"mechanism": TYPE_BY_MECHANISM[m], "iterations": i} for m, i in known[name]
                ]
                results.append(
                    {"user": name, "error_code": ErrorCode.none, "error_message": None,
                     "credential_infos": infos}
                )  # fmt: skip
    return build(
        ctx.response_class,
        {
            "throttle_time": timedelta(0),
            "error_code": ErrorCode.none,
            "error_message": None,
            "results": results,
        },
    )


def handle_alter(broker: Broker, ctx: RequestContext, req: Any) -> Reply:
    users = broker.users
    names = [d.name for d in req.deletions] + [u.name for u in req.upsertions]
    if not authz.on_cluster(broker, ctx, Op.ALTER):
        return _alter_response(
            ctx, dict.fromkeys(names, (ErrorCode.cluster_authorization_failed, ""))
        )
    if users is None:
        return _alter_response(
            ctx, {n: (ErrorCode.unsupported_version, "no user store") for n in names}
        )
    outcome: dict[str, tuple[ErrorCode, str]] = {}
    count = Counter([d.name for d in req.deletions] + [u.name for u in req.upsertions])
    upserts: list[tuple[str, ScramCredential]] = []
    deletions: list[tuple[str, str]] = []
    for d in req.deletions:
        problem = _check(d.name, d.mechanism, count)
        if problem is None and users.get(d.name, MECHANISM_BY_TYPE[d.mechanism]) is None:
            problem = (
                ErrorCode.resource_not_found,
                "Attempt to delete a user credential that does not exist",
            )
        if problem is None:
            deletions.append((d.name, MECHANISM_BY_TYPE[d.mechanism]))
        outcome.setdefault(d.name, problem or (ErrorCode.none, ""))
    for u in req.upsertions:
        problem = _check(u.name, u.mechanism, count) or _check_upsertion(u)
        if problem is None:
            mechanism = MECHANISM_BY_TYPE[u.mechanism]
            try:
                cred = from_salted_password(mechanism, u.salt, u.iterations, u.salted_password)
            except ValueError as exc:  # a salt beyond the bounds, say
                problem = (ErrorCode.unacceptable_credential, str(exc))
            else:
                upserts.append((u.name, cred))
        outcome.setdefault(u.name, problem or (ErrorCode.none, ""))
    return _alter(ctx, broker, upserts, deletions, outcome)


async def _alter(
    ctx: RequestContext,
    broker: Broker,
    upserts: list[tuple[str, ScramCredential]],
    deletions: list[tuple[str, str]],
    outcome: dict[str, tuple[ErrorCode, str]],
) -> Any:
    users = broker.users
    assert users is not None
    if upserts or deletions:
        try:
            await users.alter(upserts, deletions)
        except Exception:
            log.exception("users.alter_failed peer=%s", ctx.peer)
            for name, _ in [*upserts, *deletions]:
                outcome[name] = (ErrorCode.unknown_server_error, "the change was not stored")
    return _alter_response(ctx, outcome)


def _alter_response(ctx: RequestContext, outcome: dict[str, tuple[ErrorCode, str]]) -> Any:
    results = [
        {"user": name, "error_code": code, "error_message": message or None}
        for name, (code, message) in outcome.items()
    ]
    return build(ctx.response_class, {"throttle_time": timedelta(0), "results": results})


def _check(name: str, mechanism: int, count: Counter[str]) -> tuple[ErrorCode, str] | None:
    if not name:
        return ErrorCode.unacceptable_credential, "Username must not be empty"
    if name.startswith(RESERVED_PREFIX):
        return ErrorCode.unacceptable_credential, f"Usernames starting {RESERVED_PREFIX} are Floe's"
    if count[name] > 1:
        return (
            ErrorCode.duplicate_resource,
            "A user credential cannot be altered twice in the same request",
        )
    if mechanism not in MECHANISM_BY_TYPE:
        return ErrorCode.unsupported_sasl_mechanism, f"Unknown SCRAM mechanism {mechanism}"
    return None


def _check_upsertion(u: Any) -> tuple[ErrorCode, str] | None:
    if u.iterations < MIN_ITERATIONS:
        return ErrorCode.unacceptable_credential, f"Too few iterations: {u.iterations}"
    if u.iterations > MAX_ITERATIONS:
        return ErrorCode.unacceptable_credential, f"Too many iterations: {u.iterations}"
    if not u.salt:
        return ErrorCode.unacceptable_credential, "Salt must not be empty"
    if len(u.salted_password) != _DIGEST_BYTES[MECHANISM_BY_TYPE[u.mechanism]]:
        return ErrorCode.unacceptable_credential, "Salted password has the wrong length"
    return None


def _error(name: str, code: ErrorCode, message: str) -> dict[str, Any]:
    return {"user": name, "error_code": code, "error_message": message, "credential_infos": []}
