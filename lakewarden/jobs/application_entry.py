"""One job as its own Spark application: spark-submit's primary resource.

    spark-submit ... lakewarden/jobs/application_entry.py --task-id N --attempt A

(`lakewarden.spark.submit` builds that command line; `services.scheduler.applications`
launches and tracks it.) Settings come from the `LAKEWARDEN_*` environment, secrets
included (never from the command line). The application loads its run, builds its own
Spark session named after the job group, stores its app id at once, heartbeats on its
job_runs row, runs the job (`lakewarden.jobs.execute.run_job`) and records the outcome itself.

Fenced: the outcome is written under the fence of the leader its run is *currently*
assigned to (job_runs' scheduler id and epoch). A deposed leader's epoch is refused; while
the assignment names a lease that is not live, the application waits for a new leader to
re-attach it (which moves the assignment to its own epoch), up to
`application_report_deadline_s`. Past that it gives up (exit 3) and the leader judges the
run from the table's commits (`find_commit`): a committed job is never run again.
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":
    # Run as a script, this file's directory (lakewarden/jobs/) would come first on sys.path and
    # its modules (execute, ...) would shadow top-level ones: drop it.
    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]

import argparse
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from sqlalchemy import func, select, text, update

from lakewarden.catalogs.regions import lease_name, region_of_table
from lakewarden.db.models import JobRun, Task
from lakewarden.db.session import transaction
from lakewarden.errors import headline
from lakewarden.jobs.delta import recover_committed, run_delta_job
from lakewarden.jobs.execute import Job, run_job
from lakewarden.jobs.hudi import run_hudi_job
from lakewarden.leader import Fence
from lakewarden.logs import log_context, setup_logging
from lakewarden.runtime import Runtime, make_runtime
from lakewarden.settings import DEFAULT_REGION
from lakewarden.spark import yarn
from lakewarden.states import RunState, TaskState
from lakewarden.tasks import repo
from lakewarden.tasks.runs import finish_run

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("lakewarden.application")  # the name its log lines always had

# The runner of each format with a Spark family of its own (execute.OWN_FAMILY_FORMATS); an
# Iceberg job runs through execute.run_job.
OWN_FAMILY_RUNNERS = {"hudi": run_hudi_job, "delta": run_delta_job}
# Before any JVM starts: a format whose log shows the task's commit (an earlier attempt's)
# finishes the run from it (the new state), never running again; None: run it.
OWN_FAMILY_COMMITTED = {"delta": recover_committed}

# Exit codes the scheduler reads.
REPORTED, NOTHING_TO_DO, NOT_REPORTED = 0, 2, 3


def load_job(rt: Runtime, task_id: int, attempt: int) -> Job | None:
    """The attempt to run, if its run is still running (None: cancelled or judged meanwhile)."""
    with transaction(rt.engine) as s:
        run = s.scalars(
            select(JobRun).where(JobRun.task_id == task_id, JobRun.attempt == attempt)
        ).one_or_none()
        found = repo.task_with_table(s, task_id)
        if run is None or found is None or run.state != RunState.RUNNING:
            return None
        task, row = found
        if task.state != TaskState.RUNNING or task.attempt != attempt:
            return None
        return Job.of(s, task, row)


def assigned_fence(rt: Runtime, task_id: int, attempt: int) -> tuple[Fence, bool]:
    """The fence of the leader the run is assigned to now, and whether that lease is live
    (held by that leader at that epoch, by the database's clock). The lease is the one of
    the task's table's region (lakewarden.catalogs.regions)."""
    with transaction(rt.engine) as s:
        table_id = s.scalar(select(Task.table_id).where(Task.id == task_id))
        region = region_of_table(s, table_id) if table_id is not None else None
        lease = lease_name(region or DEFAULT_REGION)
        holder, epoch, live = s.execute(
            select(
                JobRun.scheduler_id,
                JobRun.leader_epoch,
                text(
                    "EXISTS (SELECT 1 FROM leader_lease l WHERE l.name = :lease "
                    "AND l.holder = job_runs.scheduler_id AND l.epoch = job_runs.leader_epoch "
                    "AND l.expires_at > now())"
                ).bindparams(lease=lease),
            ).where(JobRun.task_id == task_id, JobRun.attempt == attempt)
        ).one()
    return Fence(lease, holder, int(epoch)), bool(live)


def fence_waiting_for_leader(
    rt: Runtime, task_id: int, attempt: int, deadline_s: float, poll_s: float = 0.5
) -> Fence:
    """The run's current fence, once its lease is live (a new leader re-attached the run
    after a failover), or as it stands at the deadline: `finish_run` then refuses it."""
    until = time.monotonic() + deadline_s
    while True:
        fence, live = assigned_fence(rt, task_id, attempt)
        if live or time.monotonic() >= until:
            if not live:
                log.warning(
                    "task %d: its leader %s (epoch %d) is gone and no leader re-attached it "
                    "within %.0fs",
                    task_id,
                    fence.holder,
                    fence.epoch,
                    deadline_s,
                )
            return fence
        time.sleep(poll_s)


class Heartbeat(threading.Thread):
    """Keeps the run's heartbeat_at fresh: how a new leader tells a live application from a
    dead one without asking the process that launched it (gone after a failover)."""

    def __init__(self, rt: Runtime, task_id: int, attempt: int) -> None:
        super().__init__(name="heartbeat", daemon=True)
        self.rt, self.task_id, self.attempt = rt, task_id, attempt
        self.stop = threading.Event()

    def beat(self) -> None:
        with transaction(self.rt.engine) as s:
            s.execute(
                update(JobRun)
                .where(
                    JobRun.task_id == self.task_id,
                    JobRun.attempt == self.attempt,
                    JobRun.state == RunState.RUNNING,
                )
                .values(heartbeat_at=func.now())
            )

    def run(self) -> None:
        while not self.stop.wait(self.rt.settings.heartbeat_interval_s):
            try:
                self.beat()
            except Exception:
                log.exception("heartbeat failed")


class YarnApplicationEnded(RuntimeError):
    """The job failed because YARN ended its application (killed from outside, ...)."""


def yarn_explained(rt: Runtime, spark: SparkSession) -> Callable[[BaseException], BaseException]:
    """On YARN, a job that failed because YARN ended its application (killed from outside:
    the driver's context stops, its job fails with "SparkContext was shut down") says so
    with YARN's diagnostics; any other failure is left as it is."""
    web = rt.settings.yarn_resourcemanager_url
    app_id = spark.sparkContext.applicationId

    def explain(exc: BaseException) -> BaseException:
        if not web or not app_id.startswith("application_"):
            return exc
        try:
            why = yarn.ended(yarn.app_report(web, app_id))
        except yarn.ResourceManagerUnreachable:
            return exc
        if why is None:
            return exc
        return YarnApplicationEnded(f"{why} ({headline(exc)})")

    return explain


def run_application(
    rt: Runtime, task_id: int, attempt: int, warm: SparkSession | None = None
) -> int:
    """Run the attempt and record its outcome. `warm`: a running session of the job's
    family to run it in, left running (the tests' shared Delta-family process runs several
    kinds' jobs in one JVM this way); else the job's own session, built and stopped."""
    job = load_job(rt, task_id, attempt)
    if job is None:
        log.info("task %d attempt %d: no longer running, nothing to do", task_id, attempt)
        return NOTHING_TO_DO
    with log_context(**job.log_fields):
        return _run_loaded(rt, job, warm)


def _run_in_session(
    rt: Runtime, job: Job, fence: Callable[[], Fence], warm: SparkSession | None = None
) -> str:
    """Build the job's Spark session (its format's family), run the job, stop the session;
    or run it in `warm`, left running."""
    try:
        from lakewarden.spark.session import build_session

        spark = warm or build_session(rt.settings, rt.db_url, job.group, family=job.family)
    except Exception as exc:
        log.exception("task %d: no Spark session", job.task_id)
        return finish_run(rt, fence(), job.task_id, job.attempt, error=exc)
    try:
        own = OWN_FAMILY_RUNNERS.get(job.format)
        if own is not None:
            return own(rt, spark, fence, job)
        return run_job(rt, spark, fence, job, explain_error=yarn_explained(rt, spark))
    finally:
        if warm is None:
            spark.stop()


def _run_loaded(rt: Runtime, job: Job, warm: SparkSession | None = None) -> int:
    task_id, attempt = job.task_id, job.attempt
    heartbeat = Heartbeat(rt, task_id, attempt)
    heartbeat.beat()
    heartbeat.start()
    deadline_s = rt.settings.application_report_deadline_s

    def fence() -> Fence:
        return fence_waiting_for_leader(rt, task_id, attempt, deadline_s)

    try:
        # An earlier attempt's commit in the table's log is this run's outcome: no JVM.
        committed = OWN_FAMILY_COMMITTED.get(job.format)
        try:
            state = committed(rt, fence, job) if committed is not None else None
        except Exception as exc:  # the table's log unreadable: the run fails saying so
            log.exception("task %d: its table's log not read", task_id)
            state = finish_run(rt, fence(), task_id, attempt, error=exc)
        if state is None:
            state = _run_in_session(rt, job, fence, warm)
    finally:
        heartbeat.stop.set()
    log.info("task %d attempt %d: %s", task_id, attempt, state)
    return NOT_REPORTED if state == "fenced" else REPORTED


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="lakewarden.application", description=__doc__)
    parser.add_argument("--task-id", type=int, required=True)
    parser.add_argument("--attempt", type=int, required=True)
    args = parser.parse_args(argv)
    rt = make_runtime("application")
    setup_logging(rt.settings, rt.db_url)  # the format of every lakewarden process
    with log_context(task_id=args.task_id, attempt=args.attempt):
        return run_application(rt, args.task_id, args.attempt)


if __name__ == "__main__":
    raise SystemExit(main())
