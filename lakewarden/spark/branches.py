"""Bin-pack compaction of a named branch, through Iceberg's Java classes over py4j.

Iceberg 1.10's `rewriteDataFiles` action and `rewrite_data_files` procedure only know
main: the action plans from `table.currentSnapshot()` and commits with `table.newRewrite()`,
and the procedure, given `db.t.branch_x`, drops the branch and rewrites main. So the
action's own steps are taken here with the branch put in: Iceberg's bin-pack planner on the
branch head, each file group read and written by Spark exactly as the action's bin-pack
runner does (a staged scan-task set read, `rewritten-file-scan-task-set-id` written), and
one `RewriteFiles` commit `toBranch(branch)`, validated from the planned head, carrying
the task's commit properties. main and every other branch are untouched.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from uuid import uuid4

from lakewarden.catalogs.catalog import TableRef
from lakewarden.outcomes import PlanRejected
from lakewarden.spark.actions import (
    COMMITTED,
    committed_by_this_job,
    load_java_table,
    settle_codec,
)
from lakewarden.spark.commits import before_commit, commit_properties
from lakewarden.spark.validation import validate_rewrite

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def rewrite_branch(
    spark: SparkSession, catalog: str, ref: TableRef, branch: str, options: dict[str, str]
) -> dict[str, Any]:
    """Bin-pack the branch's files by the plan's `options` (the planner's: target, min and
    max file size, min-input-files, delete thresholds); the metrics of
    `lakewarden.spark.actions.rewrite_data_files`, with the commit under COMMITTED."""
    jvm: Any = spark._jvm
    table = load_java_table(spark, catalog, ref)
    head = table.snapshot(branch)
    if head is None or table.refs().get(branch) is None or not table.refs().get(branch).isBranch():
        raise PlanRejected(f"the table has no branch {branch!r}")
    codec_set = settle_codec(table)
    start = head.snapshotId()
    planner = jvm.org.apache.iceberg.actions.BinPackRewriteFilePlanner(
        table, jvm.org.apache.iceberg.expressions.Expressions.alwaysTrue(), start, True
    )
    java_options = jvm.java.util.HashMap()
    for key, value in options.items():
        java_options.put(key, str(value))
    planner.init(java_options)
    groups = []
    found = planner.plan().groups().iterator()
    while found.hasNext():
        groups.append(found.next())
    metrics: dict[str, Any] = {
        "branch": branch,
        "rewritten_data_files": 0,
        "added_data_files": 0,
        "rewritten_bytes": 0,
        "removed_delete_files": 0,
        "file_groups": len(groups),
        "rewritten_groups": 0,
        "failed_groups": 0,
        "failed_data_files": 0,
        "failed_partitions": [],
        "partial": False,
    }
    if codec_set:
        metrics["set_table_codec"] = codec_set
    if not groups:
        return metrics
    for group in groups:
        _rewrite_group(spark, jvm, table, ref.spark_name(catalog), group)
    rewrite = table.newRewrite().validateFromSnapshot(start).toBranch(branch)
    rewrite = rewrite.dataSequenceNumber(head.sequenceNumber())
    for group in groups:
        for f in group.rewrittenFiles():
            rewrite = rewrite.deleteFile(f)
        for f in group.addedFiles():
            rewrite = rewrite.addFile(f)
        metrics["rewritten_data_files"] += len(group.rewrittenFiles())
        metrics["added_data_files"] += len(group.addedFiles())
        metrics["rewritten_bytes"] += group.inputFilesSizeInBytes()
    properties = commit_properties()
    for key, value in properties.items():
        rewrite = rewrite.set(key, value)
    before_commit()
    rewrite.commit()
    metrics["rewritten_groups"] = len(groups)
    table.refresh()
    # outside a scheduled job (no commit properties) the branch's head is ours
    head = table.snapshot(branch)
    metrics[COMMITTED] = (
        committed_by_this_job(table, branch, since=int(start))
        if properties
        else (int(head.snapshotId()) if head is not None else None)
    )
    # As every rewrite: the touched partitions' rows compared (lakewarden.spark.validation).
    validation = validate_rewrite(spark, catalog, ref, table, int(start), metrics, branch)
    if validation is not None:
        metrics["validation"] = validation
    return metrics


def _rewrite_group(spark: SparkSession, jvm: Any, table: Any, name: str, group: Any) -> None:
    """One file group, as Iceberg's bin-pack runner does it: the group's scan tasks staged
    under an id, read back as one DataFrame, written as new files the coordinator holds
    (nothing committed), which become the group's output files. (The runner reaches the
    table through SparkTableCache, whose static get() py4j cannot call next to its
    get(String); the staged tasks and new files are keyed by the table's UUID, so the
    catalog's name for it reaches the same table.)"""
    group_id = str(uuid4())
    tasks = jvm.org.apache.iceberg.spark.ScanTaskSetManager.get()
    coordinator = jvm.org.apache.iceberg.spark.FileRewriteCoordinator.get()
    try:
        tasks.stageTasks(table, group_id, group.fileScanTasks())
        rows = (
            spark.read.format("iceberg")
            .option("scan-task-set-id", group_id)
            .option("split-size", str(group.inputSplitSize()))
            .option("file-open-cost", "0")
            .load(name)
        )
        (
            rows.write.format("iceberg")
            .option("rewritten-file-scan-task-set-id", group_id)
            .option("target-file-size-bytes", str(group.maxOutputFileSize()))
            .option("distribution-mode", "none")
            .option("output-spec-id", str(group.outputSpecId()))
            .mode("append")
            .save(name)
        )
        group.setOutputFiles(coordinator.fetchNewFiles(table, group_id))
    finally:
        tasks.removeTasks(table, group_id)
        coordinator.clearRewrite(table, group_id)
