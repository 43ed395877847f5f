"""The object-storage tests' SeaweedFS: :mod:`floe.testing.seaweed`, which the
benchmarks share (the implementation lives there)."""

from floe.testing.seaweed import SeaweedServer, seaweed_server, weed_binary

__all__ = ["SeaweedServer", "seaweed_server", "weed_binary"]
