"""Seeds from real clients: confluent-kafka, kafka-python and aiokafka through a recorder.

A throwaway capture broker is started with ``advertised.port`` set to a recording TCP
proxy, so every connection the clients make (bootstrap and after metadata) passes
through it. The proxy splits the client-to-broker stream into request frames. Each
client then runs a short, realistic session in its own thread: admin calls, an
idempotent producer with every codec, a transactional producer (confluent-kafka), and
a consumer group that polls and commits. Each client negotiates its own versions, so
the captured frames are what these clients really send.

Captured frames name the same topics as the fuzz broker (created under the same
names); topic ids, which differ per broker, are rewritten byte for byte. Everything
here is best effort: a client call that fails is reported, never fatal.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
import threading
import time
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fuzz.seeds import FUZZ_GROUP, Seed, with_layout
from fuzz.target import FloeProcess, free_port
from fuzz.topics import topic_ids as fetch_topic_ids
from fuzz.wire import I32

log = logging.getLogger("fuzz.capture")

PER_KIND = 4
"""Distinct frames kept per (client, api key, version)."""
SESSION_TIMEOUT_S = 25.0


class Recorder:
    """A TCP proxy on its own event loop thread that keeps every request frame.

    Owned by :func:`capture`; ``start`` binds, ``stop`` closes every connection.
    """

    def __init__(self, upstream_port: int) -> None:
        self.port = free_port()
        self.upstream = upstream_port
        self.frames: list[bytes] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.base_events.Server | None = None
        self._lock = threading.Lock()
        self._writers: set[asyncio.StreamWriter] = set()

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(10)

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._client, "127.0.0.1", self.port)

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream)
        except OSError:
            writer.close()
            return
        self._writers.update((writer, up_writer))

        async def requests() -> None:
            with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError, OSError):
                while True:
                    prefix = await reader.readexactly(4)
                    payload = await reader.readexactly(I32.unpack(prefix)[0])
                    with self._lock:
                        self.frames.append(prefix + payload)
                    up_writer.write(prefix + payload)
                    await up_writer.drain()
            up_writer.close()

        async def responses() -> None:
            with contextlib.suppress(ConnectionError, OSError):
                while data := await up_reader.read(65536):
                    writer.write(data)
                    await writer.drain()
            writer.close()

        await asyncio.gather(requests(), responses(), return_exceptions=True)
        self._writers.difference_update((writer, up_writer))

    def stop(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()
            for writer in list(self._writers):
                writer.close()
            for _ in range(50):  # the pumps see EOF and finish on their own
                if not self._writers:
                    break
                await asyncio.sleep(0.02)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(close(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)


# --- client sessions ------------------------------------------------------------------


def _try(errors: list[str], name: str, call: Callable[[], object]) -> None:
    try:
        call()
    except Exception as exc:
        errors.append(f"{name}: {type(exc).__name__}: {str(exc)[:120]}")


def confluent_session(bootstrap: str, topics: dict[str, int], errors: list[str]) -> None:
    import confluent_kafka as ck
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewPartitions,
        NewTopic,
        OffsetSpec,
    )

    base: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "broker.address.family": "v4",
        "log_level": 0,
    }
    admin = AdminClient(base)
    tmp = f"fuzz-capture-{uuid.uuid4().hex[:6]}"

    def wait(futures: Any) -> None:
        values = futures.values() if isinstance(futures, dict) else [futures]
        for f in values:
            f.result(timeout=10)

    _try(errors, "create_topics", lambda: wait(admin.create_topics([NewTopic(tmp, 2, 1)])))
    topic = ConfigResource(ConfigResource.Type.TOPIC, "fuzz-plain")
    _try(errors, "describe_configs", lambda: wait(admin.describe_configs([topic])))
    entry = ConfigEntry("retention.ms", "86400000", incremental_operation=AlterConfigOpType.SET)
    inc = ConfigResource(ConfigResource.Type.TOPIC, tmp, incremental_configs=[entry])
    _try(errors, "incremental_alter", lambda: wait(admin.incremental_alter_configs([inc])))
    alt = ConfigResource(ConfigResource.Type.TOPIC, tmp, set_config={"retention.ms": "3600000"})
    _try(errors, "alter_configs", lambda: wait(admin.alter_configs([alt])))
    _try(
        errors, "create_partitions", lambda: wait(admin.create_partitions([NewPartitions(tmp, 3)]))
    )
    _try(errors, "describe_cluster", lambda: admin.describe_cluster().result(timeout=10))
    _try(
        errors,
        "describe_topics",
        lambda: wait(admin.describe_topics(ck.TopicCollection(list(topics)))),
    )
    latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
    request = {ck.TopicPartition("fuzz-plain", 0): latest}
    _try(errors, "list_offsets", lambda: wait(admin.list_offsets(request)))

    producer = ck.Producer({**base, "enable.idempotence": True, "acks": "all", "linger.ms": 5})
    for codec_no, codec in enumerate(["none", "gzip", "snappy", "lz4", "zstd"]):
        p = (
            producer
            if codec == "none"
            else ck.Producer({**base, "compression.type": codec, "acks": 1, "linger.ms": 5})
        )
        for name, partitions in topics.items():
            for i in range(3):
                p.produce(
                    name,
                    key=b"k%d" % i,
                    value=b"v" * 40,
                    partition=codec_no % partitions,
                    headers=[("h", b"1")],
                )
        if p.flush(10):
            errors.append(f"produce {codec}: not all delivered")

    def transaction() -> None:
        txn = ck.Producer({**base, "transactional.id": "fuzz-capture-txn"})
        txn.init_transactions(10)
        txn.begin_transaction()
        txn.produce("fuzz-plain", key=b"t", value=b"txn", partition=0)
        consumer = ck.Consumer({**base, "group.id": FUZZ_GROUP})
        try:
            offsets = [ck.TopicPartition("fuzz-plain", 0, 1)]
            txn.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 10)
        finally:
            consumer.close()
        txn.commit_transaction(10)
        txn.begin_transaction()
        txn.produce("fuzz-plain", key=b"t", value=b"aborted", partition=1)
        txn.abort_transaction(10)

    _try(errors, "transaction", transaction)

    def group() -> None:
        consumer = ck.Consumer(
            {
                **base,
                "group.id": FUZZ_GROUP,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "session.timeout.ms": 6000,
                "isolation.level": "read_committed",
            }
        )
        consumer.subscribe(list(topics))
        got = 0
        deadline = time.monotonic() + 10
        while got < 5 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got += 1
        consumer.commit(asynchronous=False)
        consumer.committed([ck.TopicPartition("fuzz-plain", 0)], timeout=10)
        consumer.close()

    _try(errors, "consumer_group", group)
    _try(errors, "list_groups", lambda: admin.list_consumer_groups().result(timeout=10))
    _try(errors, "describe_groups", lambda: wait(admin.describe_consumer_groups([FUZZ_GROUP])))
    _try(
        errors,
        "group_offsets",
        lambda: wait(
            admin.list_consumer_group_offsets([ck.ConsumerGroupTopicPartitions(FUZZ_GROUP)])
        ),
    )
    _try(
        errors, "delete_records", lambda: wait(admin.delete_records([ck.TopicPartition(tmp, 0, 0)]))
    )
    _try(errors, "delete_groups", lambda: wait(admin.delete_consumer_groups(["fuzz-gone"])))
    _try(errors, "delete_topics", lambda: wait(admin.delete_topics([tmp])))


def kafka_python_session(bootstrap: str, topics: dict[str, int], errors: list[str]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import kafka  # type: ignore[import-untyped]
        import kafka.admin  # type: ignore[import-untyped]
    from kafka.admin import ConfigResource, ConfigResourceType, NewTopic

    tmp = f"fuzz-capture-kp-{uuid.uuid4().hex[:6]}"
    admin = kafka.admin.KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    try:
        _try(errors, "kp create_topics", lambda: admin.create_topics([NewTopic(tmp, 1, 1)]))
        _try(
            errors,
            "kp describe_configs",
            lambda: admin.describe_configs(
                [ConfigResource(ConfigResourceType.TOPIC, "fuzz-plain")]
            ),
        )
        _try(errors, "kp describe_cluster", admin.describe_cluster)
        _try(errors, "kp list_groups", admin.list_groups)
        _try(errors, "kp describe_log_dirs", admin.describe_log_dirs)
        _try(errors, "kp list_transactions", admin.list_transactions)
        _try(
            errors,
            "kp describe_producers",
            lambda: admin.describe_producers([kafka.TopicPartition("fuzz-plain", 0)]),
        )
        _try(
            errors,
            "kp describe_transactions",
            lambda: admin.describe_transactions(["fuzz-capture-txn"]),
        )
        producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, compression_type="gzip")
        for name in topics:
            producer.send(name, key=b"kp", value=b"kafka-python" * 4)
        producer.flush(10)
        producer.close(5)
        consumer = kafka.KafkaConsumer(
            *topics,
            bootstrap_servers=bootstrap,
            group_id=FUZZ_GROUP + "-kp",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            consumer_timeout_ms=3000,
        )
        consumer.poll(timeout_ms=3000, max_records=10)
        _try(errors, "kp commit", consumer.commit)
        consumer.close()
        _try(errors, "kp group_offsets", lambda: admin.list_group_offsets(FUZZ_GROUP + "-kp"))
        _try(
            errors,
            "kp delete_group_offsets",
            lambda: admin.delete_group_offsets(
                FUZZ_GROUP + "-kp", [kafka.TopicPartition("fuzz-plain", 0)]
            ),
        )
        _try(errors, "kp delete_groups", lambda: admin.delete_groups([FUZZ_GROUP + "-kp"]))
        _try(errors, "kp delete_topics", lambda: admin.delete_topics([tmp]))
    finally:
        admin.close()


def aiokafka_session(bootstrap: str, topics: dict[str, int], errors: list[str]) -> None:
    import aiokafka  # type: ignore[import-untyped]

    async def session() -> None:
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, compression_type="lz4")
        await producer.start()
        try:
            for name in topics:
                await producer.send_and_wait(name, b"aiokafka" * 4, key=b"ai")
        finally:
            await producer.stop()
        consumer = aiokafka.AIOKafkaConsumer(
            *topics,
            bootstrap_servers=bootstrap,
            group_id=FUZZ_GROUP + "-ai",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        await consumer.start()
        try:
            await consumer.getmany(timeout_ms=3000, max_records=10)
            await consumer.commit()
        finally:
            await consumer.stop()

    try:
        asyncio.run(asyncio.wait_for(session(), SESSION_TIMEOUT_S))
    except Exception as exc:
        errors.append(f"aiokafka: {type(exc).__name__}: {str(exc)[:120]}")


SESSIONS: dict[str, Callable[[str, dict[str, int], list[str]], None]] = {
    "confluent-kafka": confluent_session,
    "kafka-python": kafka_python_session,
    "aiokafka": aiokafka_session,
}


# --- orchestration --------------------------------------------------------------------


def capture(
    workdir: Path,
    topics: dict[str, int],
    topic_ids: dict[str, uuid.UUID],
    create_topics: Callable[[str, int], object],
) -> tuple[list[Seed], dict[str, Any]]:
    """Run every client session against a capture broker; return seeds and a report.

    Args:
        workdir: where the capture broker keeps its data (deleted by the caller).
        topics: topic name -> partition count, created on the capture broker too.
        topic_ids: the fuzz broker's topic ids, to substitute for the capture broker's.
        create_topics: creates the fuzz topics on a broker given (host, port).
    """
    t0 = time.monotonic()
    recorder_port = free_port()
    broker = FloeProcess(
        workdir,
        {"advertised.port": str(recorder_port), "group.initial.rebalance.delay.ms": "0"},
    )
    report: dict[str, Any] = {"errors": [], "frames": 0}
    broker.start()
    recorder = Recorder(broker.port)
    recorder.port = recorder_port
    try:
        create_topics(broker.host, broker.port)
        recorder.start()
        bootstrap = f"127.0.0.1:{recorder.port}"
        threads = []
        errors: dict[str, list[str]] = {name: [] for name in SESSIONS}
        for name, session in SESSIONS.items():

            def run(session: Any = session, name: str = name) -> None:
                try:
                    session(bootstrap, topics, errors[name])
                except Exception as exc:
                    errors[name].append(f"{type(exc).__name__}: {str(exc)[:160]}")

            thread = threading.Thread(target=run, name=f"capture-{name}", daemon=True)
            thread.start()
            threads.append(thread)
        for thread in threads:
            thread.join(max(0.1, SESSION_TIMEOUT_S - (time.monotonic() - t0)))
        report["errors"] = [f"{n}: {e}" for n, errs in errors.items() for e in errs]
        report["stuck"] = [t.name for t in threads if t.is_alive()]
        capture_ids = fetch_topic_ids(broker.host, broker.port, list(topics))
    finally:
        recorder.stop()
        broker.kill()
    swaps = [
        (capture_ids[name].bytes, topic_ids[name].bytes)
        for name in topics
        if name in capture_ids and name in topic_ids
    ]
    seeds = to_seeds(list(recorder.frames), swaps)
    report["frames"] = len(recorder.frames)
    report["seeds"] = len(seeds)
    report["seconds"] = round(time.monotonic() - t0, 1)
    return seeds, report


def to_seeds(frames: list[bytes], swaps: list[tuple[bytes, bytes]]) -> list[Seed]:
    """Distinct captured frames (correlation id zeroed), a few per client and API version."""
    kept: dict[tuple[str, int, int], list[bytes]] = {}
    seeds: list[Seed] = []
    for raw in frames:
        if len(raw) < 14:
            continue
        data = bytearray(raw)
        I32.pack_into(data, 8, 0)
        for old, new in swaps:
            start = data.find(old)
            while start >= 0:
                data[start : start + 16] = new
                start = data.find(old, start + 16)
        api_key, version, _, client_len = struct.unpack_from(">hhih", data, 4)
        client = bytes(data[14 : 14 + max(client_len, 0)]).decode(errors="replace")
        client = client.split("#")[0].split("-")[0] or "client"
        bucket = kept.setdefault((client, api_key, version), [])
        if bytes(data) in bucket or len(bucket) >= PER_KIND:
            continue
        bucket.append(bytes(data))
        seed = with_layout(Seed(bytes(data), api_key, version, f"client={client}", "captured"))
        if seed is not None:
            seeds.append(seed)
    return seeds
