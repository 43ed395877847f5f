"""Kafka ACLs as plain data, and the checks Kafka's StandardAuthorizer makes.

The enums carry Kafka's wire numbers (``org.apache.kafka.common.acl.AclOperation``,
``AclPermissionType``, ``org.apache.kafka.common.resource.ResourceType`` and
``PatternType``); ``from_code`` maps a number this broker does not know to UNKNOWN, as
Kafka's ``fromCode`` does, so a client's request never fails to convert.

An :class:`AclBinding` is one ACL: a resource pattern (type, name, LITERAL or
PREFIXED) and an entry (principal, host, operation, ALLOW or DENY). An
:class:`AclFilter` selects bindings for DescribeAcls and DeleteAcls with Kafka's
``AclBindingFilter`` semantics. :class:`Authorizer` answers "may this principal do
this operation on this resource" from the bindings of an :class:`AclSource` (the
journal-backed :class:`floe.security.acls.AclStore`).

Invariant: nothing here does I/O; a binding that :func:`validate` accepts is one Kafka
would store, and only such bindings are stored (:meth:`AclBinding.from_json` checks).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Protocol, Self

WILDCARD = "*"
"""A LITERAL resource name matching every resource of its type, and the any-host host."""
WILDCARD_PRINCIPAL = "User:*"
"""The principal of an ACL that applies to every principal."""
CLUSTER_NAME = "kafka-cluster"
"""The name of the one CLUSTER resource."""


class _Code(IntEnum):
    """A Kafka enum whose member 0 is UNKNOWN."""

    @classmethod
    def from_code(cls, code: int) -> Self:
        """The member numbered ``code``; UNKNOWN (0) for a number this enum lacks."""
        try:
            return cls(code)
        except ValueError:
            return cls(0)


class ResourceType(_Code):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(_Code):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(_Code):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (
        AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
        AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE),
    ResourceType.CLUSTER: (
        AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
        AclOperation.DESCRIBE,
    ),
    ResourceType.TRANSACTIONAL_ID: (AclOperation.DESCRIBE, AclOperation.WRITE),
    ResourceType.DELEGATION_TOKEN: (AclOperation.DESCRIBE,),
    ResourceType.USER: (AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS),
}  # fmt: skip
"""The operations each resource type has (Kafka's ``AclEntry.supportedOperations``): the
ones a response's authorized-operations field reports on."""


class AclPermission(_Code):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


_FIELDS = (
    "resource_type", "resource_name", "pattern_type", "principal", "host", "operation",
    "permission",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: ``permission`` for ``principal`` from ``host`` to do ``operation`` on
    the resources the pattern (``resource_type``, ``resource_name``, ``pattern_type``)
    names. Hashable: the store keeps a set of them."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermission

    def to_json(self) -> dict[str, str]:
        """The binding as JSON data, enums by name (readable in a dumped journal)."""
        return {
            "resource_type": self.resource_type.name,
            "resource_name": self.resource_name,
            "pattern_type": self.pattern_type.name,
            "principal": self.principal,
            "host": self.host,
            "operation": self.operation.name,
            "permission": self.permission.name,
        }

    @classmethod
    def from_json(cls, data: Any) -> AclBinding:
        """The binding :meth:`to_json` gave.

        Raises:
            ValueError: not an object of exactly these fields, an unknown enum name, a
                value that is not a string, or a binding :func:`validate` refuses.
        """
        if not isinstance(data, Mapping) or set(data) != set(_FIELDS):
            raise ValueError(f"an ACL binding needs exactly the fields {', '.join(_FIELDS)}")
        if not all(isinstance(data[f], str) for f in _FIELDS):
            raise ValueError("every field of an ACL binding is a string")
        try:
            binding = cls(
                ResourceType[data["resource_type"]],
                data["resource_name"],
                PatternType[data["pattern_type"]],
                data["principal"],
                data["host"],
                AclOperation[data["operation"]],
                AclPermission[data["permission"]],
            )
        except KeyError as exc:
            raise ValueError(f"unknown ACL enum name {exc}") from None
        problem = validate(binding)
        if problem is not None:
            raise ValueError(problem)
        return binding

    def describe(self) -> str:
        """``principal=... host=... operation=... permission=... resource=TYPE:PATTERN:name``,
        for log lines (Kafka's audit log writes resources the same way)."""
        return (
            f"principal={self.principal} host={self.host} operation={self.operation.name} "
            f"permission={self.permission.name} resource={self.resource_type.name}:"
            f"{self.pattern_type.name}:{self.resource_name}"
        )


def validate(binding: AclBinding) -> str | None:
    """Why Kafka would refuse to create ``binding`` (CreateAcls answers
    INVALID_REQUEST with it), or None when it may be stored. The checks and their
    wording are Kafka's (``AclApis.handleCreateAcls``,
    ``AclControlManager.validateNewAcl``, ``SecurityUtils.parseKafkaPrincipal``), in
    that order, plus a non-empty principal name and host, which Kafka does not check
    but no request can ever match otherwise."""
    b = binding
    if b.resource_type is ResourceType.CLUSTER and b.resource_name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if not b.resource_name:
        return "Invalid empty resource name"
    if b.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        return f"Invalid resourceType {b.resource_type.name}"
    if b.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid patternType {b.pattern_type.name}"
    if b.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        return f"Invalid operation {b.operation.name}"
    if b.permission not in (AclPermission.ALLOW, AclPermission.DENY):
        return f"Invalid permissionType {b.permission.name}"
    kind, colon, name = b.principal.partition(":")
    if not colon or not kind or not name:
        return f"expected a string in format principalType:principalName but got {b.principal!r}"
    if not b.host:
        return "Invalid empty host (use * for any host)"
    return None


@dataclass(frozen=True, slots=True)
class AclFilter:
    """Which bindings DescribeAcls lists or DeleteAcls deletes: Kafka's
    ``AclBindingFilter``. A None string or an ANY enum matches anything.

    ``pattern_type``: ANY matches every pattern type but, with a name, only bindings
    of exactly that name; LITERAL or PREFIXED only that type; MATCH with a name, every
    binding that applies to the resource of that name: the LITERAL binding of the
    name, the LITERAL ``*`` and the PREFIXED bindings whose prefix the name starts
    with (``ResourcePatternFilter.matches``).
    """

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermission = AclPermission.ANY

    def matches(self, b: AclBinding) -> bool:
        """Whether ``b`` is one of the bindings this filter selects."""
        return self._matches_pattern(b) and self._matches_entry(b)

    def _matches_pattern(self, b: AclBinding) -> bool:
        if self.resource_type is not ResourceType.ANY and self.resource_type != b.resource_type:
            return False
        loose = (PatternType.ANY, PatternType.MATCH)
        if self.pattern_type not in loose and self.pattern_type != b.pattern_type:
            return False
        name = self.resource_name
        if name is None:
            return True
        if self.pattern_type is not PatternType.MATCH:
            return name == b.resource_name
        if b.pattern_type is PatternType.LITERAL:
            return b.resource_name in (name, WILDCARD)
        return name.startswith(b.resource_name)  # PREFIXED: nothing else is stored

    def _matches_entry(self, b: AclBinding) -> bool:
        return (
            (self.principal is None or self.principal == b.principal)
            and (self.host is None or self.host == b.host)
            and (self.operation is AclOperation.ANY or self.operation == b.operation)
            and (self.permission is AclPermission.ANY or self.permission == b.permission)
        )


def validate_filter(f: AclFilter) -> str | None:
    """Why Kafka refuses ``f`` (INVALID_REQUEST), or None: an UNKNOWN resource or
    pattern type, operation or permission (a number the broker does not know), in the
    words of Kafka's ``AclControlManager.validateFilter``."""
    if f.resource_type is ResourceType.UNKNOWN or f.pattern_type is PatternType.UNKNOWN:
        return "Unknown patternFilter."
    if f.operation is AclOperation.UNKNOWN or f.permission is AclPermission.UNKNOWN:
        return "Unknown entryFilter."
    return None


def parse_super_users(value: str) -> frozenset[str]:
    """The principals of a ``super.users`` value: ``;``-separated, each trimmed, empty
    items ignored (``"User:admin; User:ops;"`` gives two)."""
    return frozenset(p for p in (item.strip() for item in value.split(";")) if p)


class AclSource(Protocol):
    """Where an :class:`Authorizer` reads the bindings: ``version`` changes whenever
    :meth:`bindings` would answer differently (the store bumps it on every change)."""

    @property
    def version(self) -> int: ...

    def bindings(self) -> Iterable[AclBinding]: ...


_IMPLIES_DESCRIBE = frozenset(
    {AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE,
     AclOperation.ALTER}
)  # fmt: skip
_IMPLIES_DESCRIBE_CONFIGS = frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS})


def _allow_covers(acl_operation: AclOperation, operation: AclOperation) -> bool:
    """Whether an ALLOW of ``acl_operation`` allows ``operation`` (Kafka's implied
    operations: READ, WRITE, DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS implies
    DESCRIBE_CONFIGS; ALL implies everything)."""
    if acl_operation is AclOperation.ALL or acl_operation == operation:
        return True
    if operation is AclOperation.DESCRIBE:
        return acl_operation in _IMPLIES_DESCRIBE
    if operation is AclOperation.DESCRIBE_CONFIGS:
        return acl_operation in _IMPLIES_DESCRIBE_CONFIGS
    return False


_Key = tuple[ResourceType, str]


class _Index:
    """The bindings by resource: LITERAL ones (``*`` included) by (type, name), PREFIXED
    ones by (type, prefix), and per type the distinct prefix lengths, ascending, so a
    lookup tries only prefixes that exist."""

    __slots__ = ("literal", "prefix_lengths", "prefixed", "version")

    def __init__(self, version: int, bindings: Iterable[AclBinding]) -> None:
        self.version = version
        self.literal: dict[_Key, list[AclBinding]] = {}
        self.prefixed: dict[_Key, list[AclBinding]] = {}
        lengths: dict[ResourceType, set[int]] = {}
        for b in bindings:
            key = (b.resource_type, b.resource_name)
            if b.pattern_type is PatternType.PREFIXED:
                self.prefixed.setdefault(key, []).append(b)
                lengths.setdefault(b.resource_type, set()).add(len(b.resource_name))
            else:
                self.literal.setdefault(key, []).append(b)
        self.prefix_lengths = {t: tuple(sorted(ls)) for t, ls in lengths.items()}

    def applicable(self, resource_type: ResourceType, name: str) -> list[list[AclBinding]]:
        """The bindings of every pattern that applies to the resource, per pattern."""
        found: list[list[AclBinding]] = []
        exact = self.literal.get((resource_type, name))
        if exact:
            found.append(exact)
        if name != WILDCARD:
            wildcard = self.literal.get((resource_type, WILDCARD))
            if wildcard:
                found.append(wildcard)
        for n in self.prefix_lengths.get(resource_type, ()):
            if n > len(name):
                break
            prefixed = self.prefixed.get((resource_type, name[:n]))
            if prefixed:
                found.append(prefixed)
        return found


class Authorizer:
    """Kafka's StandardAuthorizer decision, from the bindings of an :class:`AclSource`.

    :meth:`authorize` allows a super user everything. Otherwise the ACLs that apply are
    the resource's LITERAL ACLs of that exact name, the LITERAL ``*`` ACLs and the
    PREFIXED ACLs whose prefix the name starts with; of those, an ACL matches the
    request when its principal is the request's or ``User:*``, its host the client's
    or ``*``, and its operation the requested one or ALL (for an ALLOW, also one that
    implies it: see :func:`_allow_covers`). A matching DENY wins over any ALLOW; no
    matching ALLOW denies; and a resource no ACL applies to at all, for any principal,
    gets ``allow_if_no_acl`` (``allow.everyone.if.no.acl.found``).

    Cost: the bindings are indexed (:class:`_Index`) when first needed after the
    source's ``version`` changed, O(B) for B bindings; a check is then O(P + A) dict
    lookups and comparisons, P the number of distinct PREFIXED prefix lengths of the
    resource type and A the number of ACLs on the applicable patterns, independent of
    the bindings on other resources.

    Ownership: used from the broker's event loop only, like its source; it holds only
    the index, rebuilt lazily, and needs no cleanup.
    """

    def __init__(
        self, source: AclSource, super_users: Iterable[str], allow_if_no_acl: bool
    ) -> None:
        self._source = source
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self._index: _Index | None = None

    def authorize(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        """Whether ``principal`` (``User:alice``) connected from ``host`` (the client's
        IP address) may do ``operation`` on the resource ``resource_type`` ``name``."""
        if principal in self.super_users:
            return True
        index = self._index
        version = self._source.version
        if index is None or index.version != version:
            index = self._index = _Index(version, self._source.bindings())
        patterns = index.applicable(resource_type, name)
        if not patterns:
            return self.allow_if_no_acl
        allowed = False
        for acls in patterns:
            for acl in acls:
                if acl.principal not in (principal, WILDCARD_PRINCIPAL):
                    continue
                if acl.host not in (WILDCARD, host):
                    continue
                if acl.permission is AclPermission.DENY:
                    if acl.operation is AclOperation.ALL or acl.operation == operation:
                        return False
                elif not allowed:
                    allowed = _allow_covers(acl.operation, operation)
        return allowed
