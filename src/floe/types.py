"""Identifier types shared by every layer.

NewTypes keep offsets, partitions and names from being mixed up in public signatures;
they cost nothing at run time.
"""

from typing import NewType

TopicName = NewType("TopicName", str)
PartitionId = NewType("PartitionId", int)
Offset = NewType("Offset", int)
"""A Kafka offset: the position of a record in one partition's log."""
TimestampMs = NewType("TimestampMs", int)
"""Milliseconds since the Unix epoch, as Kafka carries them."""
NodeId = NewType("NodeId", int)
