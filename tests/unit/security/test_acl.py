"""Kafka's ACL semantics, table-driven: the Authorizer's decisions (literal, prefixed
and wildcard resources, wildcard principal and host, deny wins, implied DESCRIBE and
DESCRIBE_CONFIGS, ALL, super users, allow.everyone.if.no.acl.found), the filters of
DescribeAcls/DeleteAcls (MATCH included), validate(), the JSON round trip and the
wire numbers."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from floe.security.acl import (
    AclBinding,
    AclFilter,
    AclOperation,
    AclPermission,
    Authorizer,
    PatternType,
    ResourceType,
    parse_super_users,
    validate,
    validate_filter,
)

Op, Perm, RT, PT = AclOperation, AclPermission, ResourceType, PatternType
ALLOW, DENY = Perm.ALLOW, Perm.DENY
TOPIC, GROUP, CLUSTER = RT.TOPIC, RT.GROUP, RT.CLUSTER
LITERAL, PREFIXED = PT.LITERAL, PT.PREFIXED
ALICE, BOB = "User:alice", "User:bob"
HOST, OTHER_HOST = "10.0.0.1", "10.0.0.2"


def acl(
    name: str,
    operation: AclOperation = Op.READ,
    permission: AclPermission = ALLOW,
    *,
    principal: str = ALICE,
    host: str = "*",
    pattern: PatternType = LITERAL,
    resource_type: ResourceType = TOPIC,
) -> AclBinding:
    return AclBinding(resource_type, name, pattern, principal, host, operation, permission)


class Source:
    """An AclSource over a list, its version bumped by :meth:`set`."""

    def __init__(self, bindings: Iterable[AclBinding] = ()) -> None:
        self._bindings = list(bindings)
        self.version = 0
        self.reads = 0

    def set(self, bindings: Iterable[AclBinding]) -> None:
        self._bindings = list(bindings)
        self.version += 1

    def bindings(self) -> list[AclBinding]:
        self.reads += 1
        return list(self._bindings)


def authorizer(
    bindings: Iterable[AclBinding], *, super_users: Iterable[str] = (), allow_if_no: bool = False
) -> Authorizer:
    return Authorizer(Source(bindings), super_users, allow_if_no)


# (case, ACLs, principal, host, operation, resource type, name, allowed)
Row = tuple[str, list[AclBinding], str, str, AclOperation, ResourceType, str, bool]
MATRIX: list[Row] = [
    ("literal allow", [acl("t")], ALICE, HOST, Op.READ, TOPIC, "t", True),
    ("literal is exact, not a prefix", [acl("t")], ALICE, HOST, Op.READ, TOPIC, "t2", False),
    ("other operation", [acl("t")], ALICE, HOST, Op.WRITE, TOPIC, "t", False),
    ("other resource type", [acl("t")], ALICE, HOST, Op.READ, GROUP, "t", False),
    ("wildcard resource", [acl("*")], ALICE, HOST, Op.READ, TOPIC, "anything", True),
    ("prefixed", [acl("pay.", pattern=PREFIXED)], ALICE, HOST, Op.READ, TOPIC, "pay.in", True),
    ("prefixed equal", [acl("pay.", pattern=PREFIXED)], ALICE, HOST, Op.READ, TOPIC, "pay.", True),
    ("prefix longer", [acl("pay.in", pattern=PREFIXED)], ALICE, HOST, Op.READ, TOPIC, "pay", False),
    ("prefix elsewhere", [acl("p", pattern=PREFIXED)], ALICE, HOST, Op.READ, TOPIC, "xp", False),
    ("literal * is not a prefix", [acl("*", pattern=PREFIXED)], ALICE, HOST, Op.READ, TOPIC, "t", False),  # noqa: E501
    ("wildcard principal", [acl("t", principal="User:*")], BOB, HOST, Op.READ, TOPIC, "t", True),
    ("other principal", [acl("t")], BOB, HOST, Op.READ, TOPIC, "t", False),
    ("principal type matters", [acl("t", principal="Group:alice")], ALICE, HOST, Op.READ, TOPIC, "t", False),  # noqa: E501
    ("host named", [acl("t", host=HOST)], ALICE, HOST, Op.READ, TOPIC, "t", True),
    ("other host", [acl("t", host=HOST)], ALICE, OTHER_HOST, Op.READ, TOPIC, "t", False),
    ("deny wins", [acl("t"), acl("t", permission=DENY)], ALICE, HOST, Op.READ, TOPIC, "t", False),
    ("deny wins across patterns",
     [acl("t"), acl("*", permission=DENY, principal="User:*")], ALICE, HOST, Op.READ, TOPIC, "t", False),  # noqa: E501
    ("prefixed deny wins over literal allow",
     [acl("pay.in"), acl("pay", Op.ALL, DENY, pattern=PREFIXED)], ALICE, HOST, Op.READ, TOPIC, "pay.in", False),  # noqa: E501
    ("deny from one host only",
     [acl("t"), acl("t", permission=DENY, host=OTHER_HOST)], ALICE, HOST, Op.READ, TOPIC, "t", True),  # noqa: E501
    ("deny of another operation", [acl("t", Op.ALL), acl("t", Op.WRITE, DENY)], ALICE, HOST, Op.READ, TOPIC, "t", True),  # noqa: E501
    ("deny ALL denies READ", [acl("t", Op.ALL), acl("t", Op.ALL, DENY)], ALICE, HOST, Op.READ, TOPIC, "t", False),  # noqa: E501
    ("allow ALL", [acl("t", Op.ALL)], ALICE, HOST, Op.ALTER_CONFIGS, TOPIC, "t", True),
    ("READ implies DESCRIBE", [acl("t", Op.READ)], ALICE, HOST, Op.DESCRIBE, TOPIC, "t", True),
    ("WRITE implies DESCRIBE", [acl("t", Op.WRITE)], ALICE, HOST, Op.DESCRIBE, TOPIC, "t", True),
    ("DELETE implies DESCRIBE", [acl("t", Op.DELETE)], ALICE, HOST, Op.DESCRIBE, TOPIC, "t", True),
    ("ALTER implies DESCRIBE", [acl("t", Op.ALTER)], ALICE, HOST, Op.DESCRIBE, TOPIC, "t", True),
    ("CREATE does not imply DESCRIBE", [acl("t", Op.CREATE)], ALICE, HOST, Op.DESCRIBE, TOPIC, "t", False),  # noqa: E501
    ("DESCRIBE does not imply READ", [acl("t", Op.DESCRIBE)], ALICE, HOST, Op.READ, TOPIC, "t", False),  # noqa: E501
    ("ALTER_CONFIGS implies DESCRIBE_CONFIGS",
     [acl("t", Op.ALTER_CONFIGS)], ALICE, HOST, Op.DESCRIBE_CONFIGS, TOPIC, "t", True),
    ("DESCRIBE_CONFIGS does not imply ALTER_CONFIGS",
     [acl("t", Op.DESCRIBE_CONFIGS)], ALICE, HOST, Op.ALTER_CONFIGS, TOPIC, "t", False),
    ("ALTER does not imply DESCRIBE_CONFIGS",
     [acl("t", Op.ALTER)], ALICE, HOST, Op.DESCRIBE_CONFIGS, TOPIC, "t", False),
    ("a DENY of READ does not deny DESCRIBE",
     [acl("t", Op.ALL), acl("t", Op.READ, DENY)], ALICE, HOST, Op.DESCRIBE, TOPIC, "t", True),
    ("a DENY of DESCRIBE denies DESCRIBE despite READ",
     [acl("t", Op.READ), acl("t", Op.DESCRIBE, DENY)], ALICE, HOST, Op.DESCRIBE, TOPIC, "t", False),
    ("only other principals' ACLs", [acl("t", principal=BOB)], ALICE, HOST, Op.READ, TOPIC, "t", False),  # noqa: E501
    ("an ACL on another resource leaves this one without ACLs",
     [acl("other")], ALICE, HOST, Op.READ, TOPIC, "t", False),
    ("cluster", [acl("kafka-cluster", Op.ALTER, resource_type=CLUSTER)],
     ALICE, HOST, Op.ALTER, CLUSTER, "kafka-cluster", True),
    ("group prefixed", [acl("app-", pattern=PREFIXED, resource_type=GROUP)],
     ALICE, HOST, Op.READ, GROUP, "app-1", True),
]  # fmt: skip


@pytest.mark.parametrize("row", [pytest.param(row, id=row[0]) for row in MATRIX])
def test_authorize_matrix(row: Row) -> None:
    _, bindings, principal, host, operation, rtype, name, expected = row
    assert all(validate(b) is None for b in bindings)
    a = authorizer(bindings, allow_if_no=False)
    assert a.authorize(principal, host, operation, rtype, name) is expected


@pytest.mark.parametrize("allow_if_no", [False, True])
def test_no_acl_on_the_resource_is_allow_if_no_acl_found(allow_if_no: bool) -> None:
    # None of these applies to topic "t": not another name, a longer or other prefix,
    # a PREFIXED "*" (only a LITERAL "*" is the wildcard), another resource type.
    others = [acl("other"), acl("t2"), acl("tt", pattern=PREFIXED), acl("x", pattern=PREFIXED),
              acl("*", pattern=PREFIXED), acl("*", resource_type=GROUP)]  # fmt: skip
    for bindings in ([], others):
        a = authorizer(bindings, allow_if_no=allow_if_no)
        assert a.authorize(ALICE, HOST, Op.READ, TOPIC, "t") is allow_if_no
        assert a.authorize(ALICE, HOST, Op.ALTER, CLUSTER, "kafka-cluster") is allow_if_no
    # Any ACL applying to the resource, for anyone, switches the flag off for it.
    applying = [
        acl("t", principal=BOB), acl("*", Op.WRITE), acl("t", host=OTHER_HOST),
        acl("t", Op.WRITE, pattern=PREFIXED), acl("t", Op.ALL, DENY, principal=BOB),
    ]  # fmt: skip
    for one in applying:
        a = authorizer([one], allow_if_no=True)
        assert not a.authorize(ALICE, HOST, Op.READ, TOPIC, "t"), one


def test_super_users_bypass_everything() -> None:
    deny_all = [acl("*", Op.ALL, DENY, principal="User:*"), acl("t", Op.ALL, DENY)]
    a = authorizer(deny_all, super_users=parse_super_users(" User:alice ; ;User:CN=ops,O=acme"))
    assert a.authorize(ALICE, HOST, Op.WRITE, TOPIC, "t")
    assert a.authorize("User:CN=ops,O=acme", HOST, Op.ALTER, CLUSTER, "kafka-cluster")
    assert not a.authorize(BOB, HOST, Op.WRITE, TOPIC, "t")
    assert not a.authorize("User:alice ", HOST, Op.WRITE, TOPIC, "t")  # exact principals


def test_parse_super_users() -> None:
    assert parse_super_users("") == frozenset()
    assert parse_super_users(" ; ;") == frozenset()
    assert parse_super_users("User:a;User:b ;  User:a") == {"User:a", "User:b"}


def test_the_index_follows_the_source_version() -> None:
    source = Source([acl("t")])
    a = Authorizer(source, (), allow_if_no_acl=False)
    for _ in range(3):
        assert a.authorize(ALICE, HOST, Op.READ, TOPIC, "t")
    assert source.reads == 1  # indexed once, not scanned per call
    source.set([acl("t", permission=DENY)])
    assert not a.authorize(ALICE, HOST, Op.READ, TOPIC, "t") and source.reads == 2
    source.set([])
    assert not a.authorize(ALICE, HOST, Op.READ, TOPIC, "t")


def test_many_prefixes_and_names() -> None:
    bindings = [acl(f"t{i}") for i in range(1000)]
    bindings += [acl("a" * n, pattern=PREFIXED, principal=f"User:p{n}") for n in range(1, 40)]
    a = authorizer(bindings)
    assert a.authorize(ALICE, HOST, Op.READ, TOPIC, "t999")
    assert not a.authorize(ALICE, HOST, Op.READ, TOPIC, "t1000")  # no ACL: denied
    assert a.authorize("User:p5", HOST, Op.READ, TOPIC, "aaaaaaaaa")
    assert not a.authorize("User:p10", HOST, Op.READ, TOPIC, "aaaaaaaaa")  # prefix too long


# --- filters ---------------------------------------------------------------------------

LIT_T, LIT_STAR = acl("pay.in"), acl("*")
PRE_PAY, PRE_OTHER = acl("pay.", pattern=PREFIXED), acl("x.", pattern=PREFIXED)
GROUP_T = acl("pay.in", resource_type=GROUP)
DENY_BOB = acl("pay.in", Op.WRITE, DENY, principal=BOB, host=HOST)
ALL = [LIT_T, LIT_STAR, PRE_PAY, PRE_OTHER, GROUP_T, DENY_BOB]

FILTERS: list[tuple[str, AclFilter, list[AclBinding]]] = [
    ("everything", AclFilter(), ALL),
    ("a type", AclFilter(GROUP), [GROUP_T]),
    ("ANY pattern with a name: that exact name", AclFilter(TOPIC, "pay.in"), [LIT_T, DENY_BOB]),
    ("LITERAL with a name", AclFilter(TOPIC, "pay.", LITERAL), []),
    ("PREFIXED with a name", AclFilter(TOPIC, "pay.", PREFIXED), [PRE_PAY]),
    ("PREFIXED without a name", AclFilter(TOPIC, None, PREFIXED), [PRE_PAY, PRE_OTHER]),
    ("LITERAL *: only the wildcard binding", AclFilter(TOPIC, "*", LITERAL), [LIT_STAR]),
    ("MATCH: literal, wildcard and prefixes",
     AclFilter(TOPIC, "pay.in", PT.MATCH), [LIT_T, LIT_STAR, PRE_PAY, DENY_BOB]),
    ("MATCH on another name", AclFilter(TOPIC, "x.y", PT.MATCH), [LIT_STAR, PRE_OTHER]),
    ("MATCH without a name", AclFilter(TOPIC, None, PT.MATCH), [b for b in ALL if b is not GROUP_T]),  # noqa: E501
    ("MATCH any type", AclFilter(RT.ANY, "pay.in", PT.MATCH), [LIT_T, LIT_STAR, PRE_PAY, GROUP_T, DENY_BOB]),  # noqa: E501
    ("principal", AclFilter(principal=BOB), [DENY_BOB]),
    ("host", AclFilter(host="*"), [b for b in ALL if b is not DENY_BOB]),
    ("operation", AclFilter(operation=Op.WRITE), [DENY_BOB]),
    ("permission", AclFilter(permission=ALLOW), [b for b in ALL if b is not DENY_BOB]),
    ("all together", AclFilter(TOPIC, "pay.in", PT.MATCH, ALICE, "*", Op.READ, ALLOW),
     [LIT_T, LIT_STAR, PRE_PAY]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("acl_filter", "expected"), [pytest.param(f, e, id=case) for case, f, e in FILTERS]
)
def test_filter_matches(acl_filter: AclFilter, expected: list[AclBinding]) -> None:
    assert validate_filter(acl_filter) is None
    assert [b for b in ALL if acl_filter.matches(b)] == expected


def test_unknown_filters_are_refused() -> None:
    assert validate_filter(AclFilter(RT.UNKNOWN)) == "Unknown patternFilter."
    assert validate_filter(AclFilter(pattern_type=PT.UNKNOWN)) == "Unknown patternFilter."
    assert validate_filter(AclFilter(operation=Op.UNKNOWN)) == "Unknown entryFilter."
    assert validate_filter(AclFilter(permission=Perm.UNKNOWN)) == "Unknown entryFilter."


# --- validate, JSON, numbers -----------------------------------------------------------

INVALID: list[tuple[AclBinding, str]] = [
    (acl("t", resource_type=CLUSTER), "The only valid name for the CLUSTER resource is kafka-cluster"),  # noqa: E501
    (acl(""), "Invalid empty resource name"),
    (acl("t", resource_type=RT.ANY), "Invalid resourceType ANY"),
    (acl("t", resource_type=RT.UNKNOWN), "Invalid resourceType UNKNOWN"),
    (acl("t", pattern=PT.MATCH), "Invalid patternType MATCH"),
    (acl("t", pattern=PT.ANY), "Invalid patternType ANY"),
    (acl("t", pattern=PT.UNKNOWN), "Invalid patternType UNKNOWN"),
    (acl("t", Op.ANY), "Invalid operation ANY"),
    (acl("t", Op.UNKNOWN), "Invalid operation UNKNOWN"),
    (acl("t", permission=Perm.ANY), "Invalid permissionType ANY"),
    (acl("t", permission=Perm.UNKNOWN), "Invalid permissionType UNKNOWN"),
    (acl("t", principal="alice"), "expected a string in format principalType:principalName but got 'alice'"),  # noqa: E501
    (acl("t", principal="User:"), "expected a string in format principalType:principalName but got 'User:'"),  # noqa: E501
    (acl("t", principal=":alice"), "expected a string in format principalType:principalName but got ':alice'"),  # noqa: E501
    (acl("t", host=""), "Invalid empty host (use * for any host)"),
]  # fmt: skip


@pytest.mark.parametrize(("binding", "reason"), INVALID)
def test_validate_refuses_what_kafka_refuses(binding: AclBinding, reason: str) -> None:
    assert validate(binding) == reason
    with pytest.raises(ValueError, match=r"\w"):
        AclBinding.from_json(binding.to_json())


@pytest.mark.parametrize(
    "binding",
    [
        acl("t"),
        acl("*", Op.ALL, DENY, principal="User:*", host="10.1.2.3"),
        acl("a", pattern=PREFIXED, principal="Group:ops:eu"),  # a colon in the name
        acl("kafka-cluster", Op.CLUSTER_ACTION, resource_type=CLUSTER),
        acl("tx", Op.DESCRIBE_TOKENS, resource_type=RT.TRANSACTIONAL_ID),
        acl("bob", Op.CREATE_TOKENS, resource_type=RT.USER),
        acl("tok", Op.DESCRIBE, resource_type=RT.DELEGATION_TOKEN),
    ],
)
def test_valid_bindings_round_trip_through_json(binding: AclBinding) -> None:
    assert validate(binding) is None
    assert AclBinding.from_json(binding.to_json()) == binding


def test_json_is_readable_and_checked() -> None:
    assert acl("t").to_json() == {
        "resource_type": "TOPIC", "resource_name": "t", "pattern_type": "LITERAL",
        "principal": ALICE, "host": "*", "operation": "READ", "permission": "ALLOW",
    }  # fmt: skip
    good = acl("t").to_json()
    bad: object
    for bad in (
        None, [], "x", {**good, "extra": "1"}, {k: v for k, v in good.items() if k != "host"},
        {**good, "operation": "FLY"}, {**good, "operation": 3}, {**good, "resource_name": None},
    ):  # fmt: skip
        with pytest.raises(ValueError):
            AclBinding.from_json(bad)


def test_wire_numbers_are_kafkas() -> None:
    # clients/src/main/java/org/apache/kafka/common/{acl,resource}/*.java
    assert [(m.name, int(m)) for m in ResourceType] == [
        ("UNKNOWN", 0), ("ANY", 1), ("TOPIC", 2), ("GROUP", 3), ("CLUSTER", 4),
        ("TRANSACTIONAL_ID", 5), ("DELEGATION_TOKEN", 6), ("USER", 7),
    ]  # fmt: skip
    assert [(m.name, int(m)) for m in PatternType] == [
        ("UNKNOWN", 0), ("ANY", 1), ("MATCH", 2), ("LITERAL", 3), ("PREFIXED", 4),
    ]  # fmt: skip
    assert [int(m) for m in AclOperation] == list(range(15))
    assert [m.name for m in AclOperation][2:] == [
        "ALL", "READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "CLUSTER_ACTION",
        "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE", "CREATE_TOKENS",
        "DESCRIBE_TOKENS",
    ]  # fmt: skip
    assert [(m.name, int(m)) for m in AclPermission] == [
        ("UNKNOWN", 0), ("ANY", 1), ("DENY", 2), ("ALLOW", 3),
    ]  # fmt: skip


def test_unknown_numbers_become_unknown() -> None:
    assert AclOperation.from_code(15) is Op.UNKNOWN  # TWO_PHASE_COMMIT, newer than us
    assert ResourceType.from_code(-1) is RT.UNKNOWN
    assert PatternType.from_code(4) is PREFIXED and AclPermission.from_code(9) is Perm.UNKNOWN
