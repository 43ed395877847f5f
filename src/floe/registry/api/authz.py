"""What a Schema Registry request needs: its credentials (HTTP Basic) and the Kafka ACL
it is checked against (``authorizer.enable``).

Subjects are authorized through the TOPIC ACLs of their topic, the way Confluent's
TopicNameStrategy names them: ``<topic>-key`` and ``<topic>-value`` belong to
``<topic>``; any other subject to a topic named like the subject (:func:`topic_of`).
:data:`RULES` is the whole mapping, one row per route; a request no row matches needs
only an authenticated principal (the router then answers 404 or 405).

Invariant: nothing here does I/O or knows HTTP beyond a method and a path; the
middleware (:mod:`floe.registry.api.auth`) asks :func:`requirement` and
:func:`parse_basic` and acts on the answers.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from enum import Enum
from urllib.parse import unquote

from floe.security.acl import CLUSTER_NAME, AclOperation, ResourceType

MAX_AUTHORIZATION_CHARS = 4096
"""The longest ``Authorization`` header value parsed (longer ones are refused)."""
SUFFIXES = ("-key", "-value")
"""TopicNameStrategy's subject suffixes."""


class On(Enum):
    """What a rule's operation applies to."""

    NOTHING = "nothing"
    """Any authenticated principal may (no ACL is checked)."""
    SUBJECT = "subject"
    """The TOPIC ACLs of the ``{subject}`` path parameter's topic."""
    CLUSTER = "cluster"
    """The CLUSTER resource (the registry's global config and mode)."""


class Listing(Enum):
    """A response listing subjects, filtered to those whose topic the principal may
    DESCRIBE (Kafka's Metadata leaves such topics out the same way)."""

    NAMES = "names"
    """A JSON list of subject names."""
    OBJECTS = "objects"
    """A JSON list of objects, each with a ``subject`` field."""


@dataclass(frozen=True, slots=True)
class Rule:
    """One route: ``method`` and ``template`` (``{name}`` matches one path segment) and
    what it needs. ``public``: no credentials at all (``GET /``, as in Confluent)."""

    method: str
    template: str
    operation: AclOperation | None = None
    on: On = On.NOTHING
    listing: Listing | None = None
    public: bool = False


_S = "/subjects/{subject}"
_V = _S + "/versions/{version}"
READ, WRITE, DELETE = AclOperation.DESCRIBE, AclOperation.WRITE, AclOperation.DELETE
"""Reads need DESCRIBE, which a READ (or WRITE, DELETE, ALTER) ACL implies in Kafka."""
CONFIG = AclOperation.ALTER_CONFIGS

RULES: tuple[Rule, ...] = (
    Rule("GET", "/", public=True),
    Rule("GET", "/subjects", listing=Listing.NAMES),
    Rule("POST", _S, READ, On.SUBJECT),  # is this schema registered under the subject?
    Rule("DELETE", _S, DELETE, On.SUBJECT),
    Rule("GET", _S + "/versions", READ, On.SUBJECT),
    Rule("POST", _S + "/versions", WRITE, On.SUBJECT),
    Rule("GET", _V, READ, On.SUBJECT),
    Rule("DELETE", _V, DELETE, On.SUBJECT),
    Rule("GET", _V + "/schema", READ, On.SUBJECT),
    Rule("GET", _V + "/referencedby", READ, On.SUBJECT),
    Rule("GET", "/schemas", listing=Listing.OBJECTS),
    Rule("GET", "/schemas/ids/{id}/subjects", listing=Listing.NAMES),
    Rule("GET", "/schemas/ids/{id}/versions", listing=Listing.OBJECTS),
    Rule("GET", "/config/{subject}", READ, On.SUBJECT),
    Rule("PUT", "/config/{subject}", CONFIG, On.SUBJECT),
    Rule("DELETE", "/config/{subject}", CONFIG, On.SUBJECT),
    Rule("PUT", "/config", CONFIG, On.CLUSTER),
    Rule("DELETE", "/config", CONFIG, On.CLUSTER),
    Rule("GET", "/mode/{subject}", READ, On.SUBJECT),
    Rule("PUT", "/mode/{subject}", CONFIG, On.SUBJECT),
    Rule("DELETE", "/mode/{subject}", CONFIG, On.SUBJECT),
    Rule("PUT", "/mode", CONFIG, On.CLUSTER),
    Rule("POST", "/compatibility" + _S + "/versions", READ, On.SUBJECT),
    Rule("POST", "/compatibility" + _V, READ, On.SUBJECT),
)
"""Every route that needs more than an authenticated principal, or less. Not listed,
so open to any authenticated principal: ``/health``, ``/schemas/types``,
``/schemas/ids/{id}`` and ``/schemas/ids/{id}/schema`` (a schema by id, as Confluent's
default), ``GET /config`` and ``GET /mode`` (the global settings)."""

AUTHENTICATED = Rule("*", "*")
"""What a request no rule matches needs."""


@dataclass(frozen=True, slots=True)
class Requirement:
    """What one request needs: its :class:`Rule`, and the resource the rule's operation
    applies to (None for :attr:`On.NOTHING`)."""

    rule: Rule
    resource_type: ResourceType | None = None
    name: str = ""
    subject: str = ""


def topic_of(subject: str) -> str:
    """The topic whose ACLs guard ``subject``: ``orders-value`` and ``orders-key`` ->
    ``orders``; anything else (``orders``, ``com.acme.Order``, ``-value``) -> itself."""
    for suffix in SUFFIXES:
        if subject.endswith(suffix) and len(subject) > len(suffix):
            return subject[: -len(suffix)]
    return subject


def _match(template: str, segments: list[str]) -> dict[str, str] | None:
    parts = template.strip("/").split("/") if template != "/" else [""]
    if len(parts) != len(segments):
        return None
    params: dict[str, str] = {}
    for part, seg in zip(parts, segments, strict=True):
        if part.startswith("{") and part.endswith("}"):
            if not seg:
                return None
            params[part[1:-1]] = unquote(seg)
        elif part != seg:
            return None
    return params


def requirement(method: str, path: str) -> Requirement:
    """What ``method`` on ``path`` needs. ``path`` is the scope's path, each segment
    still percent-escaped for ``%`` and ``/`` (the app's ``_KeepEncodedSlashes``), so a
    subject ``a/b`` is the one segment ``a%2Fb``."""
    trimmed = path.rstrip("/") or "/"
    segments = trimmed.strip("/").split("/") if trimmed != "/" else [""]
    for rule in RULES:
        if rule.method != method.upper():
            continue
        params = _match(rule.template, segments)
        if params is None:
            continue
        if rule.on is On.SUBJECT:
            subject = params["subject"]
            return Requirement(rule, ResourceType.TOPIC, topic_of(subject), subject)
        if rule.on is On.CLUSTER:
            return Requirement(rule, ResourceType.CLUSTER, CLUSTER_NAME)
        return Requirement(rule)
    return Requirement(AUTHENTICATED)


def parse_basic(header: str | None) -> tuple[str, str] | None:
    """The (user, password) of an ``Authorization: Basic base64(user:password)`` header
    value (RFC 7617; the scheme is case-insensitive, the credentials UTF-8), or None
    when there is none or it is malformed: another scheme, bad base64, no colon, an
    empty user, or longer than :data:`MAX_AUTHORIZATION_CHARS`."""
    if not header or len(header) > MAX_AUTHORIZATION_CHARS:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "basic" or not token.strip():
        return None
    try:
        decoded = base64.b64decode(token.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, colon, password = decoded.partition(":")
    if not colon or not user:
        return None
    return user, password


def denied_message(req: Requirement) -> str:
    """Confluent's 40301 message for a refused request."""
    op = req.rule.operation.name if req.rule.operation is not None else "?"
    if req.rule.on is On.CLUSTER:
        return f"User is denied operation {op} on the global configuration"
    return f"User is denied operation {op} on subject {req.subject}"
