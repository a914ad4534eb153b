"""Execute one planned job on a Spark session and record its outcome: the one way a job runs,
whether in the scheduler's warm session or as a submitted application
(`lakewarden.application`)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError
from sqlalchemy import update

from lakewarden import policy_gate
from lakewarden.catalog import TableRef, load_table
from lakewarden.db.models import JobRun, ManagedTable, Task
from lakewarden.db.session import transaction
from lakewarden.kinds import get_kind
from lakewarden.leader import Fence
from lakewarden.outcomes import (
    JobHeld,
    PlanRejected,
    PolicyChanged,
    RewriteFailed,
    RewriteMismatch,
)
from lakewarden.policy import ValidationPolicy
from lakewarden.runtime import Runtime
from lakewarden.spark import joblog, validation
from lakewarden.spark.actions import first_failure, progress
from lakewarden.spark.commits import committing_as, find_commit, guarded_by
from lakewarden.spark.session import use_catalog
from lakewarden.spark.validation import validating
from lakewarden.states import TaskState
from lakewarden.tables import effective_policy_for
from lakewarden.tasks.runs import finish_run, run_ui_url

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Job:
    """One attempt of a task, as dispatched: everything needed to run it without a lookup."""

    task_id: int
    attempt: int
    kind: str
    catalog: str
    ref: TableRef
    plan: dict[str, Any] = field(default_factory=dict)
    pool: str = "default"

    @property
    def group(self) -> str:
        """The Spark job group (and application name) of this attempt: cancellable by it."""
        return f"lakewarden-task-{self.task_id}-{self.attempt}"

    @property
    def log_fields(self) -> dict[str, Any]:
        """What every log line about this attempt carries (`lakewarden.logs.log_context`)."""
        return {
            "task_id": self.task_id,
            "table": f"{self.catalog}.{self.ref.dotted}",
            "attempt": self.attempt,
        }


def record_app_id(rt: Runtime, job: Job, app_id: str, live_ui: str | None) -> None:
    """Store the Spark application id on the run as soon as it is known, and its UI link
    (`run_ui_url`: the live UI at `live_ui`, or the history server's page)."""
    with transaction(rt.engine) as s:
        s.execute(
            update(JobRun)
            .where(JobRun.task_id == job.task_id, JobRun.attempt == job.attempt)
            .values(spark_app_id=app_id, ui_url=run_ui_url(rt.settings, app_id, live_ui, False))
        )


def run_job(
    rt: Runtime,
    spark: SparkSession,
    fence: Callable[[], Fence],
    job: Job,
    *,
    explain_error: Callable[[BaseException], BaseException] = lambda exc: exc,
    after_failure: Callable[[], None] = lambda: None,
) -> str:
    """Run `job` on `spark` and record the outcome (`finish_run`); returns the task's new state.

    `fence` is asked for the fence at the moment the outcome is written, so a run whose
    holder changed while it ran (a new leader re-attached it) reports under the new one.
    `explain_error` may replace a failure's error (a timeout says so); `after_failure` runs
    before a failure is recorded (the scheduler checks whether its JVM died). A failure's
    log tail holds what Spark logged (WARN, ERROR) while the job ran (`joblog`).
    """
    job_log: joblog.JobLog | None = None
    try:
        sc = spark.sparkContext
        record_app_id(rt, job, sc.applicationId, sc.uiWebUrl)
        if job.attempt > 1:
            # Never commit twice: an earlier attempt (perhaps under a deposed leader) may
            # have committed before it lost track of the outcome.
            table = load_table(rt.catalogs.load(job.catalog), job.ref)
            earlier = find_commit(table, job.task_id)
            if earlier is not None:
                return finish_run(
                    rt,
                    fence(),
                    job.task_id,
                    job.attempt,
                    metrics={
                        "recovered_commit_of_attempt": earlier[1],
                        **validation.recovered(job.kind, earlier[1]),
                    },
                    committed_snapshot_id=earlier[0],
                )
        use_catalog(spark, rt.catalogs.entry(job.catalog))
        # This thread must see the session's SQL conf (catalogs) on the JVM side too.
        spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(  # type: ignore[union-attr]
            spark._jsparkSession
        )
        spark.sparkContext.setJobGroup(job.group, f"lakewarden task {job.task_id}", True)
        # The job's lakewarden pool is its Spark FAIR pool: concurrent jobs share the
        # session's cores pool by pool (a thread-local property, like the job group).
        spark.sparkContext.setLocalProperty("spark.scheduler.pool", job.pool)
        try:
            runner = get_kind(job.kind).run
        except KeyError as exc:
            raise PlanRejected(str(exc)) from exc
        with (
            committing_as(job.task_id, job.attempt),
            guarded_by(policy_check(rt, job.task_id)),
            validating(validation_policy(rt, job.task_id), _failpoint(rt)),
            joblog.capture(spark, job.group) as job_log,
        ):
            result = runner(spark, job.catalog, job.ref, job.plan)
    except RewriteMismatch as exc:  # undone already: the run records what was compared
        return finish_run(
            rt, fence(), job.task_id, job.attempt, metrics=exc.metrics, error=exc, retryable=False
        )
    except PlanRejected as exc:
        return finish_run(rt, fence(), job.task_id, job.attempt, error=exc, retryable=False)
    except JobHeld as exc:
        return finish_run(
            rt,
            fence(),
            job.task_id,
            job.attempt,
            metrics=exc.metrics,
            moved_to=(TaskState.SKIPPED, str(exc)),
        )
    except PolicyChanged as exc:
        to = TaskState.CANCELLED if exc.cancel else TaskState.PENDING
        return finish_run(rt, fence(), job.task_id, job.attempt, moved_to=(to, str(exc)))
    except Exception as exc:
        log.exception("task %d attempt %d failed", job.task_id, job.attempt)
        after_failure()
        spark_log = _spark_log(job_log)
        failed: dict[str, Any] | None = None
        if isinstance(exc, RewriteFailed):  # its cause is only in Spark's log: quote it
            failed = exc.metrics
            exc = RewriteFailed(progress(failed, first_failure(spark_log)), failed)
        return finish_run(
            rt,
            fence(),
            job.task_id,
            job.attempt,
            metrics=failed,
            error=explain_error(exc),
            spark_log=spark_log,
        )
    partial, spark_log = None, ""
    if result.metrics.get("partial"):
        # Some file groups committed, others failed: the task's reason says how many and
        # why (redacted by finish_run, as errors are), the run's log tail has Spark's lines.
        spark_log = _spark_log(job_log)
        partial = progress(result.metrics, first_failure(spark_log))
    state = finish_run(
        rt,
        fence(),
        job.task_id,
        job.attempt,
        metrics=result.metrics,
        committed_snapshot_id=result.committed_snapshot_id,
        partial=partial,
        spark_log=spark_log,
    )
    log.info("task %d: %s %s", job.task_id, state, result.metrics)
    return state


def _spark_log(job_log: joblog.JobLog | None) -> str:
    """What Spark logged of the job; never a reason to lose the failure itself."""
    if job_log is None:
        return ""
    try:
        return job_log.lines()
    except OSError as exc:
        return f"(Spark's log unreadable: {exc})"


def policy_check(rt: Runtime, task_id: int) -> Callable[[], None]:
    """The job's last look at the current policy, right before it commits."""

    def check() -> None:
        with transaction(rt.engine) as s:
            task = s.get(Task, task_id)
            row = s.get(ManagedTable, task.table_id) if task is not None else None
            if task is None or row is None:
                raise PolicyChanged("the table is no longer managed", cancel=True)
            if task.state != TaskState.RUNNING:
                raise PolicyChanged(f"the task is {task.state}", cancel=True)
            verdict = policy_gate.judge(s, row, task)
        if not verdict.go:
            raise PolicyChanged(
                f"stopped before committing: {verdict.reason}",
                cancel=verdict.action == "cancel",
            )

    return check


def validation_policy(rt: Runtime, task_id: int) -> ValidationPolicy:
    """The table's `validation` section as the job starts (its rewrites are checked under
    it: lakewarden.spark.validation); the built-in default when the table is gone or its
    policy no longer validates (the job's last look before committing cancels it then)."""
    with transaction(rt.engine) as s:
        task = s.get(Task, task_id)
        row = s.get(ManagedTable, task.table_id) if task is not None else None
        try:
            return (
                effective_policy_for(s, row).validation if row is not None else ValidationPolicy()
            )
        except ValidationError:  # the last look before the commit cancels the task
            return ValidationPolicy()


def _failpoint(rt: Runtime) -> str | None:
    """The test-only failpoint, only when failpoints are enabled too (never by accident)."""
    return rt.settings.failpoint if rt.settings.failpoints_enabled else None
