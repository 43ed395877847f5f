"""ACLs with Kafka's semantics, judged by confluent-kafka: a principal without the ACL
an API needs gets Kafka's error for it and changes nothing; with the ACLs it works.

One broker with ``authorizer.enable``, a SASL_PLAINTEXT listener, the bootstrap admin
(a super user) and ``alice``, who starts with no ACL at all. The matrix tries every
operation a client can ask for as alice, checks the error code and, with the admin,
that nothing changed; it prints how many unauthorized operations were allowed (0).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from helpers.broker import Broker
from helpers.security import ADMIN, ADMIN_PASSWORD, sasl_client, secured_broker, set_password

ALICE, ALICE_PASSWORD = "alice", "alice-secret"
SECRET = "secret"
"""A topic only the admin uses."""
GROUP = "secret-group"
"""A group with committed offsets on SECRET, the admin's."""
E = ck.KafkaError
TIMEOUT = 15


@dataclass
class Acl:
    broker: Broker
    sasl: str

    def client(self, user: str, password: str) -> dict[str, Any]:
        return sasl_client(self.sasl, user, password)

    def admin(self) -> AdminClient:
        return AdminClient(self.client(ADMIN, ADMIN_PASSWORD))

    def alice(self) -> AdminClient:
        return AdminClient(self.client(ALICE, ALICE_PASSWORD))


@pytest.fixture(scope="module")
def acl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Acl]:
    root: Path = tmp_path_factory.mktemp("acl")
    b, sasl = secured_broker(root / "data", **{"auto.create.topics.enable": "false"})
    try:
        b.start()
        a = Acl(b, sasl)
        admin = a.admin()
        _done(admin.create_topics([NewTopic(SECRET, 1)]))
        set_password(admin, ALICE, ALICE_PASSWORD)
        producer = ck.Producer(a.client(ADMIN, ADMIN_PASSWORD))
        for i in range(5):
            producer.produce(SECRET, value=f"v{i}".encode())
        assert producer.flush(TIMEOUT) == 0
        offsets = [ck.TopicPartition(SECRET, 0, 3)]
        _done(admin.alter_consumer_group_offsets([ck.ConsumerGroupTopicPartitions(GROUP, offsets)]))
        yield a
        b.stop()
    finally:
        b.close()


def _done(futures: Any) -> Any:
    """Wait for every future of an AdminClient call (a dict of them, or one)."""
    if isinstance(futures, dict):
        return {k: f.result(TIMEOUT) for k, f in futures.items()}
    return futures.result(TIMEOUT)


def _code(call: Callable[[], Any]) -> int | None:
    """The Kafka error code ``call`` raised (None: it succeeded)."""
    try:
        call()
    except ck.KafkaException as exc:
        return int(exc.args[0].code())
    return None


def _watermarks(a: Acl) -> tuple[int, int]:
    c = ck.Consumer({**a.client(ADMIN, ADMIN_PASSWORD), "group.id": "admin-reader"})
    try:
        return tuple(c.get_watermark_offsets(ck.TopicPartition(SECRET, 0), TIMEOUT))  # type: ignore[return-value]
    finally:
        c.close()


def _client_error(config: dict[str, Any], act: Callable[[Any], None], kind: Any) -> int | None:
    """The first error a producer or consumer reports while ``act`` runs (None: none)."""
    errors: list[ck.KafkaError] = []
    client = kind({**config, "error_cb": errors.append})
    failure = None
    try:
        act(client)
    except ck.KafkaException as exc:
        failure = int(exc.args[0].code())
    if failure is None and errors:
        failure = int(errors[0].code())
    return failure


def _nonzero(code: Any) -> int | None:
    return int(code) or None


def _sasl_call(address: str, user: str, password: str, request: Any, response_type: Any) -> Any:
    """One request on a connection authenticated with SASL/PLAIN (SaslHandshake v1,
    SaslAuthenticate v2), as raw kio entities."""
    import io
    import socket
    import struct

    from kio.schema.request_header.v1.header import RequestHeader as HeaderV1
    from kio.schema.request_header.v2.header import RequestHeader as HeaderV2
    from kio.schema.response_header.v0.header import ResponseHeader as ResponseV0
    from kio.schema.response_header.v1.header import ResponseHeader as ResponseV1
    from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
    from kio.schema.sasl_authenticate.v2.response import SaslAuthenticateResponse
    from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
    from kio.schema.sasl_handshake.v1.response import SaslHandshakeResponse
    from kio.serial import entity_reader, entity_writer
    from kio.static.primitive import i32

    def round_trip(s: socket.socket, req: Any, resp: Any) -> Any:
        flexible = req.__flexible__
        header_cls = HeaderV2 if flexible else HeaderV1
        buf = io.BytesIO()
        entity_writer(header_cls)(
            buf,
            header_cls(
                request_api_key=req.__api_key__, request_api_version=req.__version__,
                correlation_id=i32(1), client_id="acl-test",
            ),
        )  # fmt: skip
        entity_writer(type(req))(buf, req)
        payload = buf.getvalue()
        s.sendall(struct.pack(">i", len(payload)) + payload)
        size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
        data = memoryview(s.recv(size, socket.MSG_WAITALL)).toreadonly()
        _, pos = entity_reader(ResponseV1 if resp.__flexible__ else ResponseV0)(data, 0)
        return entity_reader(resp)(data, pos)[0]

    host, port = address.split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        shake = round_trip(s, SaslHandshakeRequest(mechanism="PLAIN"), SaslHandshakeResponse)
        assert shake.error_code == 0
        token = b"\0" + user.encode() + b"\0" + password.encode()
        auth = round_trip(s, SaslAuthenticateRequest(auth_bytes=token), SaslAuthenticateResponse)
        assert auth.error_code == 0, auth.error_message
        return round_trip(s, request, response_type)


def _raw_fetch(acl: Acl, user: str, password: str, topic: str) -> Any:
    """Partition 0 of ``topic`` fetched from offset 0 by ``user`` (a raw Fetch v4)."""
    from datetime import timedelta

    from kio.schema.fetch.v4 import request as fe
    from kio.schema.fetch.v4.response import FetchResponse
    from kio.static.primitive import i32, i64

    partition = fe.FetchPartition(
        partition=i32(0), fetch_offset=i64(0), partition_max_bytes=i32(1 << 20)
    )
    request = fe.FetchRequest(
        max_wait=timedelta(0),
        min_bytes=i32(1),
        topics=(fe.FetchTopic(topic=topic, partitions=(partition,)),),
    )
    return _sasl_call(acl.sasl, user, password, request, FetchResponse).responses[0].partitions[0]


def test_without_acls_alice_can_do_nothing_and_changes_nothing(acl: Acl) -> None:
    alice, admin = acl.alice(), acl.admin()
    before = _watermarks(acl)
    tried: dict[str, tuple[int | None, int]] = {}

    def expect(name: str, got: int | None, want: int) -> None:
        tried[name] = (got, want)

    # Metadata: the topic is invisible in a listing, refused by name
    listing = alice.list_topics(timeout=TIMEOUT)
    expect(
        "Metadata (all)",
        None if SECRET in listing.topics else E.TOPIC_AUTHORIZATION_FAILED,
        E.TOPIC_AUTHORIZATION_FAILED,
    )
    named = alice.list_topics(SECRET, timeout=TIMEOUT).topics[SECRET].error
    expect("Metadata (named)", named.code() if named else None, E.TOPIC_AUTHORIZATION_FAILED)
    # topics
    expect(
        "CreateTopics",
        _code(lambda: _done(alice.create_topics([NewTopic("alice-new", 1)]))),
        E.TOPIC_AUTHORIZATION_FAILED,
    )
    expect(
        "DeleteTopics",
        _code(lambda: _done(alice.delete_topics([SECRET]))),
        E.TOPIC_AUTHORIZATION_FAILED,
    )
    expect(
        "CreatePartitions",
        _code(lambda: _done(alice.create_partitions([NewPartitions(SECRET, 3)]))),
        E.TOPIC_AUTHORIZATION_FAILED,
    )
    topic_res = ConfigResource(ConfigResource.Type.TOPIC, SECRET)
    expect(
        "DescribeConfigs (topic)",
        _code(lambda: _done(alice.describe_configs([topic_res]))),
        E.TOPIC_AUTHORIZATION_FAILED,
    )
    altered = ConfigResource(
        ConfigResource.Type.TOPIC,
        SECRET,
        incremental_configs=[
            ck.admin.ConfigEntry(
                "retention.ms", "1", incremental_operation=ck.admin.AlterConfigOpType.SET
            )
        ],
    )
    expect(
        "IncrementalAlterConfigs (topic)",
        _code(lambda: _done(alice.incremental_alter_configs([altered]))),
        E.TOPIC_AUTHORIZATION_FAILED,
    )
    broker_res = ConfigResource(ConfigResource.Type.BROKER, "1")
    expect(
        "DescribeConfigs (broker)",
        _code(lambda: _done(alice.describe_configs([broker_res]))),
        E.CLUSTER_AUTHORIZATION_FAILED,
    )
    # librdkafka refuses these two itself (_NOENT) once Metadata hid the topic: raw
    # requests, so the broker's answer is what is judged
    from kio.schema.delete_records.v2 import request as dr
    from kio.schema.delete_records.v2.response import DeleteRecordsResponse
    from kio.schema.list_offsets.v7 import request as lo
    from kio.schema.list_offsets.v7.response import ListOffsetsResponse
    from kio.static.primitive import i8, i32, i64

    deleted = _sasl_call(
        acl.sasl, ALICE, ALICE_PASSWORD,
        dr.DeleteRecordsRequest(
            topics=(dr.DeleteRecordsTopic(name=SECRET, partitions=(
                dr.DeleteRecordsPartition(partition_index=i32(0), offset=i64(2)),)),),
            timeout=__import__("datetime").timedelta(seconds=5),
        ),
        DeleteRecordsResponse,
    )  # fmt: skip
    expect("DeleteRecords", _nonzero(deleted.topics[0].partitions[0].error_code),
           E.TOPIC_AUTHORIZATION_FAILED)  # fmt: skip
    offsets = _sasl_call(
        acl.sasl, ALICE, ALICE_PASSWORD,
        lo.ListOffsetsRequest(
            replica_id=i32(-1), isolation_level=i8(0),
            topics=(lo.ListOffsetsTopic(name=SECRET, partitions=(
                lo.ListOffsetsPartition(partition_index=i32(0), timestamp=i64(-1)),)),),
        ),
        ListOffsetsResponse,
    )  # fmt: skip
    expect("ListOffsets", _nonzero(offsets.topics[0].partitions[0].error_code),
           E.TOPIC_AUTHORIZATION_FAILED)  # fmt: skip
    # produce and consume
    config = acl.client(ALICE, ALICE_PASSWORD)

    def produce(p: Any) -> None:
        outcome: list[ck.KafkaError | None] = []
        p.produce(SECRET, b"x", on_delivery=lambda e, m: outcome.append(e))
        p.flush(TIMEOUT)
        if outcome and outcome[0] is not None:
            raise ck.KafkaException(outcome[0])

    expect(
        "Produce",
        _client_error({**config, "enable.idempotence": False}, produce, ck.Producer),
        E.TOPIC_AUTHORIZATION_FAILED,
    )

    def idle(p: Any) -> None:  # an idempotent producer asks for its id at start
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not p.poll(0.2):
            pass

    expect(
        "InitProducerId (idempotent)",
        _client_error({**config, "enable.idempotence": True}, idle, ck.Producer),
        E.CLUSTER_AUTHORIZATION_FAILED,
    )
    expect(
        "InitProducerId (transactional)",
        _client_error(
            {**config, "transactional.id": "alice-tx"},
            lambda p: p.init_transactions(TIMEOUT),
            ck.Producer,
        ),
        E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    )

    # a consumer that knows from Metadata it may not read never sends a Fetch: raw
    part = _raw_fetch(acl, ALICE, ALICE_PASSWORD, SECRET)
    assert part.records in (None, b"")
    expect("Fetch", _nonzero(part.error_code), E.TOPIC_AUTHORIZATION_FAILED)

    def join(c: Any) -> None:
        c.subscribe([SECRET])
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error():
                raise ck.KafkaException(m.error())

    expect(
        "JoinGroup",
        _client_error({**config, "group.id": GROUP}, join, ck.Consumer),
        E.GROUP_AUTHORIZATION_FAILED,
    )
    # groups
    group_tps = [ck.ConsumerGroupTopicPartitions(GROUP, [ck.TopicPartition(SECRET, 0)])]
    expect(
        "OffsetFetch",
        _code(lambda: _done(alice.list_consumer_group_offsets(group_tps))),
        E.GROUP_AUTHORIZATION_FAILED,
    )
    moved = [ck.ConsumerGroupTopicPartitions(GROUP, [ck.TopicPartition(SECRET, 0, 0)])]
    expect(
        "OffsetCommit",
        _code(lambda: _done(alice.alter_consumer_group_offsets(moved))),
        E.GROUP_AUTHORIZATION_FAILED,
    )
    expect(
        "DescribeGroups",
        _code(lambda: _done(alice.describe_consumer_groups([GROUP]))),
        E.GROUP_AUTHORIZATION_FAILED,
    )
    expect(
        "DeleteGroups",
        _code(lambda: _done(alice.delete_consumer_groups([GROUP]))),
        E.GROUP_AUTHORIZATION_FAILED,
    )
    groups = _done(alice.list_consumer_groups())
    expect(
        "ListGroups",
        None if any(g.group_id == GROUP for g in groups.valid) else E.GROUP_AUTHORIZATION_FAILED,
        E.GROUP_AUTHORIZATION_FAILED,
    )
    # the cluster: ACLs, users
    binding = AclBinding(
        ResourceType.TOPIC,
        SECRET,
        ResourcePatternType.LITERAL,
        f"User:{ALICE}",
        "*",
        AclOperation.ALL,
        AclPermissionType.ALLOW,
    )
    expect(
        "CreateAcls",
        _code(lambda: _done(alice.create_acls([binding]))),
        E.CLUSTER_AUTHORIZATION_FAILED,
    )
    any_acl = AclBindingFilter(
        ResourceType.ANY,
        None,
        ResourcePatternType.ANY,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    # librdkafka 2.16's describe_acls answers [] on a top-level error: a raw request
    from kio.schema.describe_acls.v1.request import DescribeAclsRequest
    from kio.schema.describe_acls.v1.response import DescribeAclsResponse

    listed = _sasl_call(
        acl.sasl, ALICE, ALICE_PASSWORD,
        DescribeAclsRequest(
            resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
            principal_filter=None, host_filter=None, operation=1, permission_type=1,
        ),
        DescribeAclsResponse,
    )  # fmt: skip
    expect("DescribeAcls", _nonzero(listed.error_code), E.CLUSTER_AUTHORIZATION_FAILED)
    expect(
        "DeleteAcls",
        _code(lambda: _done(alice.delete_acls([any_acl]))),
        E.CLUSTER_AUTHORIZATION_FAILED,
    )
    grab = UserScramCredentialUpsertion(
        ADMIN, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"taken"
    )
    expect(
        "AlterUserScramCredentials",
        _code(lambda: _done(alice.alter_user_scram_credentials([grab]))),
        E.CLUSTER_AUTHORIZATION_FAILED,
    )
    # librdkafka 2.16's describe_user_scram_credentials crashes the process on a
    # top-level error (a bad free): a raw request
    from kio.schema.describe_user_scram_credentials.v0.request import (
        DescribeUserScramCredentialsRequest,
    )
    from kio.schema.describe_user_scram_credentials.v0.response import (
        DescribeUserScramCredentialsResponse,
    )

    users = _sasl_call(
        acl.sasl, ALICE, ALICE_PASSWORD,
        DescribeUserScramCredentialsRequest(users=None), DescribeUserScramCredentialsResponse,
    )  # fmt: skip
    expect("DescribeUserScramCredentials", _nonzero(users.error_code),
           E.CLUSTER_AUTHORIZATION_FAILED)  # fmt: skip
    assert users.results == ()

    # DescribeCluster is no unauthorized operation: Kafka answers any principal (the
    # Java Admin's view of it: test_security_java.py)
    cluster = _done(alice.describe_cluster(include_authorized_operations=True))
    assert [n.id for n in cluster.nodes] == [cluster.controller.id]
    assert not cluster.authorized_operations, cluster.authorized_operations

    allowed = [name for name, (got, _) in tried.items() if got is None]
    wrong = {name: (got, want) for name, (got, want) in tried.items() if got != want}
    print(f"unauthorized operations tried: {len(tried)}, allowed: {len(allowed)}")
    assert not allowed, allowed
    assert not wrong, wrong

    # nothing changed, as the admin sees it
    assert _watermarks(acl) == before
    described = _done(admin.describe_configs([topic_res]))[topic_res]
    assert described["retention.ms"].value != "1"
    meta = admin.list_topics(timeout=TIMEOUT).topics
    assert "alice-new" not in meta and len(meta[SECRET].partitions) == 1
    committed = _done(admin.list_consumer_group_offsets(group_tps))[GROUP]
    assert committed.topic_partitions[0].offset == 3
    assert _done(admin.describe_acls(any_acl)) == []
    # the admin still logs in with its own password
    assert SECRET in acl.admin().list_topics(timeout=TIMEOUT).topics


def test_acls_grant_exactly_what_they_name(acl: Acl) -> None:
    """Prefixed ALLOWs give alice her own topics and group; a DENY wins over them; the
    secret topic stays closed; the ACLs are listed, then deleted, and the access goes."""
    admin, alice = acl.admin(), acl.alice()
    me = f"User:{ALICE}"
    grants = [
        AclBinding(
            ResourceType.TOPIC,
            "alice-",
            ResourcePatternType.PREFIXED,
            me,
            "*",
            op,
            AclPermissionType.ALLOW,
        )
        for op in (AclOperation.CREATE, AclOperation.WRITE, AclOperation.READ)
    ] + [
        AclBinding(
            ResourceType.GROUP,
            "alice-",
            ResourcePatternType.PREFIXED,
            me,
            "*",
            AclOperation.READ,
            AclPermissionType.ALLOW,
        ),
        AclBinding(
            ResourceType.TOPIC,
            "alice-closed",
            ResourcePatternType.LITERAL,
            me,
            "*",
            AclOperation.WRITE,
            AclPermissionType.DENY,
        ),
    ]
    mine = AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, me, None, AclOperation.ANY,
        AclPermissionType.ANY,
    )  # fmt: skip
    _done(admin.create_acls(grants))
    assert len(_done(admin.describe_acls(mine))) == len(grants)

    _done(alice.create_topics([NewTopic("alice-data", 1), NewTopic("alice-closed", 1)]))
    config = acl.client(ALICE, ALICE_PASSWORD)
    producer = ck.Producer({**config, "enable.idempotence": False})
    outcome: list[ck.KafkaError | None] = []
    for topic in ("alice-data", "alice-closed"):
        producer.produce(topic, b"hello", on_delivery=lambda e, m: outcome.append(e))
    producer.flush(TIMEOUT)
    codes = sorted(e.code() if e is not None else 0 for e in outcome)
    assert codes == sorted([0, E.TOPIC_AUTHORIZATION_FAILED])

    consumer = ck.Consumer({**config, "group.id": "alice-g", "auto.offset.reset": "earliest"})
    consumer.subscribe(["alice-data"])
    got = None
    deadline = time.monotonic() + 30
    while got is None and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and not m.error():
            got = m.value()
    consumer.commit(asynchronous=False)
    consumer.close()
    assert got == b"hello"
    named = alice.list_topics(SECRET, timeout=TIMEOUT).topics[SECRET].error
    assert named is not None and named.code() == E.TOPIC_AUTHORIZATION_FAILED

    _done(admin.delete_acls([mine]))
    named = alice.list_topics("alice-data", timeout=TIMEOUT).topics["alice-data"].error
    assert named is not None and named.code() == E.TOPIC_AUTHORIZATION_FAILED


def test_nobody_reads_the_security_journal(acl: Acl) -> None:
    """The users' SCRAM keys and the ACLs are on __floe_security: not even a super user
    sees or reads it over Kafka (a raw Fetch, as clients stop at Metadata's refusal)."""
    listed = acl.admin().list_topics(timeout=TIMEOUT).topics
    assert "__floe_security" not in listed and SECRET in listed
    part = _raw_fetch(acl, ADMIN, ADMIN_PASSWORD, "__floe_security")
    assert part.error_code == E.TOPIC_AUTHORIZATION_FAILED and part.records in (None, b"")


def test_floe_acl_adds_lists_and_removes(acl: Acl, tmp_path: Path) -> None:
    """``floe acl`` as the admin (CreateAcls, DescribeAcls, DeleteAcls); as alice it is
    refused with Kafka's error, in one line."""
    import json
    import subprocess
    import sys

    def floe(*args: str, user: str = ADMIN, password: str = ADMIN_PASSWORD) -> Any:
        props = tmp_path / f"{user}.properties"
        props.write_text(
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
            f"sasl.username={user}\nsasl.password={password}\n"
        )
        exe = str(Path(sys.executable).with_name("floe"))
        return subprocess.run(
            [exe, "acl", *args, "--brokers", acl.sasl, "--client-config", str(props)],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip

    rule = ["--allow-principal", "User:bob", "--operation", "Read", "--topic", "cli-"]
    added = floe("add", *rule, "--resource-pattern-type", "prefixed")
    assert added.returncode == 0, added.stderr
    listed = floe("list", "--output", "json")
    assert listed.returncode == 0, listed.stderr
    assert "User:bob" in listed.stdout and "cli-" in listed.stdout
    json.loads(listed.stdout)
    refused = floe("add", *rule, user=ALICE, password=ALICE_PASSWORD)
    assert refused.returncode == 1
    assert refused.stderr.startswith("floe: error: CLUSTER_AUTHORIZATION_FAILED")
    assert refused.stderr.count("\n") == 1
    removed = floe("remove", "--topic", "cli-", "--resource-pattern-type", "prefixed")
    assert removed.returncode == 0, removed.stderr
    assert "User:bob" not in floe("list", "--output", "json").stdout


# ------------------------------------------------------------------ Kafka's checks where
# they are not the first guess (the audit of every API against Kafka 3.9's KafkaApis,
# ControllerApis and AuthHelper: docs/security.md "Where Floe's checks are Kafka's")


NO_ID = uuid.UUID(int=0)


def _acl(resource: ResourceType, name: str, op: AclOperation, pattern: Any = None) -> AclBinding:
    """An ALLOW for alice from any host (LITERAL unless ``pattern``)."""
    return AclBinding(
        resource, name, pattern or ResourcePatternType.LITERAL, f"User:{ALICE}", "*", op,
        AclPermissionType.ALLOW,
    )  # fmt: skip


class _Granted:
    """Alice's ACLs for the span of a ``with``: created on entry, deleted on exit."""

    def __init__(self, a: Acl, *bindings: AclBinding) -> None:
        self.admin, self.bindings = a.admin(), list(bindings)

    def __enter__(self) -> None:
        _done(self.admin.create_acls(self.bindings))

    def __exit__(self, *exc: object) -> None:
        filters = [
            AclBindingFilter(
                b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation,
                b.permission_type,
            )
            for b in self.bindings
        ]  # fmt: skip
        _done(self.admin.delete_acls(filters))


def _topic_id(a: Acl, topic: str) -> Any:
    from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
    from kio.schema.metadata.v12.response import MetadataResponse

    request = MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=NO_ID, name=topic),),
        allow_auto_topic_creation=False, include_topic_authorized_operations=False,
    )  # fmt: skip
    (found,) = _sasl_call(a.sasl, ADMIN, ADMIN_PASSWORD, request, MetadataResponse).topics
    return found.topic_id


def test_a_missing_topic_is_unknown_to_a_principal_who_may_describe_it(acl: Acl) -> None:
    """Kafka checks CREATE only when the broker would create the topic: with
    ``auto.create.topics.enable=false`` a Metadata request that allows auto-creation
    gets UNKNOWN_TOPIC_OR_PARTITION (consumers wait for the topic), not
    TOPIC_AUTHORIZATION_FAILED (a Java consumer's poll() threw)."""
    from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
    from kio.schema.metadata.v12.response import MetadataResponse

    request = MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=NO_ID, name="maybe-x"),),
        allow_auto_topic_creation=True, include_topic_authorized_operations=False,
    )  # fmt: skip
    with _Granted(acl, _acl(ResourceType.TOPIC, "maybe-", AclOperation.DESCRIBE,
                            ResourcePatternType.PREFIXED)):  # fmt: skip
        (found,) = _sasl_call(acl.sasl, ALICE, ALICE_PASSWORD, request, MetadataResponse).topics
    assert found.error_code == E.UNKNOWN_TOPIC_OR_PART


def test_delete_topics_checks_as_kafka_does(acl: Acl) -> None:
    """A name the principal may not describe is TOPIC_AUTHORIZATION_FAILED whether the
    topic exists or not (nothing is learnt of it), by name or by id; DELETE on the
    cluster deletes any topic."""
    from kio.schema.delete_topics.v6.request import DeleteTopicsRequest, DeleteTopicState
    from kio.schema.delete_topics.v6.response import DeleteTopicsResponse

    def delete(name: str | None = None, topic_id: Any = None) -> int:
        request = DeleteTopicsRequest(
            topics=(DeleteTopicState(name=name, topic_id=topic_id or NO_ID),),
            timeout=timedelta(seconds=10),
        )  # fmt: skip
        answer = _sasl_call(acl.sasl, ALICE, ALICE_PASSWORD, request, DeleteTopicsResponse)
        return int(answer.responses[0].error_code)

    assert delete("no-such-topic") == E.TOPIC_AUTHORIZATION_FAILED
    assert delete(SECRET) == E.TOPIC_AUTHORIZATION_FAILED
    assert delete(topic_id=_topic_id(acl, SECRET)) == E.TOPIC_AUTHORIZATION_FAILED
    admin = acl.admin()
    _done(admin.create_topics([NewTopic("doomed", 1)]))
    with _Granted(acl, _acl(ResourceType.BROKER, "kafka-cluster", AclOperation.DELETE)):
        assert delete("doomed") == 0
    assert "doomed" not in admin.list_topics(timeout=TIMEOUT).topics


def test_alter_on_the_cluster_writes_transaction_markers(acl: Acl) -> None:
    """WriteTxnMarkers is allowed with ALTER on the cluster as well as CLUSTER_ACTION:
    ``Admin.abortTransaction`` (``kafka-transactions.sh abort``) needs no more."""
    from kio.schema.write_txn_markers.v1.response import WriteTxnMarkersResponse

    from floe.protocol.client import marker_results, write_txn_markers_request

    admin = acl.admin()
    _done(admin.create_topics([NewTopic("markers", 1)]))
    request = write_txn_markers_request(987654, 0, False, [("markers", 0)])

    def write() -> int:
        answer = _sasl_call(acl.sasl, ALICE, ALICE_PASSWORD, request, WriteTxnMarkersResponse)
        return int(marker_results(answer)[("markers", 0)])

    assert write() == E.CLUSTER_AUTHORIZATION_FAILED
    with _Granted(acl, _acl(ResourceType.BROKER, "kafka-cluster", AclOperation.ALTER)):
        assert write() == 0


def test_describe_transactions_leaves_out_topics_the_principal_may_not_describe(
    acl: Acl,
) -> None:
    from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
    from kio.schema.describe_transactions.v0.response import DescribeTransactionsResponse

    admin = acl.admin()
    _done(admin.create_topics([NewTopic("tx-visible", 1)]))
    producer = ck.Producer({**acl.client(ADMIN, ADMIN_PASSWORD), "transactional.id": "tx-open"})
    producer.init_transactions(TIMEOUT)
    producer.begin_transaction()
    for topic in (SECRET, "tx-visible"):
        producer.produce(topic, b"open")
    assert producer.flush(TIMEOUT) == 0
    try:
        grants = (
            _acl(ResourceType.TRANSACTIONAL_ID, "tx-open", AclOperation.DESCRIBE),
            _acl(ResourceType.TOPIC, "tx-visible", AclOperation.DESCRIBE),
        )
        with _Granted(acl, *grants):
            answer = _sasl_call(
                acl.sasl, ALICE, ALICE_PASSWORD,
                DescribeTransactionsRequest(transactional_ids=("tx-open",)),
                DescribeTransactionsResponse,
            )  # fmt: skip
    finally:
        producer.abort_transaction(TIMEOUT)
    (state,) = answer.transaction_states
    assert state.error_code == 0 and state.transaction_state == "Ongoing"
    assert [t.topic for t in state.topics] == ["tx-visible"]
