"""Partition logs behind a Kafka-level storage interface (:mod:`.interface`)."""
