"""Iceberg's Java `rewriteDataFiles` action, driven over py4j.

Used instead of the SQL procedure because the action takes snapshot properties
(the commit carries the task id and attempt: see lakewarden.spark.commits) and a
typed filter expression (no SQL text to build for a partition filter).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from uuid import uuid4

from lakewarden.catalog import TableRef
from lakewarden.spark.commits import before_commit, commit_properties

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def load_java_table(spark: SparkSession, catalog: str, ref: TableRef) -> Any:
    jvm: Any = spark._jvm
    jspark: Any = spark._jsparkSession
    iceberg_catalog = jspark.sessionState().catalogManager().catalog(catalog).icebergCatalog()
    table = iceberg_catalog.loadTable(
        jvm.org.apache.iceberg.catalog.TableIdentifier.parse(ref.dotted)
    )
    table.refresh()  # the latest metadata, whatever a catalog cache holds
    return table


CODEC_PROPERTY = "write.parquet.compression-codec"
# What pyiceberg writes, and what Iceberg-Java has written into every table it created since
# 1.4. A table that names no codec (one pyiceberg created) would get Java's old fallback,
# gzip: about twice the CPU of zstd for the same files (benchmarks B4: rewrite throughput).
DEFAULT_CODEC = "zstd"


def settle_codec(table: Any) -> str | None:
    """Name the table's Parquet codec when it names none, so a rewrite writes what its
    writer wrote (zstd), not gzip. Returns the codec set, or None when the table chose
    one itself (its choice stands)."""
    if table.properties().containsKey(CODEC_PROPERTY):
        return None
    table.updateProperties().set(CODEC_PROPERTY, DEFAULT_CODEC).commit()
    return DEFAULT_CODEC


def rewrite_data_files(
    spark: SparkSession,
    catalog: str,
    ref: TableRef,
    options: dict[str, str],
    configure: Callable[[Any, Any, Any], Any] = lambda action, table, jvm: action.binPack(),
) -> dict[str, Any]:
    """Run the action; `configure(action, java_table, jvm)` picks the strategy and filter."""
    jvm: Any = spark._jvm
    table = load_java_table(spark, catalog, ref)
    codec_set = settle_codec(table)
    action = jvm.org.apache.iceberg.spark.actions.SparkActions.get(
        spark._jsparkSession
    ).rewriteDataFiles(table)
    action = configure(action, table, jvm)
    for key, value in options.items():
        action = action.option(key, str(value))
    for key, value in commit_properties().items():
        action = action.snapshotProperty(key, value)
    before_commit()
    result = action.execute()
    metrics: dict[str, Any] = {
        "rewritten_data_files": result.rewrittenDataFilesCount(),
        "added_data_files": result.addedDataFilesCount(),
        "rewritten_bytes": result.rewrittenBytesCount(),
        "failed_data_files": result.failedDataFilesCount(),
        "removed_delete_files": result.removedDeleteFilesCount(),
    }
    if codec_set:
        metrics["set_table_codec"] = codec_set
    committed = committed_by_this_job(table) if metrics["rewritten_data_files"] else None
    if committed is not None:
        metrics[COMMITTED] = committed
    return metrics


# The metrics key of the snapshot the action committed (a runner pops it into its result).
COMMITTED = "committed_snapshot_id"


def committed_by_this_job(table: Any, max_depth: int = 100) -> int | None:
    """The newest snapshot in the table's current ancestry that carries this job's commit
    properties (task id and attempt: lakewarden.spark.commits): what the job committed,
    read from the metadata the action's commit left on `table`, not by a Spark query of the
    snapshots table (a Spark job of its own, a few hundred ms for a tiny table). None outside
    a scheduled job, or when not found within `max_depth` snapshots."""
    props = commit_properties()
    if not props:
        return None
    snapshot = table.currentSnapshot()  # the table's operations refresh after a commit
    for _ in range(max_depth):
        if snapshot is None:
            return None
        summary = snapshot.summary()
        if all(summary.get(k) == v for k, v in props.items()):
            return int(snapshot.snapshotId())
        parent = snapshot.parentId()
        snapshot = table.snapshot(parent) if parent is not None else None
    return None


def storage_now(spark: SparkSession, catalog: str, ref: TableRef) -> datetime:
    """The clock of the table's storage: the modification time of a marker written next to
    its metadata now (then removed). File ages are judged against this, not against our own
    clock, so a storage or writer clock that lags ours cannot make live files look old."""
    jvm: Any = spark._jvm
    location = str(load_java_table(spark, catalog, ref).location()).rstrip("/")
    path = jvm.org.apache.hadoop.fs.Path(f"{location}/metadata/.lakewarden-clock-{uuid4().hex}")
    fs = path.getFileSystem(spark._jsc.hadoopConfiguration())
    fs.create(path, True).close()
    try:
        return datetime.fromtimestamp(fs.getFileStatus(path).getModificationTime() / 1000, UTC)
    finally:
        fs.delete(path, False)
