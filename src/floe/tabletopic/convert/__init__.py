"""Conversion of table-topic records to Iceberg rows: pure, no Spark, no I/O.

- :mod:`.layout`: the row layout (versioned), table names, Iceberg -> Arrow types;
- :mod:`.avro`, :mod:`.json_schema`, :mod:`.protobuf`: registry schemas -> the
  source type tree (:mod:`.source`), payloads -> Arrow-ready Python values;
- :mod:`.converter`: records -> a ``pyarrow.RecordBatch`` plus typed conversion errors;
- :mod:`.avro_native`: Avro payloads of one schema -> one Arrow array in native code
  (the converter's bulk path, exactly equal to its per-record one);
- :mod:`.evolution`: current table schema + new source schema -> schema updates;
- :mod:`.wire`: the Confluent wire-format framing;
- :mod:`.temporal`: checked scaling of timestamps to Iceberg microseconds (no wrapping).

docs/table-topics-row-layout.md documents the layout and the type mapping.
"""

from floe.tabletopic.convert.converter import (
    ConversionError,
    ConversionResult,
    Converter,
    PartSpec,
    SchemaLookup,
    codec_for,
    source_type,
)
from floe.tabletopic.convert.evolution import (
    AddColumn,
    EvolutionPlan,
    Incompatible,
    MakeOptional,
    RenameColumn,
    SchemaUpdate,
    WidenType,
    plan_evolution,
)
from floe.tabletopic.convert.layout import (
    ROW_LAYOUT_VERSION,
    ConvertType,
    TimestampKind,
    arrow_schema,
    table_identifier,
    table_schema,
)
from floe.tabletopic.convert.source import UnsupportedSchemaError

__all__ = [
    "ROW_LAYOUT_VERSION",
    "AddColumn",
    "ConversionError",
    "ConversionResult",
    "ConvertType",
    "Converter",
    "EvolutionPlan",
    "Incompatible",
    "MakeOptional",
    "PartSpec",
    "RenameColumn",
    "SchemaLookup",
    "SchemaUpdate",
    "TimestampKind",
    "UnsupportedSchemaError",
    "WidenType",
    "arrow_schema",
    "codec_for",
    "plan_evolution",
    "source_type",
    "table_identifier",
    "table_schema",
]
