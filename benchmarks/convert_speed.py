"""Records/s of the table-topic converter on the clickstream event (not a test).

Run: ``.venv/bin/python -m benchmarks.convert_speed [N]``. For each value format (Avro,
JSON Schema, Protobuf; ``by_schema_id``), with and without flatten, on one core, prints
records/s decoded per record (``min_native_run=None``, the path before bulk decoding)
and in bulk (the default), in the same run, and the bulk/per-record ratio.
"""

from __future__ import annotations

import json
import random
import sys
import time

from benchmarks.clickstream import (
    AVRO,
    CLICKSTREAM,
    CLICKSTREAM_JSON_SCHEMA,
    CLICKSTREAM_PROTO,
    JSON,
    PROTOBUF,
    click,
    encoder,
)
from floe.protocol.records import Record
from floe.registry.core.avro import AvroSchema
from floe.registry.core.json_schema import JsonSchema
from floe.registry.core.model import SchemaId
from floe.registry.core.protobuf import ProtobufSchema
from floe.registry.core.schemas import ParsedSchema
from floe.tabletopic.convert import Converter, ConvertType, PartSpec, source_type, table_schema
from floe.tabletopic.convert.converter import MIN_NATIVE_RUN
from floe.tabletopic.convert.wire import frame
from floe.types import PartitionId

BASE_MS = 1_700_000_000_000
SCHEMAS: dict[str, ParsedSchema] = {
    AVRO: AvroSchema(json.dumps(CLICKSTREAM)),
    JSON: JsonSchema(json.dumps(CLICKSTREAM_JSON_SCHEMA)),
    PROTOBUF: ProtobufSchema(CLICKSTREAM_PROTO),
}


def records(n: int, fmt: str) -> list[Record]:
    """``n`` framed clickstream records of ``fmt`` (schema id 1)."""
    encode = encoder(fmt)
    indexes = (0,) if fmt == PROTOBUF else None
    rng = random.Random(7)
    return [
        Record(
            i, BASE_MS + i, f"user-{i}".encode(), frame(1, encode(click(rng, i, BASE_MS)), indexes)
        )
        for i in range(n)
    ]


def measure(n: int, *, flattens: tuple[bool, ...] = (False, True)) -> dict[str, float]:
    """Records/s (CPU time, this process) of ``n`` records of each format, per record and
    in bulk: keys ``<fmt>[_flatten]_<per_record|bulk>``."""
    batch = 10_000
    key = PartSpec(ConvertType.STRING)
    speeds: dict[str, float] = {}
    for fmt, schema in SCHEMAS.items():
        data = records(n, fmt)
        value = PartSpec(ConvertType.BY_SCHEMA_ID, lookup={SchemaId(1): schema}.get)
        for flatten in flattens:
            table = table_schema(source_type(value, schema), source_type(key), flatten=flatten)
            for mode, min_run in (("per_record", None), ("bulk", MIN_NATIVE_RUN)):
                converter = Converter(table, value, key, flatten=flatten, min_native_run=min_run)
                converter.convert(PartitionId(0), data[:batch])  # warm the codec cache
                start = time.process_time()
                rows = 0
                for i in range(0, n, batch):
                    rows += converter.convert(PartitionId(0), data[i : i + batch]).batch.num_rows
                name = f"{fmt}_flatten" if flatten else fmt
                speeds[f"{name}_{mode}"] = rows / (time.process_time() - start)
    return speeds


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    speeds = measure(n)
    for fmt in SCHEMAS:
        for name in (fmt, f"{fmt}_flatten"):
            per_record, bulk = speeds[f"{name}_per_record"], speeds[f"{name}_bulk"]
            print(
                f"{name}: per record {per_record:,.0f} records/s, bulk {bulk:,.0f} records/s, "
                f"bulk/per-record {bulk / per_record:.2f}x"
            )


if __name__ == "__main__":
    main()
