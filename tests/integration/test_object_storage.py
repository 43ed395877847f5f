"""The object-storage engine (``storage.type = s3``) against a real S3 server
(SeaweedFS, one for the module; each test its own key prefix) and a real ``floe up``.

The contract a user relies on: an acks=all record is acknowledged only once it is in
the bucket, so ``kill -9`` of the broker *and the loss of its whole disk* lose nothing
acknowledged; acks=1 records are in the bucket within ``storage.s3.wal.interval.ms``;
topics (ids, partitions, configs), committed group offsets, DeleteRecords and topic
deletion live in the bucket too; WAL objects are moved into per-partition objects and
deleted.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import ConfigResource

from floe.protocol.client import (
    decode_response,
    encode_request,
    list_offsets_request,
    listed_offset,
)
from helpers.admin import ADMIN_TIMEOUT_S, admin, create_topic, watermarks
from helpers.broker import Broker, floe_bin
from helpers.clients import confluent_config, confluent_consume, confluent_produce
from helpers.records import Record, assert_same_records, recent_ts
from helpers.seaweed import SeaweedServer, seaweed_server
from helpers.txn import consume_values, txn_producer

BUCKET = "floe-log"
WAIT_S = 30.0


@pytest.fixture(scope="module")
def s3() -> Iterator[SeaweedServer]:
    with seaweed_server(BUCKET) as server:
        yield server


def s3_settings(s3: SeaweedServer, prefix: str, **extra: str) -> dict[str, str]:
    return {**s3.log_settings(BUCKET, prefix), **extra}


def keys_under(s3: SeaweedServer, prefix: str) -> list[str]:
    client = s3.s3_client()
    found: list[str] = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
        found += [o["Key"] for o in page.get("Contents", [])]
    return found


def records(n: int, tag: str, partitions: int) -> list[Record]:
    ts = recent_ts()
    return [
        Record(f"k{i}".encode(), f"{tag}-{i}".encode() * 20, (), ts + i, i % partitions)
        for i in range(n)
    ]


def read_all(bootstrap: str, topic: str, partitions: int) -> list[Record]:
    ends = {p: high for p, (_, high) in watermarks(bootstrap, topic, partitions).items()}
    return confluent_consume(bootstrap, topic, ends)


def by_position(rs: list[Record]) -> list[Record]:
    return sorted(rs, key=lambda r: (r.partition, r.offset))


def object_range(key: str) -> tuple[int, int]:
    """``(base, end)`` of a partition object's key ``.../<base>-<end>_<max ts>.log``."""
    base, end = key.rsplit("/", 1)[1].split("_", maxsplit=1)[0].split("-")
    return int(base), int(end)


def until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_acknowledged_records_survive_kill9_and_a_lost_disk(
    s3: SeaweedServer, broker_factory: Callable[..., Broker]
) -> None:
    prefix = f"t-{uuid.uuid4().hex[:8]}"
    b = broker_factory(s3_settings(s3, prefix))
    topic = create_topic(b.bootstrap, partitions=3, config={"retention.ms": "604800000"})
    acked = confluent_produce(b.bootstrap, topic, records(3000, "all", 3), compression="lz4")
    # acks=1: in the bucket within storage.s3.wal.interval.ms (250 ms by default)
    acked += confluent_produce(b.bootstrap, topic, records(300, "one", 3), acks="1")
    time.sleep(1.5)
    group = f"g-{uuid.uuid4().hex[:6]}"
    consumer = ck.Consumer(confluent_config(b.bootstrap, **{"group.id": group}))
    consumer.commit(offsets=[ck.TopicPartition(topic, 1, 77)], asynchronous=False)
    consumer.close()
    cluster_id = admin(b.bootstrap).list_topics(topic, timeout=ADMIN_TIMEOUT_S).cluster_id

    b.kill()
    b.lose_disk()
    b.start()

    assert_same_records(by_position(read_all(b.bootstrap, topic, 3)), by_position(acked), "s3")
    # the log's id (what table topics record) came back with it
    assert admin(b.bootstrap).list_topics(topic, timeout=ADMIN_TIMEOUT_S).cluster_id == cluster_id
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    described = admin(b.bootstrap).describe_configs([resource])[resource].result(ADMIN_TIMEOUT_S)
    assert described["retention.ms"].value == "604800000"
    consumer = ck.Consumer(confluent_config(b.bootstrap, **{"group.id": group}))
    try:
        committed = consumer.committed([ck.TopicPartition(topic, 1)], timeout=ADMIN_TIMEOUT_S)
    finally:
        consumer.close()
    assert committed[0].offset == 77
    # and the restored broker goes on appending after what it restored
    more = confluent_produce(b.bootstrap, topic, records(30, "after", 3))
    firsts = {p: min(r.offset or 0 for r in more if r.partition == p) for p in range(3)}
    assert firsts == {0: 1100, 1: 1100, 2: 1100}


def test_wal_objects_move_into_partition_objects_which_merge(
    s3: SeaweedServer, broker_factory: Callable[..., Broker]
) -> None:
    prefix = f"t-{uuid.uuid4().hex[:8]}"
    target = 64 * 1024
    b = broker_factory(
        s3_settings(
            s3,
            prefix,
            **{
                "storage.s3.upload.interval.ms": "200",
                "storage.s3.object.target.bytes": str(target),
            },
        )
    )
    topic = create_topic(b.bootstrap, partitions=2)
    acked: list[Record] = []
    for round_ in range(12):  # many WAL objects and upload passes per partition
        acked += confluent_produce(b.bootstrap, topic, records(100, f"r{round_}", 2))
        time.sleep(0.25)
    until(lambda: not keys_under(s3, f"{prefix}/wal/"), "the WAL objects to be deleted")
    client = s3.s3_client()
    listed = client.list_objects_v2(Bucket=BUCKET, Prefix=f"{prefix}/data/")["Contents"]
    for p in range(2):
        objects = sorted(
            (*object_range(o["Key"]), o["Size"])
            for o in listed
            if o["Key"].endswith(".log") and f"/{p}/" in o["Key"]
        )
        # contiguous, covering the partition, and merged: not one object per upload pass
        assert [o[0] for o in objects[1:]] == [o[1] for o in objects[:-1]], objects
        assert objects[0][0] == 0 and objects[-1][1] == 600, objects
        assert len(objects) <= sum(o[2] for o in objects) // (target // 2) + 2, objects

    b.kill()
    b.lose_disk()
    b.start()
    assert_same_records(by_position(read_all(b.bootstrap, topic, 2)), by_position(acked), "s3")


def test_delete_records_and_deleted_topics_reach_the_bucket(
    s3: SeaweedServer, broker_factory: Callable[..., Broker]
) -> None:
    prefix = f"t-{uuid.uuid4().hex[:8]}"
    b = broker_factory(s3_settings(s3, prefix, **{"storage.s3.upload.interval.ms": "200"}))
    kept = create_topic(b.bootstrap, partitions=1)
    acked = confluent_produce(b.bootstrap, kept, records(100, "kept", 1))
    deleted = admin(b.bootstrap).delete_records([ck.TopicPartition(kept, 0, 60)])
    for fut in deleted.values():
        fut.result(ADMIN_TIMEOUT_S)
    doomed = create_topic(b.bootstrap, partitions=2)
    confluent_produce(b.bootstrap, doomed, records(50, "doomed", 2))
    until(lambda: bool(keys_under(s3, f"{prefix}/data/")), "partition objects")
    for fut in admin(b.bootstrap).delete_topics([doomed]).values():
        fut.result(ADMIN_TIMEOUT_S)
    time.sleep(1.0)  # an upload pass: the deleted topic's objects go

    b.kill()
    b.lose_disk()
    b.start()
    assert watermarks(b.bootstrap, kept, 1)[0] == (60, 100)
    assert_same_records(
        confluent_consume(b.bootstrap, kept, {0: 100}, {0: 60}), acked[60:], "after DeleteRecords"
    )
    topics = admin(b.bootstrap).list_topics(timeout=ADMIN_TIMEOUT_S).topics
    assert doomed not in topics
    # a new topic of the same name starts empty: the old one's objects are not its own
    create_topic(b.bootstrap, name=doomed, partitions=2)
    assert watermarks(b.bootstrap, doomed, 2) == {0: (0, 0), 1: (0, 0)}


def scrape(b: Broker) -> dict[str, float]:
    """The floe_s3_* samples of the broker's /metrics, by name and labels."""
    with urllib.request.urlopen(f"{b.admin_url}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("floe_s3_")
    }


def test_consumers_read_from_the_cache_and_metrics_count_requests(
    s3: SeaweedServer, broker_factory: Callable[..., Broker]
) -> None:
    prefix = f"t-{uuid.uuid4().hex[:8]}"
    b = broker_factory(s3_settings(s3, prefix))
    topic = create_topic(b.bootstrap, partitions=1)
    acked = confluent_produce(b.bootstrap, topic, records(500, "m", 1))
    with urllib.request.urlopen(f"{b.admin_url}/api/v1/cluster", timeout=10) as resp:
        storage = json.loads(resp.read())["storage"]
    assert storage == f"s3://{BUCKET}/{prefix} at {s3.s3_endpoint}"
    before = scrape(b)
    assert before['floe_s3_requests_total{operation="put"}'] >= 1
    assert before['floe_s3_bytes_total{direction="put"}'] >= sum(len(r.value or b"") for r in acked)
    assert before[f'floe_s3_partition_unuploaded_offsets{{partition="0",topic="{topic}"}}'] == 0
    assert before["floe_s3_wal_put_seconds_count"] >= 1  # acks=all waited for them
    assert before["floe_s3_wal_put_seconds_sum"] > 0
    assert before["floe_s3_wal_commit_seconds_count"] == 0  # no cluster: no commit point
    for _ in range(3):  # consumers at the tail, again and again: never a GET
        assert len(read_all(b.bootstrap, topic, 1)) == 500
    after = scrape(b)
    assert (
        after['floe_s3_requests_total{operation="get"}']
        == before['floe_s3_requests_total{operation="get"}']
    )


def test_a_broker_writes_its_own_wal_stream_and_reads_the_unnamed_one_of_older_buckets(
    s3: SeaweedServer, broker_factory: Callable[..., Broker]
) -> None:
    """Each broker writes its WAL objects under ``wal/<node.id>/`` (brokers of a cluster
    write one bucket side by side). A bucket written before streams existed holds its
    WAL objects right under ``wal/`` (and ``wal-floor``): a broker opening it restores
    from them, moves them into partition objects, deletes them, and still never reuses
    their numbers there."""
    prefix = f"t-{uuid.uuid4().hex[:8]}"
    settings = s3_settings(s3, prefix, **{"node.id": "7", "storage.s3.upload.interval.ms": "60000"})
    b = broker_factory(settings)
    topic = create_topic(b.bootstrap, partitions=2)
    acked = confluent_produce(b.bootstrap, topic, records(60, "old", 2))
    b.kill()
    wal = keys_under(s3, f"{prefix}/wal/")
    assert wal and all(k.startswith(f"{prefix}/wal/7/") for k in wal), wal
    client = s3.s3_client()
    for key in wal:  # as the layout before streams named them
        legacy = key.replace("/wal/7/", "/wal/")
        client.copy_object(Bucket=BUCKET, Key=legacy, CopySource={"Bucket": BUCKET, "Key": key})
        client.delete_object(Bucket=BUCKET, Key=key)
    b.lose_disk()
    b.settings["storage.s3.upload.interval.ms"] = "200"
    b.start()
    restored = by_position(read_all(b.bootstrap, topic, 2))
    assert_same_records(restored, by_position(acked), "restored from the old layout")
    until(lambda: not keys_under(s3, f"{prefix}/wal/"), "the old WAL objects to be deleted")
    floor = client.get_object(Bucket=BUCKET, Key=f"{prefix}/wal-floor")["Body"].read()
    assert json.loads(floor)["next_sequence"] == len(wal)
    acked += confluent_produce(b.bootstrap, topic, records(10, "new", 2))
    b.kill()
    b.lose_disk()
    b.start()
    again = by_position(read_all(b.bootstrap, topic, 2))
    assert_same_records(again, by_position(acked), "after the old stream went")


def test_a_wal_backlog_starts_the_upload_pass_early(
    s3: SeaweedServer, broker_factory: Callable[..., Broker]
) -> None:
    """A broker taking over reads every WAL object the upload pass has not emptied yet,
    so their number is bounded by more than time: 500 of them start a pass before
    ``storage.s3.upload.interval.ms`` (here a minute) is up."""
    prefix = f"t-{uuid.uuid4().hex[:8]}"
    b = broker_factory(s3_settings(s3, prefix, **{"storage.s3.upload.interval.ms": "60000"}))
    topic = create_topic(b.bootstrap, partitions=1)
    producer = ck.Producer(confluent_config(b.bootstrap, **{"linger.ms": 0}))
    for i in range(700):  # one acks=all request, so one WAL object, at a time
        producer.produce(topic, value=f"v{i}".encode())
        assert producer.flush(10) == 0
    until(lambda: len(keys_under(s3, f"{prefix}/wal/")) < 300, "an early upload pass")
    assert [k for k in keys_under(s3, f"{prefix}/data/") if k.endswith(".log")]
    assert len(read_all(b.bootstrap, topic, 1)) == 700


def test_a_second_broker_on_the_same_prefix_fences_one_of_them(
    s3: SeaweedServer, broker_factory: Callable[..., Broker]
) -> None:
    """Two brokers writing one prefix would overwrite each other's WAL objects. WAL
    objects are created with a conditional PUT and their sequence numbers are never
    reused, so a broker whose next WAL key is taken fences itself for good: it
    acknowledges nothing more, and nothing acknowledged is lost. (Best effort: the
    collision is seen only while the other broker's object exists, i.e. until its
    upload pass folds it into partition objects; the second broker here keeps its WAL
    objects for the test's duration. Leases close that window with the cluster.)"""
    prefix = f"t-{uuid.uuid4().hex[:8]}"
    settings = s3_settings(s3, prefix, **{"storage.s3.upload.interval.ms": "200"})
    first = broker_factory(settings)
    topic = create_topic(first.bootstrap, partitions=1)
    acked = confluent_produce(first.bootstrap, topic, records(100, "first", 1))
    # its WAL objects are deleted: their sequence numbers must still never be used again
    until(lambda: not keys_under(s3, f"{prefix}/wal/"), "the WAL objects to be deleted")
    # reads the bucket: the same topic, the same records
    second = broker_factory({**settings, "storage.s3.upload.interval.ms": "60000"})
    assert len(read_all(second.bootstrap, topic, 1)) == 100
    acked += confluent_produce(second.bootstrap, topic, records(10, "second", 1))
    with pytest.raises(ck.KafkaException) as info:  # its next WAL object exists already
        confluent_produce(
            first.bootstrap, topic, records(10, "stale", 1), **{"message.timeout.ms": 5000}
        )
    assert info.value.args[0].code() in (
        ck.KafkaError.KAFKA_STORAGE_ERROR,
        ck.KafkaError._MSG_TIMED_OUT,
    ), info.value
    assert "storage.wal.fenced" in first.stderr_text()
    first.kill()
    second.kill()
    second.lose_disk()
    second.start()
    assert_same_records(read_all(second.bootstrap, topic, 1), acked, "after the fence")


def test_a_partition_emptied_by_delete_records_keeps_its_offsets_after_a_lost_disk(
    s3: SeaweedServer, broker_factory: Callable[..., Broker]
) -> None:
    """Every record deleted (DeleteRecords up to the end, as retention does to an idle
    topic): the bucket keeps no object of the partition, only its log start. A broker
    restoring it (a lost disk, a takeover) must start it there: offsets are never given
    out twice, or consumers and tables that read up to them would skip the new records."""
    prefix = f"t-{uuid.uuid4().hex[:8]}"
    b = broker_factory(s3_settings(s3, prefix, **{"storage.s3.upload.interval.ms": "200"}))
    topic = create_topic(b.bootstrap, partitions=1)
    confluent_produce(b.bootstrap, topic, records(40, "gone", 1))
    a = admin(b.bootstrap)
    tp = ck.TopicPartition(topic, 0, 40)
    assert (
        a.delete_records([tp], request_timeout=ADMIN_TIMEOUT_S)[tp]
        .result(ADMIN_TIMEOUT_S)
        .low_watermark
        == 40
    )
    until(
        lambda: (
            not [k for k in keys_under(s3, f"{prefix}/data/") if k.endswith(".log")]
            and not keys_under(s3, f"{prefix}/wal/")
        ),
        "the partition's objects and the WAL objects to be deleted",
    )
    b.kill()
    b.lose_disk()
    b.start()
    assert watermarks(b.bootstrap, topic, 1) == {0: (40, 40)}
    acked = confluent_produce(b.bootstrap, topic, records(3, "new", 1))
    assert [r.offset for r in acked] == [40, 41, 42]


def test_compacted_topics_shrink_in_the_bucket_too(
    s3: SeaweedServer, broker_factory: Callable[..., Broker]
) -> None:
    prefix = f"t-{uuid.uuid4().hex[:8]}"
    b = broker_factory(
        s3_settings(
            s3,
            prefix,
            **{"storage.s3.upload.interval.ms": "200", "log.retention.check.interval.ms": "200"},
        )
    )
    topic = create_topic(
        b.bootstrap, partitions=1, config={"cleanup.policy": "compact", "segment.bytes": "16384"}
    )
    ts = recent_ts()
    produced = [
        Record(f"key-{i % 10}".encode(), f"v{i}".encode() * 40, (), ts + i, 0) for i in range(3000)
    ]
    for start in range(0, 3000, 500):
        confluent_produce(b.bootstrap, topic, produced[start : start + 500])

    def bucket_bytes() -> int:
        client = s3.s3_client()
        listed = client.list_objects_v2(Bucket=BUCKET, Prefix=f"{prefix}/data/")
        return sum(o["Size"] for o in listed.get("Contents", []) if o["Key"].endswith(".log"))

    until(  # from ~600 KB (before the compaction, a partial upload can be that small)
        lambda: "storage.object.compacted" in b.stderr_text() and 0 < bucket_bytes() < 300_000,
        "the bucket to shrink with compaction",
    )

    b.kill()
    b.lose_disk()
    b.start()
    latest = {r.key: r.value for r in read_all(b.bootstrap, topic, 1)}
    assert latest == {r.key: r.value for r in produced}  # the last value of every key


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"storage.type": "s3"}, "floe: error: storage.type = s3 needs storage.s3.bucket"),
        (
            {
                "storage.type": "s3",
                "storage.s3.bucket": BUCKET,
                "storage.s3.endpoint": "http://127.0.0.1:1",
                "storage.s3.access.key.id": "k",
                "storage.s3.secret.access.key": "s",
                "storage.s3.request.timeout.ms": "2000",
            },
            f"floe: error: cannot read the bucket s3://{BUCKET}/floe at http://127.0.0.1:1: ",
        ),
    ],
)
def test_an_unusable_bucket_is_a_one_line_error(
    tmp_path: Path, settings: dict[str, str], message: str
) -> None:
    cmd = [floe_bin(), "up", "--data-dir", str(tmp_path / "data"), "--kafka-port", "0"]
    for key, value in {**settings, "admin.port": "0", "registry.port": "0"}.items():
        cmd += ["--set", f"{key}={value}"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if line.startswith("floe: error:")]
    assert len(errors) == 1 and errors[0].startswith(message), done.stderr[-2000:]
    assert "Traceback" not in done.stderr


def weed_pid(s3: SeaweedServer) -> int:
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if "weed" in cmdline and str(s3.directory) in cmdline:
                return int(proc.name)
    raise AssertionError("no weed process found")


def test_a_hung_bucket_fails_acks_all_and_then_recovers(
    s3: SeaweedServer, broker_factory: Callable[..., Broker]
) -> None:
    """While the store does not answer, acks=all produce requests get an error (nothing
    is acknowledged that is not in the bucket); once it answers again, producing works
    and every acknowledged record is there, even after losing the disk."""
    prefix = f"t-{uuid.uuid4().hex[:8]}"
    b = broker_factory(s3_settings(s3, prefix, **{"storage.s3.request.timeout.ms": "2000"}))
    topic = create_topic(b.bootstrap, partitions=1)
    acked = confluent_produce(b.bootstrap, topic, records(50, "before", 1))
    pid = weed_pid(s3)
    os.kill(pid, signal.SIGSTOP)
    try:
        with pytest.raises(ck.KafkaException):
            confluent_produce(
                b.bootstrap, topic, records(10, "hung", 1), **{"message.timeout.ms": 6000}
            )
    finally:
        os.kill(pid, signal.SIGCONT)
    assert "storage.wal.upload_failed" in b.stderr_text()
    acked += confluent_produce(b.bootstrap, topic, records(50, "after", 1))
    b.kill()
    b.lose_disk()
    b.start()
    got = {(r.partition, r.offset): r for r in read_all(b.bootstrap, topic, 1)}
    for r in acked:  # the hung batch was never acknowledged: it may be there or not
        assert got[(r.partition, r.offset)].value == r.value


# --------------------------------------------------------------- a bounded local cache

CACHE_BYTES = 150_000
SEGMENT_BYTES = 40_000


EARLIEST_LOCAL = -4
LATEST_TIERED = -5


def list_offset(b: Broker, topic: str, spec: int) -> int:
    """ListOffsets of partition 0 with the special timestamp ``spec``, by hand (the
    clients here do not send -4 and -5)."""
    request = list_offsets_request(topic, 0, spec)
    with socket.create_connection((b.host, b.port), timeout=30) as s:
        s.sendall(encode_request(request, 1, "tiered"))
        size = int.from_bytes(s.recv(4, socket.MSG_WAITALL), "big")
        _, response = decode_response(request, s.recv(size, socket.MSG_WAITALL))
    listed = listed_offset(response, topic, 0)
    assert listed.error == 0, listed
    return int(listed.offset)


def cache_settings(s3: SeaweedServer, prefix: str) -> dict[str, str]:
    return s3_settings(
        s3,
        prefix,
        **{
            "storage.s3.cache.max.bytes": str(CACHE_BYTES),
            "storage.s3.upload.interval.ms": "200",
            "storage.s3.object.target.bytes": str(64 * 1024),
            "log.retention.check.interval.ms": "300",
        },
    )


def cached_bytes(b: Broker, topic: str) -> int:
    """The bytes of partition 0's segment files in the broker's data dir."""
    total = 0
    for f in (b.data_dir / "logs" / f"{topic}-0").glob("*.log"):
        with contextlib.suppress(FileNotFoundError):  # evicted since the listing
            total += f.stat().st_size
    return total


NEWEST = (3, 7)
"""Round and index of the record with the largest timestamp (10 minutes ahead)."""


def produce_rounds(b: Broker, topic: str, base_ts: int, pause_s: float = 0.0) -> list[Record]:
    """10 x 300 records of about 150 bytes, round ``r`` at ``base_ts + r s``, but for
    the ``NEWEST`` one; ``pause_s`` between rounds."""
    acked: list[Record] = []
    for r in range(10):
        time.sleep(pause_s)
        batch = [
            Record(
                f"k{i}".encode(),
                f"r{r}-{i}".encode() * 20,
                (),
                base_ts + (600_000 if (r, i) == NEWEST else r * 1000 + i),
                0,
            )
            for i in range(300)
        ]
        acked += confluent_produce(b.bootstrap, topic, batch)
    return acked


def test_a_bounded_cache_serves_older_records_from_the_bucket(
    s3: SeaweedServer, broker_factory: Callable[..., Broker]
) -> None:
    prefix = f"t-{uuid.uuid4().hex[:8]}"
    b = broker_factory(cache_settings(s3, prefix))
    topic = create_topic(b.bootstrap, partitions=1, config={"segment.bytes": str(SEGMENT_BYTES)})
    base = recent_ts()
    early = [Record(b"e", f"early-{i}".encode(), (), base - 600_000, 0) for i in range(5)]
    acked = confluent_produce(b.bootstrap, topic, early) + produce_rounds(b, topic, base)
    until(
        lambda: cached_bytes(b, topic) <= CACHE_BYTES + 2 * SEGMENT_BYTES,
        "segments to leave the cache",
    )
    assert "log.segment.evicted" in b.stderr_text()
    gets = scrape(b)['floe_s3_requests_total{operation="get"}']

    def check_everything_readable(who: str) -> None:
        assert watermarks(b.bootstrap, topic, 1)[0] == (0, len(acked))
        assert_same_records(read_all(b.bootstrap, topic, 1), acked, who)
        # a time below the cache start: the first record at or after it (round 2's first)
        consumer = ck.Consumer(confluent_config(b.bootstrap, **{"group.id": "times"}))
        try:
            (found,) = consumer.offsets_for_times(
                [ck.TopicPartition(topic, 0, base + 2000)], timeout=ADMIN_TIMEOUT_S
            )
        finally:
            consumer.close()
        assert found.offset == len(early) + 2 * 300, who
        # the largest timestamp lives in an object only
        spec = {ck.TopicPartition(topic, 0): ck.admin.OffsetSpec.max_timestamp()}
        fresh = ck.admin.AdminClient(confluent_config(b.bootstrap))  # not one of a past run
        (newest,) = fresh.list_offsets(spec).values()
        answer = newest.result(ADMIN_TIMEOUT_S)
        offset = len(early) + NEWEST[0] * 300 + NEWEST[1]
        assert (answer.offset, answer.timestamp) == (offset, base + 600_000), who

    check_everything_readable("through the bucket")
    assert scrape(b)['floe_s3_requests_total{operation="get"}'] > gets
    # KIP-405/1005 offsets: the first on the broker's disk, the last in the bucket
    cache_start = scrape(b)[
        f'floe_s3_partition_cache_start_offset{{partition="0",topic="{topic}"}}'
    ]
    assert 0 < list_offset(b, topic, EARLIEST_LOCAL) == cache_start
    assert list_offset(b, topic, LATEST_TIERED) == len(acked) - 1
    assert cached_bytes(b, topic) <= CACHE_BYTES + 2 * SEGMENT_BYTES

    b.kill()  # the cache start survives a restart ...
    b.start()
    check_everything_readable("after kill -9")
    b.kill()  # ... and losing the disk: only the tail is restored, from a snapshot of
    b.lose_disk()  # the producer state in the bucket
    b.start()
    (restored,) = [
        line for line in b.stderr_text().splitlines() if "storage.object.restored" in line
    ]
    fields = dict(f.split("=", 1) for f in restored.split() if "=" in f)
    assert fields["partition"] == f"{topic}-0" and fields["from_snapshot"] == "True", restored
    assert int(fields["from"]) > 0 and int(fields["bytes"]) <= 2 * SEGMENT_BYTES, restored
    check_everything_readable("after losing the disk")


def test_retention_deletes_objects_below_the_cache(
    s3: SeaweedServer, broker_factory: Callable[..., Broker]
) -> None:
    prefix = f"t-{uuid.uuid4().hex[:8]}"
    b = broker_factory(cache_settings(s3, prefix))
    topic = create_topic(
        b.bootstrap,
        partitions=1,
        config={"segment.bytes": str(SEGMENT_BYTES), "retention.bytes": "250000"},
    )
    # a pause longer than an upload pass: objects of a round or two (retention deletes
    # whole objects, as Kafka deletes whole segments)
    acked = produce_rounds(b, topic, recent_ts(), pause_s=0.3)
    until(lambda: watermarks(b.bootstrap, topic, 1)[0][0] > 0, "retention to move the log start")
    low, high = watermarks(b.bootstrap, topic, 1)[0]
    assert high == len(acked)
    # the records from the log start on are all there, older ones from the bucket;
    # retention may move the start on while the consumer reads (it then resumes at the
    # new start, earliest), so the read begins somewhere between the two starts
    got = confluent_consume(b.bootstrap, topic, {0: high}, {0: low})
    low_after = watermarks(b.bootstrap, topic, 1)[0][0]
    first = got[0].offset if got else high
    assert first is not None and low <= first <= low_after, (low, first, low_after)
    assert_same_records(got, acked[first:], "after retention")
    assert low < high - CACHE_BYTES // 150, "retention went past what the cache holds"

    def no_object_below_the_log_start() -> bool:
        objects = [k for k in keys_under(s3, f"{prefix}/data/") if k.endswith(".log")]
        return bool(objects) and all(object_range(k)[1] > low for k in objects)

    until(no_object_below_the_log_start, "objects below the log start to be deleted")


def test_aborted_transactions_hold_below_the_cache(
    s3: SeaweedServer, broker_factory: Callable[..., Broker]
) -> None:
    """read_committed consumers reading records that left the cache still drop an
    aborted transaction's records, before and after a restart."""
    prefix = f"t-{uuid.uuid4().hex[:8]}"
    b = broker_factory(cache_settings(s3, prefix))
    topic = create_topic(b.bootstrap, partitions=1, config={"segment.bytes": str(SEGMENT_BYTES)})
    producer = txn_producer(b.bootstrap, f"tx-{prefix}")
    for outcome in ("abort", "commit"):
        producer.begin_transaction()
        for i in range(200):
            producer.produce(topic, f"{outcome}-{i}".encode() * 10, partition=0)
        producer.flush(30)
        if outcome == "abort":
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
    plain = produce_rounds(b, topic, recent_ts())
    until(
        lambda: cached_bytes(b, topic) <= CACHE_BYTES + 2 * SEGMENT_BYTES,
        "segments to leave the cache",
    )
    committed = [f"commit-{i}".encode() * 10 for i in range(200)] + [r.value for r in plain]
    total = 200 + 200 + len(plain)
    for who in ("through the bucket", "after kill -9", "after losing the disk"):
        if who != "through the bucket":
            b.kill()
            if who == "after losing the disk":  # restored from the producer-state snapshot
                b.lose_disk()
            b.start()
        got = consume_values(b.bootstrap, topic, 1, "read_committed", len(committed))
        assert [v for _, v in got] == committed, who
        assert len(consume_values(b.bootstrap, topic, 1, "read_uncommitted", total)) == total


def test_one_fetch_reads_several_partitions_from_the_bucket(
    s3: SeaweedServer, broker_factory: Callable[..., Broker]
) -> None:
    prefix = f"t-{uuid.uuid4().hex[:8]}"
    b = broker_factory(cache_settings(s3, prefix))
    topic = create_topic(b.bootstrap, partitions=3, config={"segment.bytes": str(SEGMENT_BYTES)})
    acked: list[Record] = []
    for r in range(4):
        acked += confluent_produce(b.bootstrap, topic, records(900, f"r{r}", 3))

    def evicted_partitions() -> int:
        name = "floe_s3_partition_cache_start_offset"
        return sum(1 for k, v in scrape(b).items() if k.startswith(name) and topic in k and v)

    until(lambda: evicted_partitions() >= 2, "two partitions to leave the cache in part")
    assert_same_records(by_position(read_all(b.bootstrap, topic, 3)), by_position(acked), "cold")
