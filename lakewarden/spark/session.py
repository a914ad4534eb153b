"""The warm Spark session with the Iceberg catalog wired to lakewarden's catalog.

A session belongs to a format family (`jars.DEFAULT_FAMILY`, "iceberg"; "hudi"; "delta").
The Hudi family's adds Hudi's bundle, its session extension beside Iceberg's, its
`spark_catalog` (HoodieCatalog: Hudi's SQL and procedures want it, and `spark_catalog`
can hold one implementation only) and the Kryo serializer Hudi requires; the Delta
family's adds Delta's jars, its extension and its `spark_catalog` (DeltaCatalog). One JVM
has one classpath, so a family is a JVM of its own; the Iceberg family is launched exactly
as before.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit
from xml.sax.saxutils import escape

from lakewarden import object_store
from lakewarden.catalogs.catalog import CatalogEntry, default_entry, jdbc_params
from lakewarden.redact import is_secret_key
from lakewarden.settings import Settings
from lakewarden.spark import joblog
from lakewarden.spark.jars import DEFAULT_FAMILY, check_family, resolve_jars

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


_CATALOG = "spark.sql.catalog."
_HADOOP = "spark.hadoop."


def _is_secret(key: str) -> bool:
    """A setting that holds a credential (`redact.is_secret_key`: password, secret, token,
    access key, credential); of a catalog property, its name does not count."""
    if key.startswith(_CATALOG):
        _, dot, prop = key[len(_CATALOG) :].partition(".")
        return bool(dot) and is_secret_key(prop)
    return is_secret_key(key)


_ICEBERG_EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"

# What a family adds to the Iceberg session's settings (its jars come from `resolve_jars`).
FAMILY_CONF: dict[str, dict[str, str]] = {
    "hudi": {
        "spark.sql.extensions": (
            f"{_ICEBERG_EXTENSIONS},org.apache.spark.sql.hudi.HoodieSparkSessionExtension"
        ),
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.hudi.catalog.HoodieCatalog",
        "spark.serializer": "org.apache.spark.serializer.KryoSerializer",
        "spark.kryo.registrator": "org.apache.spark.HoodieSparkKryoRegistrar",
        # A table on S3 through Hadoop's S3A (jars.lock's `s3a` group), `s3://` too.
        "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
    },
    "delta": {
        "spark.sql.extensions": f"{_ICEBERG_EXTENSIONS},io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    },
}


def spark_conf(
    settings: Settings, control_plane_url: str, family: str = DEFAULT_FAMILY
) -> dict[str, str]:
    """Every Spark setting lakewarden launches the JVM with, as plain data (tested without a
    JVM). No secrets: PySpark passes each of these to spark-submit as `--conf key=value`,
    so they are on the JVM's world-readable /proc/<pid>/cmdline. `session_secrets` holds
    the rest, which `build_session` sets on the running session."""
    conf = _all_conf(settings, control_plane_url, family)
    return {k: v for k, v in conf.items() if not _is_secret(k)}


def session_secrets(settings: Settings, control_plane_url: str) -> dict[str, str]:
    """The credentials (the JDBC catalog's password, and any credential in
    LAKEWARDEN_SPARK_CONF: a catalog's, an `spark.hadoop.fs.s3a.secret.key`, ...), set once
    the JVM runs: see `set_secrets`."""
    return {k: v for k, v in _all_conf(settings, control_plane_url).items() if _is_secret(k)}


def set_secrets(spark: SparkSession, secrets: dict[str, str]) -> None:
    """Set credentials on the running session, where Spark reads each kind: a catalog reads
    its properties from the session's SQL conf when first used; `spark.hadoop.X` is `X` of
    the Hadoop configuration, which every file system (S3A, ...) copies when it is created
    (after this). A setting Spark reads only at launch cannot be set here: that is an error,
    never a fallback to the command line (it names the key, not the value)."""
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    for key, value in secrets.items():
        if key.startswith(_HADOOP):
            hadoop.set(key[len(_HADOOP) :], value)
            continue
        try:
            spark.conf.set(key, value)
        except Exception as exc:
            raise RuntimeError(
                f"Spark setting {key} looks like a credential, so lakewarden sets it on the "
                "running session rather than on the JVM's command line, but Spark refuses "
                f"to change it after launch ({type(exc).__name__}); set it in "
                "$SPARK_CONF_DIR/spark-defaults.conf instead"
            ) from None


def catalog_conf(entry: CatalogEntry) -> dict[str, str]:
    """The `spark.sql.catalog.<name>.*` settings of one catalog (secrets included: callers
    split them off with `_is_secret`). pyiceberg's catalog properties and Iceberg-Java's
    share their names (`uri`, `warehouse`, `credential`, `token`, `prefix`, `s3.*`, ...),
    so they pass through (a REST or Hive catalog's), with what Iceberg-Java needs for an S3
    warehouse besides (`object_store.spark_properties`); only a JDBC catalog's URL is
    translated."""
    cat = f"{_CATALOG}{entry.name}"
    props = entry.resolved
    props.update(object_store.spark_properties(props))
    conf = {
        cat: "org.apache.iceberg.spark.SparkCatalog",
        # Maintenance must plan against the table as it is now, not as a cached load from
        # an earlier job (writers commit all the time).
        f"{cat}.cache-enabled": "false",
    }
    if entry.type in ("rest", "hive"):
        # Iceberg's HiveCatalog: the metastore's thrift URI, the Hive 2.3.9 client of
        # Spark's own jars (Iceberg's runtime bundles the catalog, not the client).
        conf[f"{cat}.type"] = entry.type
        conf.update({f"{cat}.{k}": v for k, v in props.items()})
        return conf
    jdbc = jdbc_params(entry.jdbc_url or "")
    conf.update({f"{cat}.{k}": v for k, v in props.items() if k != "uri"})
    conf[f"{cat}.catalog-impl"] = "org.apache.iceberg.jdbc.JdbcCatalog"
    conf[f"{cat}.uri"] = jdbc.url
    conf[f"{cat}.jdbc.schema-version"] = "V1"
    if jdbc.user:
        conf[f"{cat}.jdbc.user"] = jdbc.user
    if jdbc.password:
        conf[f"{cat}.jdbc.password"] = jdbc.password
    return conf


def use_catalog(spark: SparkSession, entry: CatalogEntry) -> None:
    """Make a registered catalog usable by the running session. Spark builds a catalog from
    the session's SQL conf the first time a statement names it, so settings made now (the
    credentials too: never on a command line) are the ones it uses. A catalog Spark has
    already built keeps its settings until the session is rebuilt."""
    if spark.conf.get(f"{_CATALOG}{entry.name}", None) is not None:
        return
    for key, value in sorted(catalog_conf(entry).items(), key=lambda kv: kv[0].count(".")):
        spark.conf.set(key, value)


_LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")


def _on_loopback(master: str) -> bool:
    """A local master, or a standalone master on loopback (`spark://127.0.0.1:7077`)."""
    if master.startswith("local"):
        return True
    if not master.startswith("spark://"):
        return False
    # spark://host:port, or several masters (spark://h1:p1,h2:p2) for a standby master.
    hosts = [hp.rpartition(":")[0] or hp for hp in master[len("spark://") :].split(",")]
    return all(h in _LOOPBACK_HOSTS for h in hosts)


def _all_conf(
    settings: Settings, control_plane_url: str, family: str = DEFAULT_FAMILY
) -> dict[str, str]:
    check_family(family)
    conf = {
        "spark.master": settings.spark_master,
        "spark.app.name": "lakewarden",
        "spark.driver.memory": settings.spark_driver_memory,
        "spark.sql.extensions": _ICEBERG_EXTENSIONS,
        "spark.sql.shuffle.partitions": "4",
        "spark.ui.enabled": "true" if settings.spark_ui_enabled else "false",
        "spark.ui.showConsoleProgress": "false",
        # Timestamps in plans are UTC; so is every literal lakewarden builds.
        "spark.sql.session.timeZone": "UTC",
        # Several jobs share the scheduler's one session: each lakewarden pool is a Spark
        # pool (lakewarden.jobs.execute sets spark.scheduler.pool), and pools share the cores
        # fairly instead of the first job's tasks holding them all (FIFO).
        "spark.scheduler.mode": "FAIR",
        # What Spark masks in its UI and event log: its default pattern, plus the names
        # Iceberg's S3FileIO uses (`s3.access-key-id`) and credentials.
        "spark.redaction.regex": "(?i)secret|password|token|access[._-]?key|credential",
    }
    if settings.spark_ui_enabled:
        conf["spark.ui.port"] = str(settings.spark_ui_port)
    if settings.spark_event_log_dir:
        conf["spark.eventLog.enabled"] = "true"
        conf["spark.eventLog.dir"] = settings.spark_event_log_dir
        # In files of at most 128 MB (a directory eventlog_v2_<app id>): the warm session
        # lives as long as its scheduler, and a history server compacts rolled files
        # (spark.history.fs.eventLog.rolling.maxFilesToRetain) but not a single one.
        conf["spark.eventLog.rolling.enabled"] = "true"
    conf.update(catalog_conf(default_entry(settings, control_plane_url)))
    if _on_loopback(settings.spark_master):
        # Stay on loopback: a local driver, or one of a cluster on this machine's loopback
        # (whose executors connect back to it here), has no business on other interfaces.
        # A cluster elsewhere reaches the driver at its host name's address, Spark's
        # default, or at `spark.driver.host` in LAKEWARDEN_SPARK_CONF (applied below).
        conf["spark.driver.host"] = "127.0.0.1"
        conf["spark.driver.bindAddress"] = "127.0.0.1"
    conf.update(FAMILY_CONF.get(family, {}))
    jars = resolve_jars(settings, family)
    if jars.jars:
        conf["spark.jars"] = ",".join(jars.jars)
    if jars.packages:
        conf["spark.jars.packages"] = ",".join(jars.packages)
    conf.update(settings.spark_conf)
    return conf


def fair_pools_xml(pools: list[str]) -> str:
    """Spark's FAIR allocation file: every pool FAIR inside too, so two jobs of one pool
    share its cores rather than queue. A pool not listed (one named only by a policy) is
    made by Spark when first used, FIFO inside."""
    body = "".join(
        f'  <pool name="{escape(p, {chr(34): "&quot;"})}"><schedulingMode>FAIR</schedulingMode>'
        "<weight>1</weight><minShare>0</minShare></pool>\n"
        for p in pools
    )
    return f'<?xml version="1.0"?>\n<allocations>\n{body}</allocations>\n'


def write_fair_pools(settings: Settings) -> Path:
    """Write the allocation file of the known pools (`default` and those of pool_limits).

    Every application of a data dir starts here at once (five at a failover), and Spark
    parses the file while building its context: truncating it in place let one read it
    empty and die. So it is replaced whole (a temp file of this process, then a rename),
    and not at all when it already says the same."""
    path = settings.data_dir / "spark" / "fair-pools.xml"
    text = fair_pools_xml(sorted({"default", *settings.pool_limits, *settings.pool_capacity}))
    if path.exists() and path.read_text() == text:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path


def build_session(
    settings: Settings, control_plane_url: str, app_name: str, family: str = DEFAULT_FAMILY
) -> SparkSession:
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        # The api and worker images leave PySpark out; only where Spark runs needs it.
        raise ImportError(
            "PySpark is not installed: pip install 'lakewarden[spark]' where Spark runs "
            "(the scheduler, the demo)"
        ) from exc

    # Job groups and the pool (local properties) must follow Python threads: PySpark's
    # default since 3.2, forced, since with it off concurrent jobs would set each other's
    # (a py4j connection thread serves whichever Python thread calls).
    os.environ["PYSPARK_PIN_THREAD"] = "true"
    builder = SparkSession.builder
    conf = spark_conf(settings, control_plane_url, family)
    if "spark.scheduler.allocation.file" not in conf:
        conf["spark.scheduler.allocation.file"] = str(write_fair_pools(settings))
    for key, value in conf.items():
        builder = builder.config(key, value)
    _make_local_dir(conf.get("spark.eventLog.dir"))  # Spark refuses to start without it
    spark = builder.appName(app_name).getOrCreate()
    # Spark's own WARN/ERROR lines of each job, for its run's log tail (lakewarden.jobs.execute).
    joblog.install(spark, settings.data_dir / "spark" / "logs")
    # Only now, on the running session: never on spark-submit's command line. Set before
    # anything uses the catalog (building the session does not).
    set_secrets(spark, session_secrets(settings, control_plane_url))
    spark.sparkContext.setLogLevel("WARN")
    return spark


def _make_local_dir(location: str | None) -> None:
    """Create a directory on this host's file system (a path or a file: URI); a remote
    one (s3a://, hdfs://, ...) is the operator's to create."""
    if not location:
        return
    if location.startswith("file:"):
        location = urlsplit(location).path
    elif "://" in location:
        return
    Path(location).mkdir(parents=True, exist_ok=True)


def jvm_alive(spark: SparkSession) -> bool:
    """Whether the session's JVM still answers (it can die: OOM killer, crash, kill -9)."""
    try:
        spark.sparkContext._jvm.java.lang.System.currentTimeMillis()  # type: ignore[union-attr]
    except Exception:
        return False
    return True


def forget_dead_session() -> None:
    """Drop PySpark's process-wide handles to a dead JVM, so the next build launches a new
    one (PySpark keeps the gateway, context and session in class attributes)."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    SparkSession._instantiatedSession = None
    SparkSession._activeSession = None
    SparkContext._active_spark_context = None
    SparkContext._gateway = None
    SparkContext._jvm = None
