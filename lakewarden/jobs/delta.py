"""Run a Delta table's job (`lakewarden.kinds.delta`: compaction, zorder, clustering, clean;
`lakewarden.kinds.delta_ttl`: ttl; `lakewarden.kinds.delta_stats`: stats) on a
Delta-family session and record its outcome: in a Spark application of its own
(`lakewarden.jobs.application_entry`), as every format with its own family. A compaction
that is a plain copy of files (`formats.delta.native_rewrite`) runs without Spark
(`run_native`): on the scheduler's own thread, checked before it commits; one that is not
is Spark's, and its run's `engine` says why: Spark's rewrite checked by DuckDB before
Delta's transaction commits it (`run_staged`, `formats.delta.staged_rewrite`: deletion
vectors, column mapping, nested columns, a purge's files, row tracking; local, S3 or HDFS
tables), else (`engine.optimize` says why) Delta's OPTIMIZE (and REORG …
APPLY (PURGE)), checked after. A Z-order and a clustering run as that checked rewrite too
(Delta's Z-order curve; Delta's `ClusteringStrategy`), else as OPTIMIZE, checked after.

Never twice: the job's commits carry its mark (`formats.delta.jobs.marked_session`), and
before its JVM starts, the table's log is read for a commit of the task
(`recover_committed`): one there means an earlier attempt committed, and the run
succeeds with that version without running again.

A conflict (Delta's optimistic concurrency: a DELETE, UPDATE or MERGE committed a change
to a file the command rewrote, after it read the table) fails the command before it
commits anything; the attempt fails, its run naming the conflict (`conflict`), and is
retried as any failed attempt: re-planned from the table as it is then.

Validation after the commit (a compaction, Z-order or clustering OPTIMIZE runs): the rows
and their order-independent checksum read by delta-rs at the version before the job's
commit and at that commit must be equal. A TTL's exact-count guard: the rows its DELETE
removed (the commit's `numDeletedRows`) must be the rows it counted with Spark right
before, give or take what other writers committed in between. Delta commits as the
command ends (no staging branch to publish from), so a failed check is undone by `RESTORE
TABLE … TO VERSION AS OF` the version before the job's commit (`undo`), only if no other
writer committed after it (else the alert says which version to restore to); the task
fails for good either way (critical alert). A table delta-rs cannot read (deletion
vectors) is not validated, and the run says so.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from lakewarden.formats.base import ATTEMPT_KEY, TASK_KEY, Commit, marker_of
from lakewarden.formats.delta import jobs as delta_jobs
from lakewarden.formats.delta import staged_rewrite
from lakewarden.formats.delta.facts import read_facts
from lakewarden.formats.delta.log_files import clean_log
from lakewarden.formats.delta.native_rewrite import Conflict, Ineligible, compact
from lakewarden.formats.delta.timeline import DeltaTimeline
from lakewarden.formats.delta.validation import Unreadable, digest
from lakewarden.jobs.execute import (
    Job,
    failpoint,
    finish_raised,
    job_cost,
    policy_check,
    record_app_id,
)
from lakewarden.kinds import delta_ttl, ttl
from lakewarden.leader import Fence
from lakewarden.object_store import hadoop_s3a, s3a_path
from lakewarden.outcomes import PlanRejected, RewriteMismatch, VerificationFailed
from lakewarden.runtime import Runtime
from lakewarden.spark.cost import with_driver_cpu
from lakewarden.spark.session import set_secrets
from lakewarden.tasks.runs import finish_run

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

# each one Spark runs checked before its commit (`run_staged`) where that path takes it
REWRITES = frozenset({"compaction", "zorder", "clustering"})


def recovered_metrics(commit: Commit, **said: Any) -> dict[str, Any]:
    """The run's metrics when an earlier attempt's commit is found in the log."""
    marker = marker_of(commit.summary)
    return {
        "recovered_commit_of_attempt": marker.attempt if marker else None,
        "committed_version": int(commit.id),
        "recovered": True,
        **said,
    }


def storage_of(rt: Runtime, job: Job) -> dict[str, str]:
    """The job's catalog's resolved properties (an object store's credentials): what its
    Python readers (delta-rs, the log's listing) and Spark's S3A read the table with."""
    return rt.catalogs.entry(job.catalog).resolved


def recover_committed(rt: Runtime, fence: Callable[[], Fence], job: Job) -> str | None:
    """An earlier attempt of the job's task committed (its mark is in the table's log): the
    run finishes as succeeded with that version, and the task's new state is returned;
    None: no commit of the task, run it. Asked before the job's JVM starts
    (`application_entry.OWN_FAMILY_COMMITTED`)."""
    path = str(job.plan.get("path") or "")
    if not path:
        return None
    planned = job.plan.get("version")  # the task's commits come after the version it planned at
    after = int(planned) if planned is not None else None
    done = DeltaTimeline(path, storage_of(rt, job)).find_job_commits(job.task_id, after)
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


def validate(
    path: str, version: int, first: int | None = None, storage: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The rows at `version` (the job's last commit) against those at the version before
    its first (`first`, else `version`)."""
    started = time.monotonic()
    base = (first if first is not None else version) - 1
    try:
        before, after = digest(path, base, storage), digest(path, version, storage)
    except Unreadable as exc:
        return {"status": "skipped", "reason": str(exc)}
    return {
        "status": "passed" if before == after else "failed",
        "reader": "delta-rs",
        "rows": before.rows,
        "rows_after": after.rows,
        "checksum_before": str(before.checksum),
        "checksum_after": str(after.checksum),
        "before_version": base,
        "after_version": version,
        "seconds": round(time.monotonic() - started, 3),
    }


def first_job_version(
    path: str, task_id: int, after: int, storage: Mapping[str, str] | None = None
) -> int | None:
    """The oldest version after `after` that carries the task's mark (a compaction may
    commit twice: its OPTIMIZE and its REORG)."""
    for commit in DeltaTimeline(path, storage).since(str(after), 1000).commits:
        marker = marker_of(commit.summary)
        if marker is not None and marker.task_id == task_id:
            return int(commit.id)
    return None


def _validation(
    job: Job, path: str, commit: Commit | None, first: int | None, storage: Mapping[str, str]
) -> dict[str, Any]:
    if commit is None:
        return {"status": "skipped", "reason": "nothing was committed"}
    if not job.validation.enabled:
        return {"status": "skipped", "reason": "validation is disabled"}
    return validate(path, int(commit.id), first, storage)


def undo(
    spark: SparkSession,
    job: Job,
    path: str,
    version: int,
    first: int | None = None,
    storage: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Set the table back to the version before the job's first commit (`first`, else its
    commit `version`) by RESTORE, only if no other writer committed after `version` (a
    RESTORE then would undo theirs too); what was done, or the statement an operator
    runs, as the run's `undo` metrics."""
    to = (first if first is not None else version) - 1
    how = delta_jobs.restore_sql(s3a_path(path), to)
    newest = DeltaTimeline(path, storage).versions()[-1]
    if newest != version:
        return {
            "restored": False,
            "to_version": to,
            "how": how,
            "why": f"versions {version + 1}..{newest} were committed after the job's {version}",
        }
    metrics = delta_jobs.restore(spark, s3a_path(path), to, job.task_id)
    return {"restored": True, "to_version": to, "restore_version": newest + 1, **metrics}


def _undo_said(done: dict[str, Any]) -> str:
    if done["restored"]:
        return (
            f"undone: RESTOREd to version {done['to_version']} (version {done['restore_version']})"
        )
    return f"NOT undone ({done['why']}): restore version {done['to_version']}: {done['how']}"


def _meanwhile(path: str, after: int, ours: int, storage: Mapping[str, str]) -> int:
    """Rows other writers added or deleted in the versions between the count and our
    commit (their operationMetrics)."""
    keys = ("metric.numOutputRows", "metric.numDeletedRows", "metric.numTargetRowsDeleted")
    timeline = DeltaTimeline(path, storage)
    return sum(
        int(c.summary.get(k, 0) or 0)
        for c in timeline.since(str(after), max(ours - after, 1)).commits
        if int(c.id) < ours
        for k in keys
    )


def run_ttl(
    spark: SparkSession,
    job: Job,
    path: str,
    metrics: dict[str, Any],
    miscount: bool = False,
    storage: Mapping[str, str] | None = None,
) -> None:
    """Count exactly with Spark what the DELETE would remove (hold if too much), delete in
    a marked session, and check the commit's `numDeletedRows` against the count; a
    mismatch is undone (`undo`) and fails the task for good. `metrics`: the run's, filled
    as it goes; `miscount`: test-only (the `ttl-miscount-row` failpoint), a row-level
    delete's count taken as one more, so the guard must see a mismatch and undo it."""
    plan = job.plan
    where = delta_ttl.predicate(plan, now=datetime.now(UTC))
    max_fraction = ttl.max_fraction_of(plan)
    base = metrics
    base.update(level=plan["level"], cutoff=plan["cutoff"], predicate=where)
    timeline = DeltaTimeline(path, storage)
    counted_at = timeline.versions()[-1]
    counted, total = delta_jobs.count_older(spark, s3a_path(path), where, counted_at)
    base.update(counted_rows=counted, rows_before=total, counted_at_version=counted_at)
    base["max_fraction"] = max_fraction
    ttl.hold_if_too_much(counted, total, max_fraction, base)
    if counted == 0:
        base.update(deleted_records=0, note="nothing older than the cutoff")
        return
    session = delta_jobs.marked_session(spark, job.task_id, job.attempt)
    delta_jobs.delete(session, s3a_path(path), where)
    commit = timeline.find_job_commits(job.task_id)
    if commit is None:
        raise VerificationFailed(
            f"TTL issued its delete of {counted} counted rows but no version carries its "
            f"mark: check the table's log; to undo: RESTORE to version {counted_at}"
        )
    version, s = int(commit.id), commit.summary
    metrics.update(_commit_metrics(commit))
    if "metric.numDeletedRows" in s:
        deleted, source = int(s["metric.numDeletedRows"]), "operationMetrics.numDeletedRows"
    else:  # Delta leaves it out when the files lack row counts: count both sides
        before, after = (
            delta_jobs.rows_at(spark, s3a_path(path), v) for v in (version - 1, version)
        )
        deleted, source = before - after, "rows at the version before, less rows at it"
    if miscount and plan["level"] == "row":
        deleted += 1
    meanwhile = _meanwhile(path, counted_at, version, storage or {})
    metrics.update(
        deleted_records=deleted,
        deleted_source=source,
        writers_meanwhile_rows=meanwhile,
        # whole files removed, none written: what partition level promises
        metadata_only=int(s.get("files-added", 0)) == 0
        and int(s.get("metric.numDeletionVectorsAdded", 0) or 0) == 0,
    )
    if abs(deleted - counted) > meanwhile:
        metrics["undo"] = done = undo(spark, job, path, version, storage=storage)
        raise VerificationFailed(
            f"TTL version {version} deleted {deleted} rows where it counted {counted} right "
            f"before (writers changed {meanwhile} meanwhile): {_undo_said(done)}"
        )


def _execute(
    spark: SparkSession, job: Job, path: str, storage: Mapping[str, str]
) -> dict[str, Any]:
    """Run the job's Delta command in a marked session of its own; Delta's own metrics.
    `path` as lakewarden reads it; Spark's is S3A's for a table on S3 (`s3a_path`)."""
    plan, where = job.plan, s3a_path(path)
    if job.kind in REWRITES:
        target = str(int(plan["target_file_size_bytes"]))
        conf = {
            delta_jobs.MAX_FILE_SIZE: target,
            delta_jobs.MIN_FILE_SIZE: str(int(plan.get("min_file_size_bytes") or target)),
        }
        session = delta_jobs.marked_session(spark, job.task_id, job.attempt, conf)
        # clustering: a plain OPTIMIZE of the whole table, which clusters a table with
        # clustering columns (Delta refuses a WHERE or ZORDER BY on one)
        zorder = plan.get("zorder") if job.kind == "zorder" else None
        out: dict[str, Any] = {}
        if plan.get("optimize", True):
            out = delta_jobs.optimize(session, where, plan.get("partitions"), zorder=zorder)
        purged = plan.get("purge_partitions") if job.kind == "compaction" else None
        if purged is not None:  # files hollowed out by deletion vectors: rewritten whole
            out["purge"] = delta_jobs.purge(session, where, purged)
        return out
    if job.kind == "clean":
        conf = {delta_jobs.VACUUM_LOGGING: "true"}
        if plan.get("below_retention_check"):  # the policy consented: this command only
            conf[delta_jobs.RETENTION_CHECK] = "false"
        session = delta_jobs.marked_session(spark, job.task_id, job.attempt, conf)
        if plan.get("vacuum", True):
            delta_jobs.vacuum(session, where, float(plan["retain_hours"]))
        if not plan.get("log_cleanup"):
            return {}
        # the log's files past the table's retention: delta-rs, as Delta does at a checkpoint
        done = clean_log(DeltaTimeline(path, storage), checkpoint=bool(plan.get("checkpoint")))
        return {"log": done}
    if job.kind == "stats":
        session = delta_jobs.marked_session(spark, job.task_id, job.attempt)
        chosen = delta_jobs.recompute_stats(session, where, plan.get("partitions"))
        after = read_facts(DeltaTimeline(path, storage), target_file_size=1, small_file_ratio=1.0)
        return {
            "files_without_stats_before": plan.get("files_without_stats"),
            "files_without_stats_chosen": chosen,
            "files_without_stats_after": after.files_without_stats,
        }
    raise PlanRejected(f"{job.kind} does not run on Delta tables yet (issue 29)")


def run_native(
    rt: Runtime,
    fence: Callable[[], Fence],
    job: Job,
    stopped: Callable[[], str | None] = lambda: None,
) -> str:
    """Run the job's compaction without Spark (`native_rewrite.compact`) and record its
    outcome; the task's new state. Ineligible (nothing done, nothing recorded) when it is
    not a plain copy: Spark's OPTIMIZE runs it. Never twice (`recover_committed`), the
    policy's last look right before the commit, and `stopped` (the attempt's cancel or
    timeout: why, else None) asked there too."""
    path = str(job.plan.get("path") or "")
    if job.kind != "compaction" or job.plan.get("format") != "delta" or not path:
        raise Ineligible(f"not a Delta compaction plan: {job.kind}")
    mark = {TASK_KEY: str(job.task_id), ATTEMPT_KEY: str(job.attempt)}

    def before_commit() -> None:
        policy_check(rt, job.task_id)()  # a cancelled task: PolicyChanged, cancelled
        why = stopped()  # past its deadline
        if why is not None:
            raise TimeoutError(why)

    started = time.monotonic()
    metrics: dict[str, Any] = {}
    try:
        recovered = recover_committed(rt, fence, job)
        if recovered is not None:
            return recovered
        metrics = compact(
            path,
            job.plan,
            mark,
            before_commit,
            storage=storage_of(rt, job),
            corrupt=failpoint(rt) == "corrupt-rewrite",
        )
    except Ineligible:
        raise
    except Exception as exc:
        if isinstance(exc, Conflict):  # another writer removed an input: retried
            metrics["conflict"] = str(exc)
        return finish_raised(rt, fence(), job, exc, metrics)
    metrics["seconds"] = round(time.monotonic() - started, 3)
    # no Spark task ran: its cost is the CPU this process spent (`engine.driver_cpu_s`)
    metrics["cost"] = with_driver_cpu({"executor_cpu_s": 0.0, "tasks": 0, "stages": 0}, metrics)
    state = finish_run(rt, fence(), job.task_id, job.attempt, metrics=metrics)
    log.info("task %d: %s without Spark %s", job.task_id, state, metrics)
    return state


def run_staged(
    rt: Runtime,
    spark: SparkSession,
    job: Job,
    path: str,
    storage: Mapping[str, str],
    metrics: dict[str, Any],
) -> bool:
    """Run the compaction, Z-order or clustering as Spark's rewrite checked before its commit
    (`staged_rewrite.compact`), its metrics into `metrics`; False (nothing written, the
    reason in `metrics["engine"]`) when that path does not take it: OPTIMIZE runs it."""
    session = delta_jobs.marked_session(spark, job.task_id, job.attempt)
    engine = metrics.setdefault("engine", {"engine": "spark"})
    try:
        done = staged_rewrite.compact(
            session,
            path,
            job.plan,
            policy_check(rt, job.task_id),  # the last look, right before the commit
            storage=storage,
            corrupt=failpoint(rt) == "corrupt-rewrite",
        )
    except Ineligible as exc:
        engine["optimize"] = f"OPTIMIZE, checked after its commit: {exc}"
        return False
    except RewriteMismatch as exc:
        exc.metrics["engine"] = engine
        raise
    metrics.update(done)
    return True


def run_delta_job(rt: Runtime, spark: SparkSession, fence: Callable[[], Fence], job: Job) -> str:
    """Run the job's Delta command on its table (`job.plan["path"]`) and record the outcome."""
    path = str(job.plan.get("path") or "")
    metrics: dict[str, Any] = {}
    if job.kind == "compaction":  # without Spark when it is a plain copy
        try:
            return run_native(rt, fence, job)
        except Ineligible as exc:
            metrics["engine"] = {"engine": "spark", "reason": str(exc)}
    try:
        sc = spark.sparkContext
        record_app_id(rt, job, sc.applicationId, sc.uiWebUrl)
        if job.plan.get("format") != "delta" or not path:
            raise PlanRejected(f"not a Delta plan: {job.kind} {sorted(job.plan)}")
        storage = storage_of(rt, job)
        # S3A's settings for the table's bucket (credentials: on the running session only)
        set_secrets(spark, {f"spark.hadoop.{k}": v for k, v in hadoop_s3a(storage, path).items()})
        # The last look at the policy: Delta's commands commit inside themselves.
        policy_check(rt, job.task_id)()
        sc.setJobGroup(job.group, f"lakewarden task {job.task_id}", True)
        started = time.monotonic()
        if job.kind == "ttl":  # its metrics filled as it goes: a failed check keeps them
            run_ttl(spark, job, path, metrics, failpoint(rt) == "ttl-miscount-row", storage)
            metrics["seconds"] = round(time.monotonic() - started, 3)
        elif job.kind in REWRITES and run_staged(rt, spark, job, path, storage, metrics):
            metrics["seconds"] = round(time.monotonic() - started, 3)  # checked, committed
        else:
            newest_before = DeltaTimeline(path, storage).versions()[-1]
            delta_metrics = _execute(spark, job, path, storage)
            metrics["seconds"] = round(time.monotonic() - started, 3)
            if delta_metrics:
                metrics["delta"] = delta_metrics
            commit = DeltaTimeline(path, storage).find_job_commits(job.task_id, newest_before)
            metrics.update(_commit_metrics(commit))
        if job.kind in REWRITES and "staged" not in metrics:
            first = first_job_version(path, job.task_id, newest_before, storage)
            metrics["validation"] = checked = _validation(job, path, commit, first, storage)
            if failpoint(rt) == "corrupt-rewrite" and checked["status"] == "passed":
                # test-only: as if the rewrite had changed the rows (its undo is real)
                checked.update(status="failed", failpoint="corrupt-rewrite")
            if checked["status"] == "failed":
                version = int(checked["after_version"])
                metrics["undo"] = done = undo(spark, job, path, version, first, storage)
                raise RewriteMismatch(
                    f"{job.kind} version {version} changed the table's rows: "
                    f"{checked.get('rows')} rows (checksum {checked.get('checksum_before')}) "
                    f"before, {checked.get('rows_after')} ({checked.get('checksum_after')}) "
                    f"after, read by delta-rs: {_undo_said(done)}",
                    metrics,
                )
    except Exception as exc:
        conflict = delta_jobs.conflict_of(exc)
        if conflict is not None:  # another writer's commit: nothing committed, retried
            metrics["conflict"] = conflict
        return finish_raised(rt, fence(), job, exc, metrics)
    metrics["cost"] = job_cost(spark, job.group)
    state = finish_run(rt, fence(), job.task_id, job.attempt, metrics=metrics)
    log.info("task %d: %s %s", job.task_id, state, metrics)
    return state
