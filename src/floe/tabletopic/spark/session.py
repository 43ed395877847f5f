"""The process's one SparkSession, started lazily and never on the event loop.

Invariants:

* One SparkSession per process (PySpark allows one SparkContext per process). A
  :class:`SparkManager` owns it from the first :meth:`SparkManager.get_session` until
  :meth:`SparkManager.stop`; a second manager cannot start while one holds a session.
* Startup (a JVM launch, ~5 s) runs in a worker thread (``asyncio.to_thread``);
  concurrent callers wait for the same start.
* Every :meth:`SparkManager.session` hands out a live session: a driver that died (JVM
  killed, exited on OutOfMemoryError, SparkContext stopped) is found by a cheap check on
  each call (a ``waitpid`` on the JVM, one py4j call), discarded without talking to it
  (pyspark's class-level globals reset, never ``stop()`` on a dead JVM) and rebuilt once,
  under the manager's lock, with the same settings (``spark.driver_lost`` then
  ``spark.started``). Jobs in flight on the dead driver fail; callers retry.
* ``<data.dir>/spark/driver.pid`` holds the pid of the live driver JVM while there is one.
* Spark's own logs go to ``<data.dir>/spark/spark.log`` at WARN (a log4j2 properties
  file written there); scratch space is ``<data.dir>/spark/tmp``; the UI is off.
* Python workers run ``sys.executable`` (PYSPARK_PYTHON), so they see Floe's venv.
* A catalog whose files live on S3 gets Hadoop's S3A jars on ``spark.jars``, from
  ``<venv>/share/floe/jars`` (``make setup`` runs ``scripts/fetch-s3a-jars.sh``), unless
  ``spark.jars.packages`` brings its own.

pyspark is imported inside functions only: importing this module costs nothing.
"""

from __future__ import annotations

import asyncio
import importlib.resources
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from floe.config import BrokerConfig
from floe.config import broker as keys
from floe.errors import FloeError
from floe.tabletopic.catalog import CatalogSettings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("floe.tabletopic.spark")

ICEBERG_JAR_PACKAGE = "snowpark_connect_deps_iceberg"
ICEBERG_JAR_GLOB = "iceberg-spark-runtime-3.5_2.12-*.jar"
ICEBERG_EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
JDBC_JARS = (Path("/usr/share/java/sqlite-jdbc.jar"), Path("/usr/share/java/postgresql.jar"))
JNI_DIR = Path("/usr/lib/x86_64-linux-gnu/jni")
"""Where Debian's libxerial-sqlite-jdbc-jni puts the native SQLite library."""
S3A_JAR_DIR = Path(sys.prefix) / "share" / "floe" / "jars"
S3A_JARS = ("hadoop-aws-3.3.1.jar", "aws-java-sdk-bundle-1.11.901.jar")
"""Hadoop S3A for PySpark 3.5's Hadoop 3.3 client, put in :data:`S3A_JAR_DIR` by
``scripts/fetch-s3a-jars.sh`` (taken from the PyPI sdist of sagemaker-pyspark 1.4.5)."""

MIN_JAVA = 17

LOG4J2_TEMPLATE = """\
# Written by Floe at each Spark start: Spark logs go to a file, WARN and above.
status = error
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log_file}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{ISO8601}} %p %c{{1}}: %m%n%ex
rootLogger.level = warn
rootLogger.appenderRef.file.ref = file
logger.jetty.name = org.sparkproject.jetty
logger.jetty.level = error
logger.nativecode.name = org.apache.hadoop.util.NativeCodeLoader
logger.nativecode.level = error
"""


class SparkUnavailableError(FloeError):
    """Spark cannot start here (no Java 17, missing jar); the message says how to fix it."""


@dataclass(frozen=True)
class SparkSettings:
    """Everything the SparkSession is built from.

    Attributes:
        master: ``spark.master`` (``local[2]``, ``spark://...``).
        driver_memory: ``spark.driver.memory`` (``1g``).
        jars_packages: Maven coordinates; empty means the bundled Iceberg runtime jar.
        work_dir: ``<data.dir>/spark``: logs, log4j2 config, scratch space.
        catalog: the Iceberg catalog Spark registers (same name as pyiceberg's).
        extra_confs: passthrough ``spark.*`` confs from ``floe.toml``; they win.
        namespace: ``table.topic.namespace``, the session's current namespace.
    """

    master: str
    driver_memory: str
    jars_packages: str
    work_dir: Path
    catalog: CatalogSettings
    extra_confs: Mapping[str, str] = field(default_factory=dict)
    namespace: str = "default"

    @classmethod
    def from_config(cls, config: BrokerConfig) -> SparkSettings:
        extra = {k: v for k, v in config.passthrough.items() if k.startswith("spark.")}
        return cls(
            master=config[keys.SPARK_MASTER],
            driver_memory=config[keys.SPARK_DRIVER_MEMORY],
            jars_packages=config[keys.SPARK_JARS_PACKAGES],
            work_dir=Path(config[keys.DATA_DIR]).resolve() / "spark",
            catalog=CatalogSettings.from_config(config),
            extra_confs=extra,
            namespace=config[keys.TABLE_TOPIC_NAMESPACE],
        )

    @property
    def log_file(self) -> Path:
        return self.work_dir / "spark.log"

    def confs(self) -> dict[str, str]:
        """Every Spark conf Floe sets (also usable to build a ``spark-submit`` line).

        Raises:
            SparkUnavailableError: ``spark.jars.packages`` is empty and the bundled
                Iceberg jar is missing, or the catalog is on S3 and the S3A jars are.
        """
        jars = [str(p) for p in JDBC_JARS if p.exists()]
        out: dict[str, str] = {}
        if self.jars_packages:
            out["spark.jars.packages"] = self.jars_packages
        else:
            jars.insert(0, str(iceberg_runtime_jar()))
            if self.catalog.uses_s3:
                jars.extend(str(p) for p in s3a_jars())
        # a JVM that ran out of memory exits (and is rebuilt) instead of limping on with
        # dead scheduler threads that no liveness check can see
        java_opts = (
            f"-Dlog4j.configurationFile=file:{self.work_dir / 'log4j2.properties'} "
            f"-Djava.library.path={JNI_DIR} -XX:+ExitOnOutOfMemoryError"
        )
        out.update(
            {
                "spark.master": self.master,
                "spark.app.name": "floe",
                "spark.driver.memory": self.driver_memory,
                "spark.jars": ",".join(jars),
                "spark.driver.extraJavaOptions": java_opts,
                "spark.sql.extensions": ICEBERG_EXTENSIONS,
                "spark.ui.enabled": "false",
                "spark.ui.showConsoleProgress": "false",
                "spark.local.dir": str(self.work_dir / "tmp"),
                "spark.sql.warehouse.dir": str(self.work_dir / "spark-warehouse"),
                "spark.sql.session.timeZone": "UTC",
                "spark.pyspark.python": sys.executable,
                "spark.pyspark.driver.python": sys.executable,
            }
        )
        if self.master.startswith("local"):
            out["spark.driver.host"] = "127.0.0.1"
            out["spark.driver.bindAddress"] = "127.0.0.1"
        out.update(self.catalog.spark_confs())
        # Floe's catalog and table namespace are the session's: `clicks`,
        # `default.clicks` and `SHOW TABLES IN default` name the table topics' tables, as
        # `floe.default.clicks` does
        out["spark.sql.defaultCatalog"] = self.catalog.name
        out[f"spark.sql.catalog.{self.catalog.name}.default-namespace"] = self.namespace
        if self.catalog.uses_s3:  # S3A's upload buffers, else /tmp/hadoop-<user>/s3a
            out["spark.hadoop.fs.s3a.buffer.dir"] = str(self.work_dir / "tmp" / "s3a")
        out.update(self.extra_confs)
        return out


DRIVER_PID_FILE = "driver.pid"
"""In ``<data.dir>/spark``: the pid of the Spark driver JVM this data dir's broker runs."""
REAP_WAIT_S = 10.0


def reap_previous_driver(work_dir: Path) -> int | None:
    """Kill the Spark driver JVM of a previous broker on this data dir if it still runs;
    returns its pid when one was killed. Blocks up to :data:`REAP_WAIT_S`.

    After ``kill -9`` of ``floe up`` its JVM (a child) outlives it for a second or two
    until it notices its stdin closed; a JVM caught in an Iceberg commit could commit
    after the new broker read the committed offsets back, and the round would then be
    written twice. The manager calls this before any coordinator reads the table. A pid
    is only killed when its command line names ``work_dir`` (a reused pid is left alone).
    """
    pid_file = work_dir / DRIVER_PID_FILE
    try:
        pid = int(pid_file.read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return None
    if str(work_dir).encode() not in cmdline:
        return None
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return None
    deadline = time.monotonic() + REAP_WAIT_S
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        if _zombie(pid):  # dead, waiting for its new parent (init) to reap it
            break
        time.sleep(0.05)
    log.warning("spark.reaped_previous_driver pid=%d (left running by a killed broker)", pid)
    return pid


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def driver_proc(session: SparkSession) -> subprocess.Popen[bytes] | None:
    """The driver JVM that py4j launched for ``session`` (``None``: a gateway it did not
    launch, e.g. ``PYSPARK_GATEWAY_PORT``)."""
    proc: subprocess.Popen[bytes] | None = getattr(session.sparkContext._gateway, "proc", None)
    return proc


def activate(session: SparkSession) -> None:
    """Make ``session`` the active one of the calling thread's JVM thread (py4j pins one
    to each Python thread). A thread without one resolves catalogs against an empty
    configuration: ``Spark3Util.loadIcebergTable`` then took ``floe.default.t`` for a
    namespace of ``spark_catalog`` (REQUIRES_SINGLE_PART_NAMESPACE) in a worker thread
    that had run no DataFrame call before."""
    jvm = session._jvm
    assert jvm is not None  # a live session
    jvm.org.apache.spark.sql.SparkSession.setActiveSession(session._jsparkSession)


def driver_lost_reason(session: SparkSession) -> str | None:
    """Why ``session`` can no longer run jobs, or ``None`` while it can: ``exited:<code>``
    (the JVM is gone: ``-9`` killed, ``3`` out of memory), ``context_stopped`` or
    ``gateway_error:<exception>`` (py4j cannot reach the JVM).

    Cheap enough for every :meth:`SparkManager.session`: a ``waitpid`` on the JVM, then,
    while it runs, one py4j call.
    """
    from py4j.protocol import Py4JError

    proc = driver_proc(session)
    if proc is not None and (code := proc.poll()) is not None:
        return f"exited:{code}"
    jsc = session.sparkContext._jsc
    if jsc is None:  # pyspark's mark of a stopped SparkContext
        return "context_stopped"
    try:
        stopped = bool(jsc.sc().isStopped())
    except Py4JError as exc:
        return f"gateway_error:{type(exc).__name__}"
    return "context_stopped" if stopped else None


def forget_session(session: SparkSession) -> None:
    """Make pyspark forget ``session`` and its JVM, so that the next ``getOrCreate()``
    launches a new JVM. Never calls into that JVM: kill it first if it still runs.

    pyspark keeps the context, its py4j gateway and the session in class-level globals;
    ``SparkSession.stop()`` clears them only after py4j calls that raise (or hang)
    against a dead JVM. The Python side of the old gateway (its callback server thread)
    is shut down only when its JVM is known to be dead, so that no call can hang on it.
    """
    from pyspark import SparkContext
    from pyspark.sql import SparkSession, SQLContext

    sc = session.sparkContext
    gateway = sc._gateway
    sc._jsc = None
    with SparkContext._lock:
        SparkContext._gateway = None
        SparkContext._jvm = None
        SparkContext._active_spark_context = None
    SparkSession._instantiatedSession = None
    SparkSession._activeSession = None
    SQLContext._instantiatedContext = None
    server = getattr(sc, "_accumulatorServer", None)  # a thread fed by the JVM
    if server is not None:
        server.shutdown()  # pyspark's override: also stops its handler loop and closes
        sc._accumulatorServer = None  # type: ignore[assignment]
    proc = getattr(gateway, "proc", None)
    if gateway is not None and proc is not None and proc.poll() is not None:
        gateway.shutdown()  # its JVM end is gone: fails fast, logged by py4j


def iceberg_runtime_jar() -> Path:
    """The Iceberg Spark runtime jar (Scala 2.12) inside ``snowpark-connect-deps-iceberg``.

    Raises:
        SparkUnavailableError: the package or jar is missing.
    """
    try:
        jars = importlib.resources.files(ICEBERG_JAR_PACKAGE) / "jars"
        found = sorted(Path(str(p)) for p in jars.iterdir() if Path(p.name).match(ICEBERG_JAR_GLOB))
    except (ModuleNotFoundError, FileNotFoundError):
        found = []
    if not found:
        raise SparkUnavailableError(
            f"no {ICEBERG_JAR_GLOB} in the {ICEBERG_JAR_PACKAGE} package: "
            "install snowpark-connect-deps-iceberg==1.0.2 or set spark.jars.packages"
        )
    return found[-1]


def s3a_jars() -> list[Path]:
    """The S3A jars in :data:`S3A_JAR_DIR`.

    Raises:
        SparkUnavailableError: one is missing.
    """
    jars = [S3A_JAR_DIR / name for name in S3A_JARS]
    missing = [p.name for p in jars if not p.exists()]
    if missing:
        raise SparkUnavailableError(
            f"the catalog's files are on S3 but {', '.join(missing)} is not in {S3A_JAR_DIR}: "
            "run `make setup` (scripts/fetch-s3a-jars.sh) or set spark.jars.packages"
        )
    return jars


def java_major_version() -> int | None:
    """The major version of ``java`` on PATH (or in ``JAVA_HOME``), ``None`` if absent."""
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java or not Path(java).exists():
        return None
    try:
        out = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=30, check=False
        ).stderr
    except OSError:
        return None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if not match:
        return None
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major  # "1.8" -> 8


def check_java() -> None:
    """Raises:
    SparkUnavailableError: no Java, or older than 17 (one line, with the fix).
    """
    major = java_major_version()
    if major is None or major < MIN_JAVA:
        found = "no java found" if major is None else f"found Java {major}"
        raise SparkUnavailableError(
            f"table topics need Java {MIN_JAVA} for Spark ({found}): install "
            "openjdk-17-jre-headless (scripts/ensure-system-deps.sh runtime) or set JAVA_HOME"
        )


class SparkManager:
    """Owns the process's one SparkSession: lazy start off the event loop, rebuild after
    the driver died, and stop.

    Lifecycle: created by the composition root with :class:`SparkSettings`; the first
    :meth:`get_session` (async) or :meth:`session` (blocking, from a worker thread)
    starts Spark; a later call that finds the driver dead discards it and starts a new
    one; :meth:`stop` stops it (at shutdown). A lock serializes start, liveness check,
    rebuild and stop; the session itself is thread-safe for submitting jobs.
    """

    _owner: SparkManager | None = None  # the manager holding this process's session
    _owner_lock = threading.Lock()

    def __init__(self, settings: SparkSettings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._session: SparkSession | None = None
        self._stopped = False  # by stop(): no session starts after it
        self.start_seconds: float | None = None

    @classmethod
    def from_config(cls, config: BrokerConfig) -> SparkManager:
        return cls(SparkSettings.from_config(config))

    @property
    def started(self) -> bool:
        return self._session is not None

    async def get_session(self) -> SparkSession:
        """A live SparkSession, started (or rebuilt) in a worker thread when needed; the
        liveness check is a py4j call, so even the fast path leaves the event loop.

        Raises:
            SparkUnavailableError: Java or the Iceberg jar is missing, or another manager
                owns this process's session.
        """
        return await asyncio.to_thread(self.session)

    def session(self) -> SparkSession:
        """A live SparkSession: started on first use, rebuilt if its driver died since
        the last call. Blocks for seconds then: never call it on the event loop (use
        :meth:`get_session`).

        Raises:
            SparkUnavailableError: see :meth:`get_session`; or Spark was stopped (a call
                racing the shutdown launches no new driver).
        """
        with self._lock:
            if self._stopped:
                raise SparkUnavailableError("Spark is stopped (the broker is shutting down)")
            if self._session is not None:
                reason = driver_lost_reason(self._session)
                if reason is not None:
                    dead, self._session = self._session, None
                    self._discard(dead, reason)
            if self._session is None:
                self._session = self._start()
            activate(self._session)
            return self._session

    def _discard(self, session: SparkSession, reason: str) -> None:
        """Drop a dead session: kill its JVM if it still runs (a stopped context, or a
        JVM py4j cannot reach), then :func:`forget_session`. Blocks up to
        :data:`REAP_WAIT_S`; never calls into the JVM."""
        proc = driver_proc(session)
        log.warning("spark.driver_lost pid=%s reason=%s", proc.pid if proc else "unknown", reason)
        if proc is not None and proc.poll() is None:
            proc.kill()
            try:
                proc.wait(REAP_WAIT_S)
            except subprocess.TimeoutExpired:
                log.warning("spark.driver_kill_timeout pid=%d", proc.pid)
        forget_session(session)
        (self.settings.work_dir / DRIVER_PID_FILE).unlink(missing_ok=True)

    def _start(self) -> SparkSession:
        with SparkManager._owner_lock:
            if SparkManager._owner is not None and SparkManager._owner is not self:
                raise SparkUnavailableError("another SparkManager owns this process's Spark")
            SparkManager._owner = self
        try:
            return self._launch()
        except BaseException:
            with SparkManager._owner_lock:
                SparkManager._owner = None
            raise

    def _launch(self) -> SparkSession:
        check_java()
        settings = self.settings
        confs = settings.confs()
        work = settings.work_dir
        (work / "tmp").mkdir(parents=True, exist_ok=True)
        (work / "log4j2.properties").write_text(LOG4J2_TEMPLATE.format(log_file=settings.log_file))
        # Python workers (mapInArrow, UDFs) must run this interpreter, i.e. Floe's venv
        os.environ["PYSPARK_PYTHON"] = sys.executable
        os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
        if settings.master.startswith("local"):  # no "hostname resolves to loopback" warning
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        try:
            from pyspark.sql import SparkSession
        except ImportError as exc:  # pragma: no cover - a dependency of floe
            raise SparkUnavailableError(f"table topics need pyspark==3.5.7 ({exc})") from None

        started = time.monotonic()
        builder = SparkSession.builder
        for name, value in confs.items():
            builder = builder.config(name, value)
        session = builder.getOrCreate()
        session.sparkContext.setLogLevel("WARN")
        proc = driver_proc(session)
        if proc is not None:
            (work / DRIVER_PID_FILE).write_text(f"{proc.pid}\n")
        self.start_seconds = time.monotonic() - started
        log.info(
            "spark.started master=%s driver_memory=%s seconds=%.1f log=%s",
            settings.master,
            settings.driver_memory,
            self.start_seconds,
            settings.log_file,
        )
        return session

    async def stop(self) -> None:
        """Stop Spark if it was started or is starting (in a worker thread, once the
        start ended); idempotent. No session starts after it."""
        self._stopped = True
        await asyncio.to_thread(self.stop_sync)

    def stop_sync(self) -> None:
        """Blocking :meth:`stop`. A dead driver is discarded instead (no exception, no
        call into its JVM)."""
        from py4j.protocol import Py4JError

        with self._lock:
            self._stopped = True
            session, self._session = self._session, None
            if session is None:
                return
            try:
                reason = driver_lost_reason(session)
                if reason is None:
                    try:
                        session.stop()
                    except Py4JError as exc:  # died just now
                        reason = f"gateway_error:{type(exc).__name__}"
                if reason is not None:
                    self._discard(session, reason)
                (self.settings.work_dir / DRIVER_PID_FILE).unlink(missing_ok=True)
                log.info("spark.stopped")
            finally:
                with SparkManager._owner_lock:
                    if SparkManager._owner is self:
                        SparkManager._owner = None
