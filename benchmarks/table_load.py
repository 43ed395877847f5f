"""The ``table`` suite's worker-process side: clickstream data, producers, the ETL
baseline, the Parquet floor and the converter profile.

Every public function runs in a spawned worker process (``harness.worker_pool``), so
the clients' CPU never mixes with the broker's and the ETL's peak RSS is its own (a
fresh pool per ETL run). Specs and results are plain picklable values.

The records are built once per run and format by :func:`serialize` into a file of
length-prefixed values: Confluent-framed Avro or JSON Schema values (magic byte, 4-byte
schema id, body), or the same events as plain JSON text for string mode. Every producer
then sends those raw bytes, so no serializer limits the produce rate.
"""

from __future__ import annotations

import io
import random
import resource
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.clickstream import (
    AVRO,
    CLICKSTREAM,
    CLICKSTREAM_JSON_SCHEMA,
    JSON,
    STRING,
    click,
    encoder,
    json_text,
)
from floe.tabletopic.convert.wire import frame

_LEN = struct.Struct(">I")
TS_BASE_MS = 1_767_225_600_000
"""2026-01-01T00:00:00Z: event times of the generated clicks start here."""

PRODUCER_CONFIG: dict[str, str | int] = {
    "acks": "all",
    "enable.idempotence": "false",
    "linger.ms": 5,
    "batch.size": 1_000_000,
    "batch.num.messages": 10_000,
    "queue.buffering.max.messages": 500_000,
    "queue.buffering.max.kbytes": 262_144,
}
RATE_PRODUCER_CONFIG: dict[str, str | int] = {**PRODUCER_CONFIG, "linger.ms": 1}
_TICK_S = 0.001


FORMATS = (AVRO, JSON, STRING)
"""Value formats: Confluent Avro and JSON Schema (``by_schema_id`` + ``flatten``), and
JSON text in ``string`` mode."""


@dataclass(frozen=True)
class Dataset:
    """The serialized records: ``count`` values of ``fmt``, ``value_bytes`` in all, in
    ``path``; ``schema_id`` 0 for ``string``."""

    path: str
    count: int
    value_bytes: int
    schema_id: int
    fmt: str = AVRO


def serialize(
    registry_url: str, subject_topic: str, count: int, seed: int, path: str, *, fmt: str = AVRO
) -> Dataset:
    """Serialize ``count`` clicks of format ``fmt`` with a fixed seed into ``path``.

    Avro and JSON: the first record goes through confluent-kafka's ``AvroSerializer`` or
    ``JSONSerializer`` (which registers the schema as ``<subject_topic>-value`` in Floe's
    registry); the rest are written with fastavro or ``json`` and the same 5-byte
    prefix, after checking that the bytes are equal for that first record. String: the
    JSON text alone.

    Raises:
        RuntimeError: the framing differs from the serializer's.
    """
    import json

    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.schema_registry.json_schema import JSONSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = SchemaRegistryClient({"url": registry_url})
    conf = {"auto.register.schemas": True}
    serializer: Any = None
    if fmt == AVRO:
        serializer = AvroSerializer(client, json.dumps(CLICKSTREAM), conf=conf)
    elif fmt == JSON:
        serializer = JSONSerializer(
            json.dumps(CLICKSTREAM_JSON_SCHEMA), client, conf=conf, json_encode=json_text
        )
    encode = encoder(fmt)
    rng = random.Random(seed)
    total, schema_id, framed = 0, 0, b""
    with open(path, "wb") as out:
        for i in range(count):
            value = click(rng, i, TS_BASE_MS)
            if serializer is not None and i == 0:
                ctx = SerializationContext(subject_topic, MessageField.VALUE)
                framed = serializer(value, ctx) or b""
                schema_id = int.from_bytes(framed[1:5], "big")
            body = encode(value)
            raw = body if fmt == STRING else frame(schema_id, body)
            if serializer is not None and i == 0 and raw != framed:
                raise RuntimeError(f"{fmt} framing differs from the serializer's")
            out.write(_LEN.pack(len(raw)))
            out.write(raw)
            total += len(raw)
    return Dataset(path, count, total, schema_id, fmt)


def read_values(path: str) -> Iterator[bytes]:
    """The values :func:`serialize` wrote, in order."""
    data = Path(path).read_bytes()
    pos = 0
    while pos < len(data):
        (n,) = _LEN.unpack_from(data, pos)
        yield data[pos + 4 : pos + 4 + n]
        pos += 4 + n


def _config(bootstrap: str, base: dict[str, str | int], **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "broker.address.family": "v4", **base, **extra}


def _send(producer: Any, topic: str, value: bytes, partition: int, **kw: Any) -> None:
    """``produce()``, serving callbacks while the local queue is full."""
    while True:
        try:
            producer.produce(topic, value, partition=partition, **kw)
            return
        except BufferError:
            producer.poll(0.005)


@dataclass(frozen=True)
class ProduceResult:
    records: int
    seconds: float
    errors: int
    ends: dict[int, int]
    """Per partition: the offset after the last acknowledged record."""


def produce_all(bootstrap: str, topic: str, dataset: Dataset, partitions: int) -> ProduceResult:
    """Produce every value of ``dataset`` round-robin over ``partitions``; flush.

    Raises:
        TimeoutError: records were still undelivered after 10 minutes.
    """
    from confluent_kafka import Producer

    ends: dict[int, int] = {}
    outcome = {"errors": 0}

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            outcome["errors"] += 1
        else:
            ends[msg.partition()] = max(ends.get(msg.partition(), 0), msg.offset() + 1)

    producer = Producer(_config(bootstrap, PRODUCER_CONFIG, on_delivery=delivered))
    producer.list_topics(topic, timeout=30)
    values = list(read_values(dataset.path))
    t0 = time.perf_counter()
    for i, value in enumerate(values):
        _send(producer, topic, value, i % partitions)
        if i % 1000 == 0:
            producer.poll(0)
    if producer.flush(600):
        raise TimeoutError("records still undelivered after 600 s")
    return ProduceResult(len(values), time.perf_counter() - t0, outcome["errors"], ends)


@dataclass
class RateResult:
    """Per acknowledged record: partition, offset and the wall-clock ack time."""

    partitions: list[int]
    offsets: list[int]
    acked_at: list[float]
    errors: int
    seconds: float


def produce_at_rate(
    bootstrap: str, topic: str, dataset: Dataset, partitions: int, *, rate: int, seconds: float
) -> RateResult:
    """Produce ``rate`` records/s for ``seconds`` (record ``i`` released at ``i/rate``);
    note each record's acknowledgment time on the wall clock (``time.time``, the same
    clock the suite's table poller uses: both run on this machine).

    Raises:
        TimeoutError: records were still undelivered 60 s after the last send.
    """
    from confluent_kafka import Producer

    producer = Producer(_config(bootstrap, RATE_PRODUCER_CONFIG))
    producer.list_topics(topic, timeout=30)
    values = list(read_values(dataset.path))
    total = int(rate * seconds)
    out = RateResult([], [], [], 0, 0.0)

    def delivered(err: Any, msg: Any) -> None:
        now = time.time()
        if err is not None:
            out.errors += 1
            return
        out.partitions.append(msg.partition())
        out.offsets.append(msg.offset())
        out.acked_at.append(now)

    t0 = time.perf_counter()
    sent = 0
    while sent < total:
        due = min(total, int((time.perf_counter() - t0) * rate) + 1)
        for i in range(sent, due):
            _send(producer, topic, values[i % len(values)], i % partitions, on_delivery=delivered)
        sent = due
        producer.poll(_TICK_S)
    if producer.flush(60):
        raise TimeoutError("records still undelivered 60 s after the last send")
    out.seconds = time.perf_counter() - t0
    return out


# -- the traditional ETL baseline and the floor ------------------------------------------

ARROW_FIELDS = (
    ("user_id", "string"),
    ("session_id", "string"),
    ("page", "string"),
    ("referrer", "string"),
    ("event_type", "string"),
    ("device", "string"),
    ("ts", "timestamp"),
    ("_partition", "int32"),
    ("_offset", "int64"),
    ("_timestamp", "timestamp"),
)
"""The ETL's table: the flattened value plus partition, offset and record timestamp."""


STRING_FIELDS = (
    ("value", "string"),
    ("_partition", "int32"),
    ("_offset", "int64"),
    ("_timestamp", "timestamp"),
)
"""The ETL's table in string mode: the text plus partition, offset and timestamp."""


def _fields(fmt: str) -> tuple[tuple[str, str], ...]:
    return STRING_FIELDS if fmt == STRING else ARROW_FIELDS


def arrow_schema(fmt: str = AVRO) -> Any:
    import pyarrow as pa

    types = {
        "string": pa.string(),
        "int32": pa.int32(),
        "int64": pa.int64(),
        "timestamp": pa.timestamp("us", tz="UTC"),
    }
    return pa.schema([pa.field(name, types[t], nullable=True) for name, t in _fields(fmt)])


_EVENT_FIELDS = ("user_id", "session_id", "page", "referrer", "event_type", "device", "ts")


class _Columns:
    """Column lists of decoded records, turned into an Arrow table per batch."""

    def __init__(self, fmt: str) -> None:
        self.fmt = fmt
        self.cols: dict[str, list[Any]] = {name: [] for name, _ in _fields(fmt)}
        self.rows = 0

    def add(self, value: Any, partition: int, offset: int, ts_ms: int) -> None:
        """``value``: the decoded event (a dict), or the text in string mode."""
        if self.fmt == STRING:
            self.cols["value"].append(value)
        else:
            for name in _EVENT_FIELDS:
                self.cols[name].append(value[name])
            if self.fmt == JSON:  # epoch milliseconds, as microseconds for the column
                self.cols["ts"][-1] *= 1000
        self.cols["_partition"].append(partition)
        self.cols["_offset"].append(offset)
        self.cols["_timestamp"].append(ts_ms * 1000)
        self.rows += 1

    def table(self) -> Any:
        import pyarrow as pa

        schema = arrow_schema(self.fmt)
        arrays = []
        for f in schema:
            values = self.cols[f.name]
            if f.name == "_timestamp" or (f.name == "ts" and self.fmt == JSON):
                arrays.append(pa.array(values, pa.int64()).cast(f.type))
            else:
                arrays.append(pa.array(values, f.type))
        return pa.Table.from_arrays(arrays, schema=schema)


def _decoder(registry_url: str, fmt: str) -> Callable[[bytes], Any]:
    """Decode a value of ``fmt``: Confluent-framed Avro with the writer schema fetched
    from the registry by id (once), Confluent-framed JSON (parsed, not validated: the
    cheapest a hand-written ETL gets away with), or UTF-8 text."""
    if fmt == JSON:
        import orjson

        return lambda raw: orjson.loads(raw[5:])
    if fmt == STRING:
        return lambda raw: raw.decode()
    import fastavro
    from confluent_kafka.schema_registry import SchemaRegistryClient

    client = SchemaRegistryClient({"url": registry_url})
    schemas: dict[int, Any] = {}

    def decode(raw: bytes) -> dict[str, Any]:
        schema_id = int.from_bytes(raw[1:5], "big")
        parsed = schemas.get(schema_id)
        if parsed is None:
            import json

            text = client.get_schema(schema_id).schema_str
            parsed = schemas[schema_id] = fastavro.parse_schema(json.loads(text))
        value: dict[str, Any] = fastavro.schemaless_reader(io.BytesIO(raw[5:]), parsed, None)
        return value

    return decode


@dataclass(frozen=True)
class EtlSpec:
    bootstrap: str
    registry_url: str
    topic: str
    partitions: int
    expected: int
    batch: int
    workdir: str
    timeout_s: float
    fmt: str = AVRO


@dataclass
class EtlResult:
    records: int = 0
    value_bytes: int = 0
    seconds: float = 0.0
    cpu_s: float = 0.0
    peak_rss_mb: float = 0.0
    commits: int = 0
    files: int = 0
    file_bytes: int = 0
    commit_seconds: list[float] = field(default_factory=list)


def etl(spec: EtlSpec) -> EtlResult:
    """The traditional Python ETL: confluent-kafka consumer -> fastavro (schemas from the
    registry) -> Arrow batches of ``spec.batch`` records -> pyiceberg ``append`` into a
    ``SqlCatalog`` on SQLite, committing the consumer offsets after each append
    (at-least-once, as such jobs do).

    The clock starts before the catalog is opened and stops after the last append.

    Raises:
        TimeoutError: not every record arrived within ``spec.timeout_s``.
    """
    from confluent_kafka import Consumer, TopicPartition
    from pyiceberg.catalog.sql import SqlCatalog

    work = Path(spec.workdir)
    (work / "warehouse").mkdir(parents=True, exist_ok=True)
    out = EtlResult()
    cpu0, t0 = time.process_time(), time.perf_counter()
    catalog = SqlCatalog(
        "etl", uri=f"sqlite:///{work / 'catalog.db'}", warehouse=f"file://{work / 'warehouse'}"
    )
    catalog.create_namespace_if_not_exists("bench")
    table = catalog.create_table(("bench", spec.topic), schema=arrow_schema(spec.fmt))
    decode = _decoder(spec.registry_url, spec.fmt)
    consumer = Consumer(
        _config(
            spec.bootstrap,
            {
                "group.id": f"etl-{spec.topic}",
                "enable.auto.commit": "false",
                "fetch.max.bytes": 52_428_800,
                "max.partition.fetch.bytes": 4_194_304,
                "queued.max.messages.kbytes": 131_072,
                "fetch.queue.backoff.ms": 10,
            },
        )
    )
    deadline = t0 + spec.timeout_s
    try:
        consumer.assign([TopicPartition(spec.topic, p, 0) for p in range(spec.partitions)])
        cols = _Columns(spec.fmt)
        positions: dict[int, int] = {}

        def flush() -> None:
            c0 = time.perf_counter()
            table.append(cols.table())
            consumer.commit(
                offsets=[TopicPartition(spec.topic, p, o) for p, o in positions.items()],
                asynchronous=False,
            )
            out.commit_seconds.append(time.perf_counter() - c0)
            out.commits += 1

        while out.records < spec.expected:
            if time.perf_counter() > deadline:
                raise TimeoutError(f"only {out.records} of {spec.expected} records in time")
            for msg in consumer.consume(num_messages=10_000, timeout=0.5):
                if msg.error() is not None:
                    continue
                raw = msg.value()
                p, o = msg.partition(), msg.offset()
                cols.add(decode(raw), p, o, msg.timestamp()[1])
                positions[p] = o + 1
                out.records += 1
                out.value_bytes += len(raw)
                if cols.rows >= spec.batch:
                    flush()
                    cols = _Columns(spec.fmt)
        if cols.rows:
            flush()
        out.seconds = time.perf_counter() - t0
        out.cpu_s = time.process_time() - cpu0
    finally:
        consumer.close()
    files = table.inspect.files()
    out.files = files.num_rows
    out.file_bytes = sum(files.column("file_size_in_bytes").to_pylist())
    out.peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6
    return out


def decoded_table(dataset: Dataset, partitions: int) -> Any:
    """The dataset decoded to the ETL's Arrow rows (partition/offset as produced)."""
    decode = _decoder_local(dataset.fmt)
    cols = _Columns(dataset.fmt)
    for i, raw in enumerate(read_values(dataset.path)):
        cols.add(decode(raw), i % partitions, i // partitions, TS_BASE_MS + i)
    return cols.table()


def _decoder_local(fmt: str) -> Callable[[bytes], Any]:
    if fmt != AVRO:
        return _decoder("", fmt)
    import fastavro

    parsed = fastavro.parse_schema(CLICKSTREAM)

    def decode(raw: bytes) -> dict[str, Any]:
        value: dict[str, Any] = fastavro.schemaless_reader(io.BytesIO(raw[5:]), parsed, None)
        return value

    return decode


@dataclass(frozen=True)
class FloorResult:
    records: int
    value_bytes: int
    seconds: float
    cpu_s: float
    files: int
    file_bytes: int


def floor(dataset: Dataset, partitions: int, workdir: str) -> FloorResult:
    """pyarrow writing the already-decoded Arrow rows to Parquet (zstd, Iceberg's default
    codec), one file per partition; only the writes are timed."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    table = decoded_table(dataset, partitions)
    parts = [table.filter(pc.equal(table["_partition"], p)) for p in range(partitions)]
    out = Path(workdir)
    out.mkdir(parents=True, exist_ok=True)
    cpu0, t0 = time.process_time(), time.perf_counter()
    for p, rows in enumerate(parts):
        pq.write_table(rows, out / f"part-{p}.parquet", compression="zstd")
    seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    sizes = [f.stat().st_size for f in out.glob("*.parquet")]
    return FloorResult(table.num_rows, dataset.value_bytes, seconds, cpu, len(sizes), sum(sizes))


# -- the conversion path under cProfile ---------------------------------------------------


@dataclass(frozen=True)
class ConvertProfile:
    records: int
    records_s: float
    """Without the profiler, one core, after a warm-up batch."""
    top_self: list[tuple[str, float]]
    top_inclusive: list[tuple[str, float]]


def profile_convert(dataset: Dataset, limit: int, out_path: str) -> ConvertProfile:
    """Run Floe's converter (``by_schema_id`` + ``flatten``) over the dataset's records,
    first plain (records/s), then under cProfile; return the top frames by own time and
    Floe's frames by cumulative time, as % of the profiled total."""
    import cProfile
    import json
    import pstats

    from floe.protocol.records import Record
    from floe.registry.core.avro import AvroSchema
    from floe.registry.core.model import SchemaId
    from floe.tabletopic.convert import Converter, ConvertType, PartSpec, source_type
    from floe.tabletopic.convert import table_schema as make_table_schema
    from floe.types import PartitionId

    values = [v for _, v in zip(range(limit), read_values(dataset.path), strict=False)]
    records = [Record(i, TS_BASE_MS + i, None, v) for i, v in enumerate(values)]
    schema = AvroSchema(json.dumps(CLICKSTREAM))
    sid = SchemaId(dataset.schema_id)
    value = PartSpec(ConvertType.BY_SCHEMA_ID, lookup=lambda i: schema if i == sid else None)
    key = PartSpec(ConvertType.STRING)
    table = make_table_schema(source_type(value, schema), source_type(key), flatten=True)
    converter = Converter(table, value, key, flatten=True)
    batch = 10_000
    converter.convert(PartitionId(0), records[:batch])

    def run_all() -> None:
        for i in range(0, len(records), batch):
            converter.convert(PartitionId(0), records[i : i + batch])

    c0 = time.process_time()
    run_all()
    plain = time.process_time() - c0
    prof = cProfile.Profile()
    prof.runcall(run_all)
    prof.dump_stats(out_path)
    stats = pstats.Stats(prof)
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in raw.values()) or 1.0

    def name(key: tuple[str, int, str]) -> str:
        filename, line, func = key
        short = filename.split("site-packages/")[-1].split("/src/")[-1]
        return f"{func} ({short}:{line})"

    by_self = sorted(raw.items(), key=lambda kv: kv[1][2], reverse=True)[:12]
    floe = [kv for kv in raw.items() if "/floe/" in kv[0][0]]
    by_cum = sorted(floe, key=lambda kv: kv[1][3], reverse=True)[:10]
    return ConvertProfile(
        records=len(records),
        records_s=len(records) / plain if plain else 0.0,
        top_self=[(name(k), 100 * v[2] / total) for k, v in by_self],
        top_inclusive=[(name(k), 100 * v[3] / total) for k, v in by_cum],
    )
