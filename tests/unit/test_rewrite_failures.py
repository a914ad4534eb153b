"""What a rewrite's failed file groups leave in the job's Spark log, read back as the
task's reason (lakewarden.spark.actions)."""

from __future__ import annotations

from lakewarden.spark.actions import first_failure, progress

# Two records as lakewarden.spark.joblog's layout writes them: a failed group (untagged: it
# is logged by Iceberg's rewrite thread), then the action's own summary.
LOG = """\
2026-11-24T01:22:09,151 ERROR RewriteDataFilesSparkAction [Rewrite-Service-0] {} \
Failure during rewrite group FileGroupInfo{globalIndex=1, partition=PartitionData{region=b}}
org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 0.0 failed
\tat org.apache.spark.scheduler.DAGScheduler.failJobAndIndependentStages(DAGScheduler.scala:2856)
Caused by: org.apache.iceberg.exceptions.NotFoundException: File does not exist: file:/w/b/1.parquet
\tat org.apache.iceberg.hadoop.HadoopInputFile.lazyStat(HadoopInputFile.java:164)
Caused by: java.io.FileNotFoundException: File file:/w/b/1.parquet does not exist
\t... 40 more
2026-11-24T01:22:09,506 WARN RewriteDataFilesSparkAction [Thread-14] {lakewarden-task-1-1} \
partial-progress.enabled is true but 1 rewrite commits failed.
Caused by: not this record's
"""

METRICS = {"file_groups": 2, "rewritten_groups": 1, "failed_groups": 1, "failed_data_files": 6}


def test_the_first_failed_group_s_root_cause_is_its_last_caused_by() -> None:
    assert (
        first_failure(LOG)
        == "java.io.FileNotFoundException: File file:/w/b/1.parquet does not exist"
    )


def test_without_a_cause_the_exception_line_and_without_a_record_none() -> None:
    header, exception, frame = LOG.splitlines()[:3]
    assert first_failure(f"{header}\n{exception}\n{frame}\n") == exception
    summary = LOG.splitlines()[7:]
    assert summary[0].startswith("2026-") and first_failure("\n".join(summary)) is None
    assert first_failure("") is None


def test_progress_names_groups_files_and_the_first_error() -> None:
    assert progress(METRICS) == "rewrote 1 of 2 file groups; 1 failed (6 data files)"
    assert progress(METRICS, "boom") == "rewrote 1 of 2 file groups; 1 failed (6 data files): boom"


def test_the_error_lakewardens_bin_pack_recorded_when_the_log_has_none() -> None:
    from lakewarden.spark.actions import FIRST_ERROR
    from lakewarden.spark.binpack import _cause

    java = (
        "An error occurred while calling o172.save.\n"
        ": org.apache.spark.SparkException: Job aborted.\n\tat org.apache.Foo.bar(Foo.java:1)\n"
        "Caused by: java.io.FileNotFoundException: /w/data/x.parquet\n\tat x.y(Z.java:2)\n"
    )
    metrics = {FIRST_ERROR: _cause(RuntimeError(java))}
    assert first_failure("", metrics) == "java.io.FileNotFoundException: /w/data/x.parquet"
    assert first_failure(LOG, metrics) != metrics[FIRST_ERROR]  # Iceberg's record first
