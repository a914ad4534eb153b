"""Run a Delta table's job (`lakewarden.kinds.delta`: compaction, zorder, clean) on a
Delta-family session and record its outcome: always in a Spark application of its own
(`lakewarden.jobs.application_entry`), as every format with its own family.

Never twice: the job's commits carry its mark (`formats.delta.jobs.marked_session`), and
before its JVM starts, the table's log is read for a commit of the task
(`recover_committed`): one there means an earlier attempt committed, and the run
succeeds with that version without running again.

Validation (compaction, zorder): the rows and their order-independent checksum read by
delta-rs at the version before the job's commit and at that commit must be equal. Delta's
OPTIMIZE commits as it ends (no staging branch to publish from), so a mismatch cannot be
kept from readers: it fails the task for good with the run's `validation` metrics, which
holds the kind and raises the critical `rewrite_mismatch` alert, as Hudi's does. Undoing
it (`RESTORE TABLE … TO VERSION AS OF`) is not done yet. A table delta-rs cannot read
(deletion vectors) is not validated, and the run says so.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from lakewarden.formats.base import Commit, marker_of
from lakewarden.formats.delta import jobs as delta_jobs
from lakewarden.formats.delta.timeline import DeltaTimeline
from lakewarden.formats.delta.validation import Unreadable, digest
from lakewarden.jobs.execute import Job, finish_raised, policy_check, record_app_id
from lakewarden.leader import Fence
from lakewarden.outcomes import PlanRejected, RewriteMismatch
from lakewarden.runtime import Runtime
from lakewarden.tasks.runs import finish_run

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

REWRITES = frozenset({"compaction", "zorder"})


def recovered_metrics(commit: Commit, **said: Any) -> dict[str, Any]:
    """The run's metrics when an earlier attempt's commit is found in the log."""
    marker = marker_of(commit.summary)
    return {
        "recovered_commit_of_attempt": marker.attempt if marker else None,
        "committed_version": int(commit.id),
        "recovered": True,
        **said,
    }


def recover_committed(rt: Runtime, fence: Callable[[], Fence], job: Job) -> str | None:
    """An earlier attempt of the job's task committed (its mark is in the table's log): the
    run finishes as succeeded with that version, and the task's new state is returned;
    None: no commit of the task, run it. Asked before the job's JVM starts
    (`application_entry.OWN_FAMILY_COMMITTED`)."""
    path = str(job.plan.get("path") or "")
    if not path:
        return None
    done = DeltaTimeline(path).find_job_commits(job.task_id)
    if done is None:
        return None
    return finish_run(rt, fence(), job.task_id, job.attempt, metrics=recovered_metrics(done))


def _commit_metrics(commit: Commit | None) -> dict[str, Any]:
    if commit is None:  # Delta commits nothing when there was nothing to rewrite or delete
        return {"committed_version": None}
    s = commit.summary
    return {
        "committed_version": int(commit.id),
        "operation": commit.operation,
        "files_removed": int(s.get("files-removed", 0)),
        "files_added": int(s.get("files-added", 0)),
        "bytes_removed": int(s.get("bytes-removed", 0)),
        "bytes_added": int(s.get("bytes-added", 0)),
        # VACUUM END's count of the files it deleted
        **(
            {"files_deleted": int(s["metric.numDeletedFiles"])}
            if "metric.numDeletedFiles" in s
            else {}
        ),
    }


def validate(path: str, version: int) -> dict[str, Any]:
    """The rows at `version` (the job's commit) against those at the version before."""
    started = time.monotonic()
    try:
        before, after = digest(path, version - 1), digest(path, version)
    except Unreadable as exc:
        return {"status": "skipped", "reason": str(exc)}
    return {
        "status": "passed" if before == after else "failed",
        "reader": "delta-rs",
        "rows": before.rows,
        "rows_after": after.rows,
        "checksum_before": str(before.checksum),
        "checksum_after": str(after.checksum),
        "before_version": version - 1,
        "after_version": version,
        "seconds": round(time.monotonic() - started, 3),
    }


def _validation(job: Job, path: str, commit: Commit | None) -> dict[str, Any]:
    if commit is None:
        return {"status": "skipped", "reason": "nothing was committed"}
    if not job.validation.enabled:
        return {"status": "skipped", "reason": "validation is disabled"}
    return validate(path, int(commit.id))


def _execute(spark: SparkSession, job: Job, path: str) -> dict[str, Any]:
    """Run the job's Delta command in a marked session of its own; Delta's own metrics."""
    plan = job.plan
    if job.kind in REWRITES:
        target = str(int(plan["target_file_size_bytes"]))
        conf = {
            delta_jobs.MAX_FILE_SIZE: target,
            delta_jobs.MIN_FILE_SIZE: str(int(plan.get("min_file_size_bytes") or target)),
        }
        session = delta_jobs.marked_session(spark, job.task_id, job.attempt, conf)
        zorder = plan.get("zorder") if job.kind == "zorder" else None
        return delta_jobs.optimize(session, path, plan.get("partitions"), zorder=zorder)
    if job.kind == "clean":
        conf = {delta_jobs.VACUUM_LOGGING: "true"}
        if plan.get("below_retention_check"):  # the policy consented: this command only
            conf[delta_jobs.RETENTION_CHECK] = "false"
        session = delta_jobs.marked_session(spark, job.task_id, job.attempt, conf)
        delta_jobs.vacuum(session, path, float(plan["retain_hours"]))
        return {}
    raise PlanRejected(f"{job.kind} does not run on Delta tables yet (issue 29)")


def run_delta_job(rt: Runtime, spark: SparkSession, fence: Callable[[], Fence], job: Job) -> str:
    """Run the job's Delta command on its table (`job.plan["path"]`) and record the outcome."""
    path = str(job.plan.get("path") or "")
    metrics: dict[str, Any] = {}
    try:
        sc = spark.sparkContext
        record_app_id(rt, job, sc.applicationId, sc.uiWebUrl)
        if job.plan.get("format") != "delta" or not path:
            raise PlanRejected(f"not a Delta plan: {job.kind} {sorted(job.plan)}")
        # The last look at the policy: Delta's commands commit inside themselves.
        policy_check(rt, job.task_id)()
        sc.setJobGroup(job.group, f"lakewarden task {job.task_id}", True)
        started = time.monotonic()
        delta_metrics = _execute(spark, job, path)
        metrics["seconds"] = round(time.monotonic() - started, 3)
        if delta_metrics:
            metrics["delta"] = delta_metrics
        commit = DeltaTimeline(path).find_job_commits(job.task_id)
        metrics.update(_commit_metrics(commit))
        if job.kind in REWRITES:
            metrics["validation"] = checked = _validation(job, path, commit)
            if checked["status"] == "failed":
                raise RewriteMismatch(
                    f"{job.kind} version {checked['after_version']} changed the table's rows: "
                    f"{checked['rows']} rows (checksum {checked['checksum_before']}) before, "
                    f"{checked['rows_after']} ({checked['checksum_after']}) after, read by "
                    "delta-rs",
                    metrics,
                )
    except Exception as exc:
        return finish_raised(rt, fence(), job, exc, metrics)
    state = finish_run(rt, fence(), job.task_id, job.attempt, metrics=metrics)
    log.info("task %d: %s %s", job.task_id, state, metrics)
    return state
