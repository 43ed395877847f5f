"""The Iceberg catalog, as one set of settings shared by Spark and pyiceberg.

Invariants (see shared FACTS on the embedded catalog):

* Spark and pyiceberg use the **same catalog name**, so a JDBC catalog's rows
  (``iceberg_tables``, ``iceberg_namespace_properties``, keyed by catalog name) are
  shared by both engines.
* With ``catalog.type = jdbc`` pyiceberg's ``SqlCatalog`` creates the catalog tables
  (:func:`bootstrap`, idempotent) and Spark never does (``jdbc.init-catalog-tables=false``):
  Iceberg's Java init leaves a SQLite transaction open when the tables already exist.
* The SQLite database runs in WAL mode with a busy timeout, so the broker's pyiceberg
  reads and Spark's commits do not fail on each other's locks.
* Spark's table cache is off (``cache-enabled=false``): another process may commit.
* Table files on S3 (``s3://``/``s3a://``) are reached by both engines with the same
  ``[catalog.s3]`` settings (:class:`S3Settings`): Spark through Hadoop S3A with
  Iceberg's ``HadoopFileIO`` (Iceberg's own ``S3FileIO`` needs AWS SDK v2 jars that Floe
  does not bundle), pyiceberg through its pyarrow S3 filesystem.

pyiceberg is imported lazily: importing this module costs nothing.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, quote, urlsplit

from floe.config import BrokerConfig
from floe.config import broker as keys
from floe.config.loader import mask_secrets
from floe.errors import ConfigError
from floe.tabletopic.model import COMMIT_ID_PROP, Recorded

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

log = logging.getLogger("floe.tabletopic.catalog")

SPARK_CATALOG_IMPL = "org.apache.iceberg.spark.SparkCatalog"
SQLITE_PARAMS = "journal_mode=WAL&busy_timeout=10000"
SQLITE_BUSY_TIMEOUT_S = 10

_SPARK_DEFAULTS = {"cache-enabled": "false"}
"""Catalog properties Floe sets for Spark unless the configuration overrides them."""

S3_SCHEMES = ("s3://", "s3a://")
HADOOP_FILE_IO = "org.apache.iceberg.hadoop.HadoopFileIO"
S3A_FILESYSTEM = "org.apache.hadoop.fs.s3a.S3AFileSystem"
S3A_STATIC_CREDENTIALS = "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"


@dataclass(frozen=True)
class S3Settings:
    """How to reach an S3-compatible object store; empty fields mean the AWS SDKs'
    defaults (AWS S3, the default region and credential chain).

    One value for every S3 client of the catalog: :meth:`hadoop_confs` for Spark's S3A,
    :meth:`fileio_properties` for pyiceberg (the Iceberg FileIO property names).

    Attributes:
        endpoint: the S3 API URL (``http://127.0.0.1:8333``); empty: AWS S3.
        region: the signing region.
        access_key_id: static credentials; empty: the default chain.
        secret_access_key: goes with ``access_key_id``.
        path_style_access: ``<endpoint>/<bucket>`` addressing.
    """

    endpoint: str = ""
    region: str = ""
    access_key_id: str = ""
    secret_access_key: str = field(default="", repr=False)
    path_style_access: bool = False

    @property
    def configured(self) -> bool:
        """Whether any field differs from the SDK defaults."""
        return self != S3Settings()

    def hadoop_confs(self) -> dict[str, str]:
        """``spark.hadoop.*`` confs for S3A, ``s3://`` paths included (so table
        locations written by pyiceberg or shown to DuckDB work in Spark unchanged)."""
        confs = {"fs.s3.impl": S3A_FILESYSTEM, "fs.s3a.impl": S3A_FILESYSTEM}
        if self.endpoint:
            confs["fs.s3a.endpoint"] = self.endpoint
            ssl = self.endpoint.startswith("https:")
            confs["fs.s3a.connection.ssl.enabled"] = "true" if ssl else "false"
        if self.region:
            confs["fs.s3a.endpoint.region"] = self.region
        if self.access_key_id:
            confs["fs.s3a.aws.credentials.provider"] = S3A_STATIC_CREDENTIALS
            confs["fs.s3a.access.key"] = self.access_key_id
            confs["fs.s3a.secret.key"] = self.secret_access_key
        if self.path_style_access:
            confs["fs.s3a.path.style.access"] = "true"
        return {f"spark.hadoop.{k}": v for k, v in confs.items()}

    def fileio_properties(self) -> dict[str, str]:
        """Iceberg FileIO properties (``s3.endpoint``, ...) for pyiceberg."""
        props = {
            "s3.endpoint": self.endpoint,
            "s3.region": self.region,
            "s3.access-key-id": self.access_key_id,
            "s3.secret-access-key": self.secret_access_key,
        }
        if self.path_style_access:
            props["s3.path-style-access"] = "true"
        return {k: v for k, v in props.items() if v}


@dataclass(frozen=True)
class CatalogSettings:
    """Where the Iceberg catalog is and how both engines reach it.

    Attributes:
        name: the catalog name in Spark SQL and pyiceberg.
        type: ``jdbc``, ``rest``, ``hive`` or ``hadoop``.
        uri: the resolved catalog URI (JDBC URL for ``jdbc``).
        warehouse: the resolved warehouse location.
        properties: Iceberg catalog properties for both engines (``[catalog.properties]``).
        spark_properties: properties for Spark only (``[catalog.spark]``).
        pyiceberg_properties: properties for pyiceberg only (``[catalog.pyiceberg]``).
        s3: the object store of ``s3://`` table files (``[catalog.s3]``).
    """

    name: str
    type: str
    uri: str
    warehouse: str
    properties: Mapping[str, str] = field(default_factory=dict)
    spark_properties: Mapping[str, str] = field(default_factory=dict)
    pyiceberg_properties: Mapping[str, str] = field(default_factory=dict)
    s3: S3Settings = field(default_factory=S3Settings)

    @classmethod
    def from_config(cls, config: BrokerConfig) -> CatalogSettings:
        """Resolve the ``[catalog]`` section; empty URI/warehouse get data-dir defaults."""
        data_dir = Path(config[keys.DATA_DIR]).resolve()
        kind = config[keys.CATALOG_TYPE]
        uri = config[keys.CATALOG_URI]
        warehouse = config[keys.CATALOG_WAREHOUSE]
        if not uri and kind == "jdbc":
            uri = f"jdbc:sqlite:{data_dir / 'catalog' / 'iceberg.db'}?{SQLITE_PARAMS}"
        if not warehouse and kind in ("jdbc", "hadoop"):
            warehouse = str(data_dir / "warehouse")
        return cls(
            name=config[keys.CATALOG_NAME],
            type=kind,
            uri=uri,
            warehouse=warehouse,
            properties=config.with_prefix("catalog.properties."),
            spark_properties=config.with_prefix("catalog.spark."),
            pyiceberg_properties=config.with_prefix("catalog.pyiceberg."),
            s3=S3Settings(
                endpoint=config[keys.CATALOG_S3_ENDPOINT],
                region=config[keys.CATALOG_S3_REGION],
                access_key_id=config[keys.CATALOG_S3_ACCESS_KEY_ID],
                secret_access_key=config[keys.CATALOG_S3_SECRET_ACCESS_KEY],
                path_style_access=config[keys.CATALOG_S3_PATH_STYLE_ACCESS],
            ),
        )

    @property
    def uses_s3(self) -> bool:
        """Whether table files live on S3: ``[catalog.s3]`` is set or the warehouse is an
        ``s3://``/``s3a://`` URL (a REST catalog may also hand out S3 locations with a
        warehouse that is only a name: set ``catalog.s3.*`` then)."""
        return self.s3.configured or self.warehouse.startswith(S3_SCHEMES)

    @property
    def sqlite_path(self) -> Path | None:
        """The SQLite database file of a ``jdbc:sqlite:`` catalog, else ``None``."""
        if self.type != "jdbc" or not self.uri.startswith("jdbc:sqlite:"):
            return None
        return Path(self.uri[len("jdbc:sqlite:") :].split("?", 1)[0])

    @property
    def local_to_broker(self) -> str | None:
        """Why brokers on other machines (or data dirs) cannot share this catalog: a
        SQLite file (the default ``jdbc`` catalog lives in each broker's data dir);
        ``None`` for a catalog served elsewhere (REST, Hive, a JDBC server)."""
        path = self.sqlite_path
        return None if path is None else f"its catalog is the SQLite file {path}"

    def spark_confs(self) -> dict[str, str]:
        """The ``spark.sql.catalog.<name>*`` confs for this catalog and, when its files
        live on S3, the Hadoop S3A confs with ``io-impl`` = ``HadoopFileIO``."""
        props: dict[str, str] = {"type": self.type, **_SPARK_DEFAULTS}
        if self.uses_s3:
            props["io-impl"] = HADOOP_FILE_IO
        if self.uri:
            props["uri"] = self.uri
        if self.warehouse:
            props["warehouse"] = self.warehouse
        if self.type == "jdbc":
            props["jdbc.init-catalog-tables"] = "false"  # pyiceberg creates them
        props.update(self.properties)
        props.update(self.spark_properties)
        prefix = f"spark.sql.catalog.{self.name}"
        out = self.s3.hadoop_confs() if self.uses_s3 else {}
        out[prefix] = SPARK_CATALOG_IMPL
        out.update({f"{prefix}.{k}": v for k, v in props.items()})
        return out

    def fileio_properties(self) -> dict[str, str]:
        """Iceberg FileIO properties (``s3.endpoint``, ...) for writing table files from
        Python (pyiceberg's FileIO in Spark's Python workers)."""
        return {
            **self.s3.fileio_properties(),
            **self.properties,
            **self.pyiceberg_properties,
        }

    def pyiceberg_catalog_properties(self) -> dict[str, str]:
        """Properties for ``pyiceberg.catalog.load_catalog(name, **props)``.

        Raises:
            ConfigError: pyiceberg cannot reach this catalog (``hadoop``), or a JDBC URL
                it cannot translate (set ``catalog.pyiceberg.uri`` then).
        """
        props: dict[str, str] = {}
        if self.type == "jdbc":
            props["type"] = "sql"
            props["uri"] = _sqlalchemy_url(self.uri, self.properties)
        elif self.type == "hadoop":
            raise ConfigError(
                "catalog.type = hadoop: pyiceberg has no Hadoop catalog; use jdbc or rest"
            )
        else:
            props["type"] = self.type
            if self.uri:
                props["uri"] = self.uri
        if self.warehouse:
            props["warehouse"] = self.warehouse
        props.update(self.fileio_properties())
        return props


def _sqlalchemy_url(jdbc_url: str, properties: Mapping[str, str]) -> str:
    """Translate the catalog's JDBC URL into the SQLAlchemy URL pyiceberg uses.

    ``jdbc:sqlite:/p/iceberg.db?...`` -> ``sqlite:////p/iceberg.db?timeout=10`` (the
    journal mode is set once in the file by :func:`bootstrap`);
    ``jdbc:postgresql://h:5432/db`` -> ``postgresql+psycopg://user:pw@h:5432/db`` with
    user and password from ``jdbc.user``/``jdbc.password`` or the URL's query.

    Raises:
        ConfigError: another JDBC database.
    """
    if jdbc_url.startswith("jdbc:sqlite:"):
        path = jdbc_url[len("jdbc:sqlite:") :].split("?", 1)[0]
        return f"sqlite:///{path}?timeout={SQLITE_BUSY_TIMEOUT_S}"
    if jdbc_url.startswith("jdbc:postgresql:"):
        parts = urlsplit(jdbc_url[len("jdbc:") :])
        query = dict(parse_qsl(parts.query))
        user = properties.get("jdbc.user", query.get("user", ""))
        password = properties.get("jdbc.password", query.get("password", ""))
        auth = quote(user, safe="") + (":" + quote(password, safe="") if password else "")
        return f"postgresql+psycopg://{auth + '@' if auth else ''}{parts.netloc}{parts.path}"
    raise ConfigError(
        f"catalog.uri {jdbc_url!r}: only jdbc:sqlite: and jdbc:postgresql: are translated "
        "for pyiceberg; set catalog.pyiceberg.uri to a SQLAlchemy URL"
    )


def _import_pyiceberg() -> Any:
    try:
        import pyiceberg.catalog
    except ImportError as exc:  # pragma: no cover - a dependency of floe
        raise ConfigError(f"table topics need pyiceberg: pip install floe ({exc})") from None
    return pyiceberg.catalog


def warn_if_not_shared(settings: CatalogSettings) -> None:
    """A broker of a cluster whose catalog is its own says so (a table topic whose
    rounds move to another broker would start its table over in that one's catalog)."""
    reason = settings.local_to_broker
    if reason is not None:
        log.warning(
            "tabletopic.catalog_not_shared reason=%s (every broker of a cluster must "
            "write the same catalog: a REST, Hive or PostgreSQL JDBC catalog; "
            "docs/table-topics.md)",
            reason,
        )


def load_catalog(settings: CatalogSettings) -> Catalog:
    """A pyiceberg catalog for these settings (a new client object per call).

    Raises:
        ConfigError: pyiceberg cannot reach this kind of catalog.
    """
    module = _import_pyiceberg()
    catalog: Catalog = module.load_catalog(settings.name, **settings.pyiceberg_catalog_properties())
    return catalog


PER_THREAD_TYPES = frozenset({"hive"})
"""Catalog kinds whose pyiceberg client must not be shared between threads: pyiceberg's
``HiveCatalog`` keeps one Thrift transport that each call reopens and closes, so two
threads at once close each other's socket or read each other's answers (and can wait
forever for one)."""


class SharedCatalog:
    """The process's pyiceberg catalog client, created on the first call (blocking:
    call it from a worker thread) and shared by the table-topic coordinators, the admin
    API and the metrics. Thread-safe: creation happens once, under a lock, and kinds
    whose client cannot be shared (:data:`PER_THREAD_TYPES`) get one client per thread
    (SQLAlchemy-backed and REST catalogs are safe to share). Nothing to clean up.
    """

    def __init__(self, settings: CatalogSettings) -> None:
        self.settings = settings
        self._catalog: Catalog | None = None
        self._lock = threading.Lock()
        self._per_thread = threading.local()

    def __call__(self) -> Catalog:
        if self.settings.type in PER_THREAD_TYPES:
            mine: Catalog | None = getattr(self._per_thread, "catalog", None)
            if mine is None:
                mine = self._per_thread.catalog = load_catalog(self.settings)
            return mine
        with self._lock:
            if self._catalog is None:
                self._catalog = bootstrap(self.settings) or load_catalog(self.settings)
            return self._catalog


def bootstrap(settings: CatalogSettings) -> Catalog | None:
    """Prepare the catalog at start; safe to call any number of times.

    For an embedded SQLite catalog: create its directory, switch the database to WAL,
    create the warehouse directory, and let pyiceberg's ``SqlCatalog`` create the
    catalog tables. For any JDBC catalog the tables are created here (Spark never
    creates them). Other kinds need no preparation and return ``None``.

    Raises:
        ConfigError: pyiceberg cannot translate the catalog settings.
        sqlite3.Error, sqlalchemy errors: the catalog database cannot be opened.
    """
    if settings.type != "jdbc":
        return None
    path = settings.sqlite_path
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with sqlite3.connect(path, timeout=SQLITE_BUSY_TIMEOUT_S) as db:
            db.execute("PRAGMA journal_mode=WAL")
        db.close()
        if settings.warehouse and "://" not in settings.warehouse:
            Path(settings.warehouse).mkdir(parents=True, exist_ok=True)
    catalog = load_catalog(settings)  # SqlCatalog creates the tables if missing
    log.info(
        "catalog.ready name=%s type=%s uri=%s",
        settings.name,
        settings.type,
        mask_secrets(settings.uri),
    )
    return catalog


def ensure_namespace(catalog: Catalog, namespace: str) -> None:
    """Create a namespace (``a`` or ``a.b``) unless it exists."""
    catalog.create_namespace_if_not_exists(namespace)


def load_table(catalog: Catalog, namespace: str, table: str) -> Table:
    """Load ``<namespace>.<table>``.

    Raises:
        pyiceberg.exceptions.NoSuchTableError: no such table.
    """
    return catalog.load_table((*namespace.split("."), table))


@dataclass(frozen=True)
class SnapshotInfo:
    """One snapshot's identity and summary, as plain data."""

    snapshot_id: int
    parent_id: int | None
    timestamp_ms: int
    operation: str
    summary: Mapping[str, str]


def snapshots(table: Table) -> Iterator[SnapshotInfo]:
    """The table's snapshots, newest first, walking parent links back from the current
    snapshot (so snapshots of other branches and expired ancestors are not visited).

    Tables written before Floe kept its state in table properties carry their offsets
    only in snapshot summaries: :func:`read_recorded` then takes the first snapshot
    whose summary has them (compaction or a user's DELETE may have committed after it).
    """
    snapshot = table.current_snapshot()
    while snapshot is not None:
        summary = snapshot.summary
        props: dict[str, str] = dict(summary.additional_properties) if summary else {}
        yield SnapshotInfo(
            snapshot_id=snapshot.snapshot_id,
            parent_id=snapshot.parent_snapshot_id,
            timestamp_ms=snapshot.timestamp_ms,
            operation=summary.operation.value if summary else "",
            summary=props,
        )
        if snapshot.parent_snapshot_id is None:
            return
        snapshot = table.snapshot_by_id(snapshot.parent_snapshot_id)


def read_recorded(table: Table) -> Recorded:
    """What ``table`` records about Floe's commits: its table properties, else (a table
    written before Floe kept them there) the newest snapshot summary carrying offsets.

    Raises:
        OffsetsMissingError: the table holds rows but no Floe offsets.
        StateError: a recorded value is unreadable.
    """
    current = table.current_snapshot()
    rows = 0
    if current is not None and current.summary is not None:
        try:
            rows = int(current.summary.additional_properties.get("total-records", "0"))
        except ValueError:
            rows = 1  # unknown: assume data
    history = ((info.summary, info.timestamp_ms) for info in snapshots(table))
    return Recorded.read(dict(table.properties), history, has_rows=rows > 0)


def summary_of_commit(table: Table, commit_id: str | None) -> Mapping[str, str]:
    """The snapshot summary of Floe commit ``commit_id`` (empty once it expired)."""
    if commit_id is not None:
        for info in snapshots(table):
            if info.summary.get(COMMIT_ID_PROP) == commit_id:
                return info.summary
    return {}
