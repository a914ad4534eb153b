"""Execute one planned job on a Spark session and record its outcome: the one way a job runs,
whether in the scheduler's warm session or as a submitted application
(`lakewarden.jobs.application_entry`)."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError
from sqlalchemy import update
from sqlalchemy.orm import Session

from lakewarden.catalogs.catalog import TableRef, load_table
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
from lakewarden.policy import gate as policy_gate
from lakewarden.policy.model import Policy, ValidationPolicy
from lakewarden.runtime import Runtime
from lakewarden.spark import joblog, validation
from lakewarden.spark.actions import first_failure, progress
from lakewarden.spark.commits import committing_as, find_commit, guarded_by
from lakewarden.spark.cost import group_cost, with_driver_cpu
from lakewarden.spark.jars import DEFAULT_FAMILY
from lakewarden.spark.session import use_catalog
from lakewarden.spark.validation import validating
from lakewarden.states import TableFormatName, TaskState
from lakewarden.tables import effective_policy_for, ref_of
from lakewarden.tasks import repo
from lakewarden.tasks.runs import finish_run, run_ui_url

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


# Formats whose jobs run in a Spark session family of their own, so always each as its own
# application, whatever its pool's mode: the scheduler's warm session is Iceberg's.
OWN_FAMILY_FORMATS = frozenset({TableFormatName.HUDI, TableFormatName.DELTA})


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
    # The table's policy as the job was dispatched: its rewrites are checked under its
    # `validation` section (lakewarden.spark.validation), and it may run `timeout_s`.
    validation: ValidationPolicy = field(default_factory=ValidationPolicy)
    timeout_s: float = 0.0
    # The table's format (lakewarden.formats): a Hudi or Delta table's job runs in its
    # format's session family, in an application of its own (lakewarden.jobs.hudi,
    # lakewarden.jobs.delta), whatever its pool's mode.
    format: str = "iceberg"

    @property
    def family(self) -> str:
        """The Spark session family the job runs in (lakewarden.spark.session)."""
        return self.format if self.format in OWN_FAMILY_FORMATS else DEFAULT_FAMILY

    @classmethod
    def of(
        cls, session: Session, task: Task, row: ManagedTable, policy: Policy | None = None
    ) -> Job:
        """The task's current attempt on its table, from the rows the caller holds, under
        `policy` (the effective policy the caller just judged, else merged here). A stored
        policy that no longer validates runs under the built-in validation (the job's last
        look before committing cancels it then)."""
        try:
            if policy is None:
                policy = effective_policy_for(session, row)
            checks = policy.validation
            timeout_s = float(policy.for_kind(task.kind).timeout_minutes * 60)
        except ValidationError:
            checks, timeout_s = ValidationPolicy(), 0.0
        return cls(
            task.id,
            task.attempt,
            task.kind,
            row.catalog,
            ref_of(row),
            dict(task.plan or {}),
            task.pool,
            checks,
            timeout_s,
            row.format,
        )

    @property
    def group(self) -> str:
        """The Spark job group (and application name) of this attempt: cancellable by it."""
        return job_group(self.task_id, self.attempt)

    @property
    def log_fields(self) -> dict[str, Any]:
        """What every log line about this attempt carries (`lakewarden.logs.log_context`)."""
        return {
            "task_id": self.task_id,
            "table": f"{self.catalog}.{self.ref.dotted}",
            "attempt": self.attempt,
        }


GROUP = re.compile(r"lakewarden-task-(\d+)-(\d+)")


def job_group(task_id: int, attempt: int) -> str:
    """An attempt's Spark job group, application name and file stem (`GROUP`)."""
    return f"lakewarden-task-{task_id}-{attempt}"


def record_app_id(rt: Runtime, job: Job, app_id: str, live_ui: str | None) -> None:
    """Store the Spark application id on the run as soon as it is known, and its UI link
    (`run_ui_url`: the live UI at `live_ui`, or the history server's page)."""
    with transaction(rt.engine) as s:
        s.execute(
            update(JobRun)
            .where(JobRun.task_id == job.task_id, JobRun.attempt == job.attempt)
            .values(spark_app_id=app_id, ui_url=run_ui_url(rt.settings, app_id, live_ui, False))
        )
    if rt.settings.fault_job_delay_s:  # failpoint: the job outlives a leader killed now
        time.sleep(rt.settings.fault_job_delay_s)


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
            recovered = finish_if_committed(rt, fence(), job.task_id, job.attempt, job.kind, table)
            if recovered is not None:
                return recovered
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
            validating(job.validation, failpoint(rt)),
            joblog.capture(spark, job.group) as job_log,
        ):
            result = runner(spark, job.catalog, job.ref, job.plan)
    except RewriteMismatch as exc:  # never published: the run records what was compared
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
            exc = RewriteFailed(progress(failed, first_failure(spark_log, failed)), failed)
        return finish_run(
            rt,
            fence(),
            job.task_id,
            job.attempt,
            metrics=failed,
            error=explain_error(exc),
            spark_log=spark_log,
        )
    result.metrics["cost"] = job_cost(spark, job.group, result.metrics)
    partial, spark_log = None, ""
    if result.metrics.get("partial"):
        # Some file groups committed, others failed: the task's reason says how many and
        # why (redacted by finish_run, as errors are), the run's log tail has Spark's lines.
        spark_log = _spark_log(job_log)
        partial = progress(result.metrics, first_failure(spark_log, result.metrics))
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


def job_cost(
    spark: SparkSession, group: str, metrics: dict[str, Any] | None = None
) -> dict[str, Any] | None:
    """`spark.cost.group_cost`, with the driver CPU the run's `metrics` say it spent in place
    of Spark tasks (`spark.cost.with_driver_cpu`), or None if Spark would not say:
    accounting never fails a job that did its work."""
    try:
        return with_driver_cpu(group_cost(spark, group), metrics or {})
    except Exception:
        log.warning("could not read the Spark metrics of job group %s", group, exc_info=True)
        return None


def finish_raised(
    rt: Runtime, fence: Fence, job: Job, exc: Exception, metrics: dict[str, Any] | None
) -> str:
    """The outcome of an own-family job (Hudi's, Delta's) that raised `exc`, recorded:
    a mismatch or a rejected plan for good, a hold as skipped, a policy change as it asks,
    anything else retried. Call it in the `except` block (the traceback is logged)."""
    if isinstance(exc, RewriteMismatch):  # never published: the run records what was compared
        metrics = exc.metrics
    if isinstance(exc, RewriteMismatch | PlanRejected):
        return finish_run(
            rt, fence, job.task_id, job.attempt, metrics=metrics or None, error=exc, retryable=False
        )
    if isinstance(exc, JobHeld):  # a TTL's hold, measured right before it would act
        return finish_run(
            rt,
            fence,
            job.task_id,
            job.attempt,
            metrics=exc.metrics or None,
            moved_to=(TaskState.SKIPPED, str(exc)),
        )
    if isinstance(exc, PolicyChanged):
        to = TaskState.CANCELLED if exc.cancel else TaskState.PENDING
        # what the job did before it stopped (a Hudi instant rolled back: `undo`) stays said
        return finish_run(
            rt, fence, job.task_id, job.attempt, metrics=metrics or None, moved_to=(to, str(exc))
        )
    log.exception("task %d attempt %d failed", job.task_id, job.attempt)
    return finish_run(rt, fence, job.task_id, job.attempt, metrics=metrics or None, error=exc)


def finish_if_committed(
    rt: Runtime,
    fence: Fence,
    task_id: int,
    attempt: int,
    kind: str,
    table: Table,
    **said: Any,
) -> str | None:
    """An earlier attempt of the task committed (`find_commit` finds its commit in the
    table): the run finishes as succeeded with that commit, never run again, and the
    task's new state is returned. None: the table has no commit of the task. `said`: more
    for the run's metrics (why the run was judged so)."""
    commit = find_commit(table, task_id)
    if commit is None:
        return None
    snapshot_id, of_attempt = commit
    return finish_run(
        rt,
        fence,
        task_id,
        attempt,
        metrics={
            "recovered_commit_of_attempt": of_attempt,
            **said,
            **validation.recovered(kind, of_attempt),
        },
        committed_snapshot_id=snapshot_id,
    )


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
            found = repo.task_with_table(s, task_id)
            if found is None:
                raise PolicyChanged("the table is no longer managed", cancel=True)
            task, row = found
            if task.state != TaskState.RUNNING:
                raise PolicyChanged(f"the task is {task.state}", cancel=True)
            verdict = policy_gate.judge(s, row, task)
        if not verdict.go:
            raise PolicyChanged(
                f"stopped before committing: {verdict.reason}",
                cancel=verdict.action == "cancel",
            )

    return check


def failpoint(rt: Runtime) -> str | None:
    """The test-only failpoint, only when failpoints are enabled too (never by accident)."""
    return rt.settings.failpoint if rt.settings.failpoints_enabled else None
