"""The JVM options every test JVM runs with, and the note the Java launcher prints
about them.

Every JVM the tests start (Spark drivers, the Hive Metastore, the Java Kafka clients)
compiles with C1 only and collects with the serial collector (``JDK_JAVA_OPTIONS``,
set by tests/conftest.py): a test JVM lives seconds to minutes on little data, where
C2's compilations are CPU spent for nothing. That halves the CPU of a Spark start and
a small job (13 s to 6 s on the 2-core machine) and behaves the same. Benchmarks never
run under pytest, so they measure JVMs as operators run them.
"""

from __future__ import annotations

OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
NOTE = "NOTE: Picked up JDK_JAVA_OPTIONS:"
"""How the Java launcher starts the line it prints on stderr when the variable is set."""


def without_note(stderr: str) -> str:
    """``stderr`` of a command that started a JVM, without the launcher's note about
    ``JDK_JAVA_OPTIONS`` (the tests' environment, not the command's output)."""
    return "".join(line for line in stderr.splitlines(True) if not line.startswith(NOTE))
