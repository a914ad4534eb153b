"""Warm a Spark session by running a tiny real Iceberg job on it, in a scratch catalog.

Building the session loads Spark, not Iceberg: the first maintenance job after a start
would still load the Iceberg classes, plan its first Spark SQL, start its first tasks and
JIT the paths they take, several warm jobs' worth of time. This job takes those paths on
a throwaway table in a Hadoop catalog of its own under `<data_dir>/warmup` (never a user's
catalog): create, two appends, the compaction action (`lakewarden.spark.actions`, as the
compaction kind runs it), `expire_snapshots`, the snapshots metadata table, a read, drop.
`open_catalog` then builds a user's catalog the way a job does, and only lists it: its
client (the JDBC driver and connection, or the REST client) is ready for the first job.
"""

from __future__ import annotations

import logging
import shutil
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from lakewarden.catalogs.catalog import CatalogEntry, TableRef
from lakewarden.formats.iceberg.history import newest_rewrite
from lakewarden.settings import Settings
from lakewarden.spark.actions import rewrite_data_files
from lakewarden.spark.session import use_catalog
from lakewarden.spark.sql import procedure, table_arg, timestamp_literal

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

CATALOG = "lakewarden_warmup"
TABLE = TableRef("warmup", "tiny")
ROWS = 100


def warmup_dir(settings: Settings) -> Path:
    return settings.data_dir / "warmup"


def use_scratch_catalog(spark: SparkSession, where: Path) -> None:
    """The scratch catalog, set on the running session (Spark builds it on first use)."""
    prefix = f"spark.sql.catalog.{CATALOG}"
    spark.conf.set(prefix, "org.apache.iceberg.spark.SparkCatalog")
    spark.conf.set(f"{prefix}.type", "hadoop")
    spark.conf.set(f"{prefix}.warehouse", where.resolve().as_uri())
    spark.conf.set(f"{prefix}.cache-enabled", "false")  # as lakewarden's catalogs


def open_catalog(spark: SparkSession, entry: CatalogEntry) -> int:
    """Build `entry`'s Spark catalog as a job would (`use_catalog`) and list its top-level
    namespaces (read only: nothing is created or changed); returns how many."""
    use_catalog(spark, entry)
    return len(spark.sql(f"SHOW NAMESPACES IN `{entry.name}`").collect())


def run_warmup_job(spark: SparkSession, settings: Settings) -> dict[str, float | int]:
    """Run the warm-up job; returns what it did (rows read back, files before and after
    the rewrite, seconds). Leaves nothing behind: the table is dropped and its directory
    removed, also one a crashed earlier warm-up left."""
    started = time.perf_counter()
    where = warmup_dir(settings)
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True, exist_ok=True)
    use_scratch_catalog(spark, where)
    name = TABLE.spark_name(CATALOG)
    try:
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.{TABLE.namespace}")
        spark.sql(
            f"CREATE TABLE {name} (id BIGINT, region STRING) USING iceberg PARTITIONED BY (region)"
        )
        for start in (0, ROWS):  # two commits of small files: something to compact
            spark.range(start, start + ROWS, 1, 2).selectExpr(
                "id", "CASE WHEN id % 2 = 0 THEN 'a' ELSE 'b' END AS region"
            ).writeTo(name).append()
        metrics = rewrite_data_files(
            spark, CATALOG, TABLE, {"min-input-files": "2", "partial-progress.enabled": "false"}
        )
        newest_rewrite(spark, name)
        now = timestamp_literal(datetime.now(UTC))
        spark.sql(
            f"{procedure(CATALOG, 'expire_snapshots')}(table => {table_arg(CATALOG, TABLE)}, "
            f"older_than => {now}, retain_last => 1)"
        ).collect()
        rows = int(spark.table(name).count())
        spark.sql(f"DROP TABLE {name} PURGE")
    finally:
        shutil.rmtree(where, ignore_errors=True)
    result: dict[str, float | int] = {
        "rows": rows,
        "rewritten_data_files": int(metrics["rewritten_data_files"]),
        "added_data_files": int(metrics["added_data_files"]),
        "seconds": round(time.perf_counter() - started, 3),
    }
    log.info("Spark warm-up job: %s", result)
    return result
