"""Run a Hudi table's job (compaction, `lakewarden.kinds.hudi_compaction`) on a Hudi-family
session and record its outcome: always in a Spark application of its own
(`lakewarden.jobs.application_entry`), never in the scheduler's warm Iceberg session (one
JVM has one classpath, and PySpark one JVM per process).

The instant is planned once (Hudi's `run_compaction` schedule) and recorded on the run at
once (`hudi_planned_instant` in its metrics): a retry of the task executes that instant
(done already: the run succeeds without running again), never a new schedule.

Validation: the table's rows and their order-independent checksum read by hudi-rs
(`lakewarden.formats.hudi.validation.digest`) right before the execution and after it
must be equal. Hudi's procedure commits as it ends (no staging branch to publish from), so
a mismatch cannot be kept from readers: it fails the task for good with the run's
`validation` metrics, which holds the kind and raises the critical `rewrite_mismatch`
alert, as an Iceberg mismatch does. Undoing it (Hudi's restore) is not done yet.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sqlalchemy import update

from lakewarden.db.models import JobRun
from lakewarden.db.session import transaction
from lakewarden.formats.hudi.facts import read_facts
from lakewarden.formats.hudi.jobs import run_compaction, schedule_compaction
from lakewarden.formats.hudi.timeline import HudiTimeline
from lakewarden.formats.hudi.validation import Digest, digest
from lakewarden.jobs.execute import Job, finish_raised, policy_check, record_app_id
from lakewarden.kinds import hudi_compaction
from lakewarden.leader import Fence
from lakewarden.outcomes import RewriteMismatch
from lakewarden.runtime import Runtime
from lakewarden.tasks.runs import finish_run

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


def record_planned(rt: Runtime, job: Job, instant: str) -> None:
    """The planned instant on the run, committed before the execution starts."""
    with transaction(rt.engine) as s:
        s.execute(
            update(JobRun)
            .where(JobRun.task_id == job.task_id, JobRun.attempt == job.attempt)
            .values(metrics={hudi_compaction.PLANNED: instant})
        )


def planned_before(rt: Runtime, job: Job) -> str | None:
    with transaction(rt.engine) as s:
        return hudi_compaction.planned_by_task(s, job.task_id)


def _validation(before: Digest, after: Digest, instant: str, seconds: float) -> dict[str, Any]:
    return {
        "status": "passed" if before == after else "failed",
        "reader": "hudi-rs",
        "rows": before.rows,
        "rows_after": after.rows,
        "checksum_before": str(before.checksum),
        "checksum_after": str(after.checksum),
        "after_instant": instant,
        "seconds": round(seconds, 3),
    }


def run_hudi_job(rt: Runtime, spark: SparkSession, fence: Callable[[], Fence], job: Job) -> str:
    """Compact the job's table (`job.plan["base_path"]`) and record the outcome."""
    base_path = str(job.plan.get("base_path") or "")
    metrics: dict[str, Any] = {}
    try:
        sc = spark.sparkContext
        record_app_id(rt, job, sc.applicationId, sc.uiWebUrl)
        if job.kind != hudi_compaction.KIND or not base_path:
            raise ValueError(f"not a Hudi compaction plan: {job.kind} {sorted(job.plan)}")
        instant = planned_before(rt, job)
        if instant is not None:
            done = {i.requested: i for i in HudiTimeline(base_path).completed()}
            if instant in done:  # an earlier attempt finished it: never run again
                return finish_run(
                    rt,
                    fence(),
                    job.task_id,
                    job.attempt,
                    metrics={hudi_compaction.PLANNED: instant, "recovered": True},
                )
        # The last look at the policy: Hudi's procedure commits inside itself.
        policy_check(rt, job.task_id)()
        spark.sparkContext.setJobGroup(job.group, f"lakewarden task {job.task_id}", True)
        if instant is None:
            instant = schedule_compaction(spark, base_path)
            if instant is None:
                return finish_run(
                    rt, fence(), job.task_id, job.attempt, metrics={"reason": "nothing to plan"}
                )
            record_planned(rt, job, instant)
        metrics[hudi_compaction.PLANNED] = instant
        before_facts = read_facts(base_path)
        started = time.monotonic()
        before = digest(base_path) if job.validation.enabled else None
        checked_s = time.monotonic() - started
        started = time.monotonic()
        run_compaction(spark, base_path, instant)
        metrics["compaction_seconds"] = round(time.monotonic() - started, 3)
        done = {i.requested: i for i in HudiTimeline(base_path).completed()}
        if instant not in done:
            raise RuntimeError(f"compaction {instant} did not complete on {base_path}")
        after_facts = read_facts(base_path)
        metrics.update(
            log_files_before=before_facts.log_files,
            log_files_after=after_facts.log_files,
            log_bytes_before=before_facts.log_bytes,
            base_files_before=len(before_facts.base_file_sizes),
            base_files_after=len(after_facts.base_file_sizes),
        )
        if before is not None:
            started = time.monotonic()
            after = digest(base_path)
            checked_s += time.monotonic() - started
            metrics["validation"] = _validation(before, after, instant, checked_s)
            if before != after:
                raise RewriteMismatch(
                    f"compaction {instant} changed the table's rows: {before.rows} rows "
                    f"(checksum {before.checksum}) before, {after.rows} ({after.checksum}) "
                    "after, read by hudi-rs",
                    metrics,
                )
        else:
            metrics["validation"] = {"status": "skipped", "reason": "validation is disabled"}
    except Exception as exc:
        return finish_raised(rt, fence(), job, exc, metrics)
    state = finish_run(rt, fence(), job.task_id, job.attempt, metrics=metrics)
    log.info("task %d: %s %s", job.task_id, state, metrics)
    return state
