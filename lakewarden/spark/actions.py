"""Iceberg's Java `rewriteDataFiles` action, driven over py4j.

Used instead of the SQL procedure because the action takes snapshot properties
(the commit carries the task id and attempt: see lakewarden.spark.commits), a typed
filter expression (no SQL text to build for a partition filter) and a branch to plan from
and commit to (a named branch's compaction, and a validated rewrite's staging branch:
lakewarden.spark.staging).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from uuid import uuid4

from lakewarden import object_store
from lakewarden.catalogs.catalog import TableRef
from lakewarden.formats.iceberg import finder, history
from lakewarden.outcomes import PlanRejected, RewriteFailed
from lakewarden.policy.model import MAIN_BRANCH
from lakewarden.spark import staging
from lakewarden.spark.binpack import BinPacked, Observed, run_binpack
from lakewarden.spark.commits import before_commit, commit_properties
from lakewarden.spark.validation import (
    max_rows,
    observed_columns,
    validate_rewrite,
    will_validate,
)

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
LEVEL_PROPERTY = "write.parquet.compression-level"
# What pyiceberg writes (pyarrow's zstd at its default level, 1), and what Iceberg-Java has
# written into every table it created since 1.4 (zstd, at parquet-mr's level 3). A table
# that names no codec (one pyiceberg created) would get Java's old fallback, gzip: about
# twice the CPU of zstd for the same files (benchmarks B4: rewrite throughput).
DEFAULT_CODEC = "zstd"
PYARROW_ZSTD_LEVEL = "1"


def settle_codec(table: Any) -> dict[str, str]:
    """Name the table's Parquet codec when it names none, so a rewrite writes what its
    writer wrote: zstd, and at pyarrow's level 1 unless the table names a level (Java's
    level 3 cost a 60 MB compaction 1.2-1.7x the CPU for files 5% smaller: docs/performance.md,
    issue 30). Returns the properties set: none when the table chose its codec itself (its
    choice stands)."""
    properties = table.properties()
    if properties.containsKey(CODEC_PROPERTY):
        return {}
    settled = {CODEC_PROPERTY: DEFAULT_CODEC}
    if not properties.containsKey(LEVEL_PROPERTY):
        settled[LEVEL_PROPERTY] = PYARROW_ZSTD_LEVEL
    update = table.updateProperties()
    for key, value in settled.items():
        update = update.set(key, value)
    update.commit()
    return settled


def rewrite_data_files(
    spark: SparkSession,
    catalog: str,
    ref: TableRef,
    options: dict[str, str],
    configure: Callable[[Any, Any, Any], Any] = lambda action, table, jvm: action.binPack(),
    branch: str = MAIN_BRANCH,
    binpack: bool = False,
    native: bool = True,
) -> dict[str, Any]:
    """Run the action on `branch` (planned from its head, committed to it; other branches
    untouched); `configure(action, java_table, jvm)` picks the strategy and filter. A
    validated rewrite commits to a staging branch and reaches `branch` only once validation
    passed (lakewarden.spark.staging). `binpack`: `configure` picks a plain bin-pack (no
    filter), which a validated rewrite runs through lakewarden.spark.binpack instead, its
    inputs checksummed as it reads them, and its groups rewritten by pyarrow where each
    qualifies (`native`: lakewarden.spark.arrow_rewrite)."""
    jvm: Any = spark._jvm
    table = load_java_table(spark, catalog, ref)
    if branch != MAIN_BRANCH and (
        table.refs().get(branch) is None or not table.refs().get(branch).isBranch()
    ):
        raise PlanRejected(f"the table has no branch {branch!r}")
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
    start = table.snapshot(branch)
    start_id = int(start.snapshotId()) if start is not None else None
    clock = Phases()
    with clock("stage"):
        stage = staging.open_stage(table, branch) if will_validate() else None
    try:
        if stage is not None or branch != MAIN_BRANCH:
            action = action.toBranch(stage.name if stage is not None else branch)
        observed: Observed | None = None
        said: dict[str, Any] = {}  # the engine, when lakewarden's runner planned the groups
        with clock("rewrite"):
            ran = (
                _binpack(
                    spark,
                    table,
                    stage.name if stage is not None else branch,
                    start_id,
                    options,
                    native,
                    said,
                )
                if binpack and start_id is not None
                else None
            )
            if ran is not None:
                result, observed = ran.result, ran.observed
            else:
                result = action.execute()
        metrics: dict[str, Any] = {
            "rewritten_data_files": result.rewrittenDataFilesCount(),
            "added_data_files": result.addedDataFilesCount(),
            "rewritten_bytes": result.rewrittenBytesCount(),
            "removed_delete_files": result.removedDeleteFilesCount(),
            **failures_of(result),
        }
        if ran is not None and ran.engine is not None:
            metrics["engine"] = ran.engine
        elif binpack:
            metrics["engine"] = {
                "engine": "spark",
                "reason": "Iceberg's rewriteDataFiles action"
                + (f": {said['reason']}" if said.get("reason") else _action_ran(start_id)),
            }
        if ran is not None and ran.first_error:
            metrics[FIRST_ERROR] = ran.first_error
        if branch != MAIN_BRANCH:
            metrics["branch"] = branch
        if codec_set:
            metrics["set_table_codec"] = codec_set[CODEC_PROPERTY]
            if LEVEL_PROPERTY in codec_set:
                metrics["set_table_codec_level"] = int(codec_set[LEVEL_PROPERTY])
        if metrics["failed_groups"] and not metrics["rewritten_groups"]:
            raise RewriteFailed(progress(metrics), metrics)
        # Rows before and after, per partition the rewrite touched; raises when they differ,
        # the rewrite then never published (lakewarden.spark.validation).
        metrics["seconds"] = clock.seconds
        with clock("validate"):
            validation = validate_rewrite(
                spark, catalog, ref, table, start_id, metrics, stage, branch, observed
            )
        if ran is not None:  # the outputs' sums done, and the driver's CPU counted
            ran.settle()
        if stage is not None:
            with clock("publish"):
                published = staging.publish(jvm, table, stage)
            if validation is not None:
                validation["publish"] = published
        if validation is not None:
            metrics["validation"] = validation
    finally:
        if stage is not None:
            with clock("drop"):
                staging.drop(table, stage)
    committed = (
        committed_by_this_job(table, branch, since=start_id)
        if metrics["rewritten_data_files"]
        else None
    )
    if committed is not None:
        metrics[COMMITTED] = committed
    return metrics


def _binpack(
    spark: SparkSession,
    table: Any,
    branch: str,
    start_id: int,
    options: dict[str, str],
    native: bool,
    said: dict[str, Any],
) -> BinPacked | None:
    """A bin-pack by lakewarden's runner (lakewarden.spark.binpack), committed to `branch`:
    a validated one's inputs checksummed during its read, and its groups rewritten by
    pyarrow where each qualifies (validated or not); None when that runner does not apply
    (Iceberg's action runs; `said` then holds the runner's reason, when it planned)."""
    columns = observed_columns(spark, table, start_id)
    return run_binpack(
        spark,
        table,
        branch,
        start_id,
        {k: str(v) for k, v in options.items()},
        commit_properties(),
        columns or [],
        max_rows(),
        native,
        said,
    )


def _action_ran(start_id: int | None) -> str:
    """Why a bin-pack was Iceberg's action's when lakewarden's runner did not plan it."""
    if start_id is None:
        return ": the branch has no snapshot"
    return (
        ": an option lakewarden's bin-pack does not handle, or validation.columns naming a "
        "missing column"
    )


class Phases:
    """Wall seconds per phase of a rewrite job (`metrics["seconds"]`: stage, rewrite,
    validate, publish, drop): where a task's time goes, on every run."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[phase] = round(time.perf_counter() - started, 3)


# Of the failed file groups' partitions, at most this many are named in the metrics.
MAX_FAILED_PARTITIONS = 20


def failures_of(result: Any) -> dict[str, Any]:
    """The file groups an action's `result` committed and those that failed. With partial
    progress (the planners' default) a failed group only gets an ERROR line in Spark's log
    ("Failure during rewrite group ..."): the action still returns, having committed the
    others; `partial` says so. (A group whose commit conflicted with a writer is in neither
    list: Iceberg gives it up by design, and the next task rewrites it.)"""
    failures = list(result.rewriteFailures())
    rewritten = len(list(result.rewriteResults()))
    return {
        "file_groups": rewritten + len(failures),
        "rewritten_groups": rewritten,
        "failed_groups": len(failures),
        "failed_data_files": result.failedDataFilesCount(),
        "failed_partitions": [
            _partition(f.info().partition()) for f in failures[:MAX_FAILED_PARTITIONS]
        ],
        "partial": bool(failures) and rewritten > 0,
    }


def _partition(partition: Any) -> dict[str, Any] | str:
    """A failed group's partition as {field: value}; its text when it is not a PartitionData."""
    try:
        fields = list(partition.getPartitionType().fields())
    except Exception:  # py4j's error (no such method): py4j is not imported without Spark
        return str(partition)
    out: dict[str, Any] = {}
    for i, field in enumerate(fields):
        value = partition.get(i)
        out[str(field.name())] = (
            value if value is None or isinstance(value, str | int | float | bool) else str(value)
        )
    return out


def progress(metrics: dict[str, Any], first_error: str | None = None) -> str:
    """'rewrote 1 of 2 file groups; 1 failed (6 data files): <first error>'."""
    text = (
        f"rewrote {metrics['rewritten_groups']} of {metrics['file_groups']} file groups; "
        f"{metrics['failed_groups']} failed ({metrics['failed_data_files']} data files)"
    )
    return f"{text}: {first_error}" if first_error else text


_GROUP_FAILED = re.compile(
    r" ERROR RewriteDataFilesSparkAction \[.*?\] \{[^}]*\} Failure during rewrite group "
)
_RECORD = re.compile(r"^\d{4}-\d\d-\d\dT")  # a record's first line (lakewarden.spark.joblog)
_CAUSE = "Caused by: "
MAX_ERROR_CHARS = 500


# The metrics key of the first failed group's error when lakewarden's bin-pack ran the
# rewrite (its failures are not in Spark's log as Iceberg's action's are).
FIRST_ERROR = "first_group_error"


def first_failure(spark_log: str, metrics: dict[str, Any] | None = None) -> str | None:
    """The root cause of the first failed file group, from the job's Spark log
    (`lakewarden.spark.joblog`): the last "Caused by" of Iceberg's "Failure during rewrite
    group" record, or its exception's line; else the error lakewarden's bin-pack recorded in
    `metrics`. None when neither has one."""
    lines = spark_log.splitlines()
    for i, line in enumerate(lines):
        if not _GROUP_FAILED.search(line):
            continue
        record = []
        for follow in lines[i + 1 :]:
            if _RECORD.match(follow):
                break
            record.append(follow.strip())
        causes = [r.removeprefix(_CAUSE) for r in record if r.startswith(_CAUSE)]
        exceptions = [r for r in record if r and not r.startswith("at ")]
        cause = causes[-1] if causes else exceptions[0] if exceptions else None
        return cause[:MAX_ERROR_CHARS] if cause else None
    recorded = (metrics or {}).get(FIRST_ERROR)
    return str(recorded)[:MAX_ERROR_CHARS] if recorded else None


# The metrics key of the snapshot the action committed (a runner pops it into its result).
COMMITTED = "committed_snapshot_id"


def committed_by_this_job(
    table: Any, branch: str = MAIN_BRANCH, since: int | None = None
) -> int | None:
    """The newest snapshot in the history of `branch` (since snapshot `since`, the head
    when the job started) that carries this job's commit properties (task id and attempt:
    lakewarden.spark.commits): what the job committed, read from the metadata the action's
    commit left on `table`, not by a Spark query of the snapshots table (a Spark job of its
    own, a few hundred ms for a tiny table). None outside a scheduled job, or when not
    found (the walk is bounded: formats.iceberg.history)."""
    props = commit_properties()
    if not props:
        return None
    # the table's operations refresh after a commit
    ours = finder.marked(history.java_history(table, branch, stop_at=since), props)
    return int(ours[0].id) if ours else None


def storage_now(spark: SparkSession, catalog: str, ref: TableRef) -> datetime:
    """The clock of the table's storage: the modification time of a marker written next to
    its metadata now (then removed). File ages are judged against this, not against our own
    clock, so a storage or writer clock that lags ours cannot make live files look old. On
    an object store the marker is an object written and listed through the table's FileIO
    (`object_store.by_prefix`: its LastModified); elsewhere a file of Hadoop's file system."""
    jvm: Any = spark._jvm
    table = load_java_table(spark, catalog, ref)
    location = str(table.location()).rstrip("/")
    marker = f"{location}/metadata/.lakewarden-clock-{uuid4().hex}"
    if object_store.by_prefix(location):
        return _object_clock(table.io(), marker)
    path = jvm.org.apache.hadoop.fs.Path(marker)
    fs = path.getFileSystem(spark._jsc.hadoopConfiguration())
    fs.create(path, True).close()
    try:
        return datetime.fromtimestamp(fs.getFileStatus(path).getModificationTime() / 1000, UTC)
    finally:
        fs.delete(path, False)


def _object_clock(io: Any, marker: str) -> datetime:
    """The LastModified of an empty object written at `marker` (then deleted), as the
    store lists it (`SupportsPrefixOperations.listPrefix`)."""
    io.newOutputFile(marker).create().close()
    try:
        listed = io.listPrefix(marker).iterator()
        while listed.hasNext():
            info = listed.next()
            if str(info.location()) == marker:
                return datetime.fromtimestamp(info.createdAtMillis() / 1000, UTC)
        raise RuntimeError(f"the storage clock's marker {marker} was written but not listed")
    finally:
        io.deleteFile(marker)
