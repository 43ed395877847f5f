"""Floe: a Kafka-compatible streaming platform whose topics become Apache Iceberg tables."""

__version__ = "0.1.0"
