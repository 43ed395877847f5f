"""Records/s of the table-topic converter on the clickstream Avro schema (not a test).

Run: ``.venv/bin/python -m benchmarks.convert_speed [N]``. Prints records/s for the
by_schema_id Avro path, with and without flatten, on one core: decoded per record
(``min_native_run=None``, the path before native decoding) and natively (the default),
in the same run, and the native/per-record ratio.
"""

from __future__ import annotations

import io
import json
import random
import sys
import time

import fastavro

from floe.protocol.records import Record
from floe.registry.core.avro import AvroSchema
from floe.registry.core.model import SchemaId
from floe.tabletopic.convert import Converter, ConvertType, PartSpec, source_type, table_schema
from floe.tabletopic.convert.converter import MIN_NATIVE_RUN
from floe.tabletopic.convert.wire import frame
from floe.types import PartitionId

CLICKSTREAM = {
    "type": "record",
    "name": "Click",
    "namespace": "floe.demo",
    "fields": [
        {"name": "user_id", "type": "string"},
        {"name": "session_id", "type": "string"},
        {"name": "page", "type": "string"},
        {"name": "referrer", "type": ["null", "string"], "default": None},
        {
            "name": "event_type",
            "type": {
                "type": "enum",
                "name": "Ev",
                "symbols": ["view", "click", "scroll", "purchase"],
            },
        },
        {"name": "device", "type": "string"},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}


def records(n: int) -> list[Record]:
    """``n`` framed clickstream records of about 150 bytes."""
    parsed = fastavro.parse_schema(CLICKSTREAM)
    rng = random.Random(7)
    out = []
    for i in range(n):
        buf = io.BytesIO()
        fastavro.schemaless_writer(
            buf,
            parsed,
            {
                "user_id": f"user-{rng.randrange(100_000):08d}-{rng.randrange(10**6):06d}",
                "session_id": f"{rng.getrandbits(128):032x}",
                "page": f"/products/c-{rng.randrange(50)}/item-{rng.randrange(10_000)}/details",
                "referrer": rng.choice([None, "https://www.example.com/search?q=shoes"]),
                "event_type": rng.choice(["view", "click", "scroll", "purchase"]),
                "device": rng.choice(
                    ["mobile-ios-17-iphone15", "mobile-android-14-pixel8", "desktop-chrome-126"]
                ),
                "ts": 1_700_000_000_000 + i,
            },
        )
        out.append(Record(i, 1_700_000_000_000 + i, f"user-{i}".encode(), frame(1, buf.getvalue())))
    return out


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    batch = 10_000
    data = records(n)
    size = sum(len(r.value or b"") for r in data) / n
    schema = AvroSchema(json.dumps(CLICKSTREAM))
    value = PartSpec(
        ConvertType.BY_SCHEMA_ID, lookup=lambda i: schema if i == SchemaId(1) else None
    )
    key = PartSpec(ConvertType.STRING)
    for flatten in (False, True):
        table = table_schema(source_type(value, schema), source_type(key), flatten=flatten)
        speed = {}
        for mode, min_run in (("per-record", None), ("native", MIN_NATIVE_RUN)):
            converter = Converter(table, value, key, flatten=flatten, min_native_run=min_run)
            converter.convert(PartitionId(0), data[:batch])  # warm the codec cache
            start = time.process_time()
            rows = 0
            for i in range(0, n, batch):
                result = converter.convert(PartitionId(0), data[i : i + batch])
                rows += result.batch.num_rows
            elapsed = time.process_time() - start
            speed[mode] = rows / elapsed
            print(
                f"flatten={flatten} {mode}: {rows} records of {size:.0f} B avg in "
                f"{elapsed:.2f} s CPU = {speed[mode]:,.0f} records/s"
            )
        print(f"flatten={flatten} native/per-record: {speed['native'] / speed['per-record']:.2f}x")


if __name__ == "__main__":
    main()
