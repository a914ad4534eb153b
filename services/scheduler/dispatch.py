"""The scheduler's dispatch round: pick the next planned tasks, a batch (`_NEXT_PLANNED`),
move them to running in one transaction, and run their jobs on the warm Spark session (or
launch them as applications); and the cancellation check of the jobs it runs."""

from __future__ import annotations

import functools
import json
import logging
import queue
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import Row, select, text

from lakewarden.catalogs.regions import in_region_sql
from lakewarden.db.models import JobRun, ManagedTable, Task
from lakewarden.db.session import round_transaction
from lakewarden.formats.delta.native_rewrite import Ineligible
from lakewarden.jobs.delta import run_native
from lakewarden.jobs.execute import OWN_FAMILY_FORMATS, Job, run_job
from lakewarden.leader import Fence, FencedOut, check_fence
from lakewarden.logs import log_context
from lakewarden.policy import gate as policy_gate
from lakewarden.policy.quotas import quota_holds
from lakewarden.settings import DEFAULT_REGION
from lakewarden.states import RunMode, RunState, TaskState, sql_in
from lakewarden.tasks import repo
from lakewarden.tasks.runs import finish_run
from services.scheduler.applications import Applications, mode_of
from services.scheduler.capacity import Capacity
from services.scheduler.lease import LeaseRounds

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

# The next jobs to run, at most :batch of them, in this order: higher priority first; then
# the table that used the least Spark time in the last hour (fair share: a table with
# endless work cannot starve the rest, and idle capacity is still used); then a table's
# oldest planned task before its others (a live writer keeps compaction due: without this,
# a clean, which has no gain, waited behind every new compaction of the table); then the
# most expected gain per MB rewritten (compaction plans: data files removed per MB); then
# the oldest task. Never a table with a job already running, one a writer has blocked or an
# operator paused, a kind held on its table, any table while the fleet is frozen, a full
# pool, a table or pool past its hard quota, or another region's table. In one batch: one
# task per table (the first in that order), no pool past its limit counting the batch (its
# running jobs counted in this region only), no execution mode past its room (`:rooms`,
# free slots by mode: a mode not named has room for all). The rows are
# ranked first and locked after (FOR UPDATE cannot share a level with window functions);
# a row locked elsewhere is skipped, which only leaves the batch smaller.
_NEXT_PLANNED = text(
    f"""
    WITH used AS (
        SELECT k.table_id,
               sum(coalesce(r.duration_ms, extract(epoch FROM now() - r.started_at) * 1000))
                   AS used_ms
        FROM job_runs r JOIN tasks k ON k.id = r.task_id
        WHERE r.started_at > now() - interval '1 hour'
        GROUP BY k.table_id
    ), running AS (
        -- a pool's limit is per region: another region's jobs (or a dead region's
        -- orphans) never take this region's slots
        SELECT pool, count(*) AS n FROM tasks
        WHERE {sql_in("state", TaskState.RUNNING)} AND {in_region_sql("table_id")}
        GROUP BY pool
    ), candidates AS (
        SELECT t.id, t.table_id, t.pool, t.priority, coalesce(u.used_ms, 0) AS used_ms,
               extract(epoch FROM now() - t.created_at) AS waited_s,
               ((t.plan->>'files_before')::float - (t.plan->>'expected_files_after')::float)
                 / greatest(1.0, coalesce((t.plan->>'bytes_to_rewrite')::float, 0) / 1048576)
                 AS gain_per_mb,
               t.id = (SELECT min(f.id) FROM tasks f
                       WHERE f.table_id = t.table_id
                         AND {sql_in("f.state", TaskState.PLANNED)}) AS oldest_of_table,
               -- a Hudi or Delta table's job is always an application (applications.mode_of)
               -- but a Delta compaction that is a plain copy, which runs on this
               -- scheduler's thread without Spark (runs_natively)
               CASE WHEN m.format = 'delta' AND t.kind = 'compaction'
                         AND coalesce((t.plan->>'without_spark')::boolean, false)
                    THEN '{RunMode.SESSION}'
                    WHEN {sql_in("m.format", sorted(OWN_FAMILY_FORMATS))}
                    THEN '{RunMode.APPLICATION}'
                    ELSE coalesce(CAST(:pool_modes AS jsonb) ->> t.pool, '{RunMode.SESSION}')
               END AS mode
        FROM tasks t
        JOIN managed_tables m ON m.id = t.table_id
        LEFT JOIN used u ON u.table_id = t.table_id
        WHERE {sql_in("t.state", TaskState.PLANNED)} AND t.not_before <= now()
          AND NOT EXISTS (SELECT 1 FROM tasks r
                          WHERE r.table_id = t.table_id
                            AND {sql_in("r.state", TaskState.RUNNING)})
          -- nothing holds the table (lakewarden.tables): a writer's live blocker, its pause
          -- (no expiry), or the global freeze (no table, no expiry)
          AND NOT EXISTS (SELECT 1 FROM table_blockers b
                          WHERE (b.table_id = t.table_id OR b.table_id IS NULL)
                            AND (b.expires_at IS NULL OR b.expires_at > now()))
          -- nor its kind on it (lakewarden.holds: after a failed validation, or repeated
          -- errors)
          AND NOT EXISTS (SELECT 1 FROM kind_holds h
                          WHERE h.table_id = t.table_id AND h.kind = t.kind)
          -- no table or pool past its hard quota of Spark minutes (lakewarden.policy.quotas)
          AND t.table_id <> ALL(CAST(:quota_tables AS bigint[]))
          AND t.pool <> ALL(CAST(:quota_pools AS text[]))
          -- only this leader's region's tables (lakewarden.catalogs.regions)
          AND {in_region_sql("t.table_id")}
    ), ranked AS (
        SELECT c.*, row_number() OVER (
                   ORDER BY priority DESC, used_ms ASC, oldest_of_table DESC,
                            gain_per_mb DESC NULLS LAST, id) AS n
        FROM candidates c
    ), first_of_table AS (
        SELECT r.*, row_number() OVER (PARTITION BY table_id ORDER BY n) AS in_table
        FROM ranked r
    ), within_pool AS (
        SELECT f.*, row_number() OVER (PARTITION BY pool ORDER BY n) AS in_pool
        FROM first_of_table f WHERE in_table = 1
    ), within_mode AS (
        SELECT w.*, row_number() OVER (PARTITION BY mode ORDER BY n) AS in_mode
        FROM within_pool w
        WHERE coalesce((SELECT n FROM running WHERE running.pool = w.pool), 0) + in_pool
              <= coalesce((CAST(:pool_limits AS jsonb) ->> w.pool)::int, 2147483647)
    ), picked AS (
        SELECT * FROM within_mode
        WHERE in_mode <= coalesce((CAST(:rooms AS jsonb) ->> mode)::int, 2147483647)
        ORDER BY n LIMIT :batch
    )
    SELECT t.id, p.priority, p.used_ms, p.waited_s, p.gain_per_mb
    FROM tasks t JOIN picked p ON p.id = t.id
    WHERE {sql_in("t.state", TaskState.PLANNED)}
    ORDER BY p.n
    FOR UPDATE OF t SKIP LOCKED
    """
    # Defaults: every pool in session mode, room in every mode, no quota reached, one task,
    # the default region.
).bindparams(
    pool_modes="{}", rooms="{}", quota_tables=[], quota_pools=[], batch=1, region=DEFAULT_REGION
)

# At most this many tasks per dispatch round (one transaction): a round's fenced
# transaction stays short, and a standby's takeover waits for it.
DISPATCH_BATCH = 32


def _dispatch_reason(pick: Row[Any], task: Task) -> str:
    """Why the task runs now, as its transition says."""
    return (
        f"dispatched to Spark, attempt {task.attempt + 1}/{task.max_attempts}: "
        f"priority {pick.priority}, table used {pick.used_ms / 1000:.0f}s of Spark in the "
        f"last hour, waited {pick.waited_s:.0f}s, pool {task.pool!r}"
        + (
            f", {pick.gain_per_mb:.1f} data files removed per MB"
            if pick.gain_per_mb is not None
            else ""
        )
    )


def runs_natively(job: Job) -> bool:
    """Whether the job runs on the scheduler's own thread without Spark first: a Delta
    compaction whose plan asks for nothing but a copy of files (`without_spark`, which its
    planner set from `formats.delta.native_rewrite.plan_ineligible`; the dispatch query
    reads the same key; it may still turn out Spark's when it runs)."""
    native = bool(job.plan.get("without_spark"))
    return job.format == "delta" and job.kind == "compaction" and native


@dataclass
class Inflight:
    """A job this scheduler runs: its future, Spark job group and deadline; `stop` is set
    when it is cancelled or past its deadline (a job without Spark asks it)."""

    future: Future[Any]
    group: str
    timeout_s: float
    deadline: float = 0.0
    timed_out: bool = False
    stop: threading.Event | None = None

    def __post_init__(self) -> None:
        self.deadline = time.monotonic() + self.timeout_s


class DispatchRounds(LeaseRounds):
    """Dispatch, the Spark session the jobs share, and the jobs in flight (state set by
    `Scheduler.__init__`). Each dispatch is one round: its transaction commits once, at
    its end (`round_transaction`)."""

    pool: ThreadPoolExecutor
    inflight: dict[int, Inflight]
    applications: Applications
    capacity: Capacity  # elastic pools' limits now (services.scheduler.capacity)
    wake: threading.Event
    # Jobs tried without Spark that turned out Spark's: launched as applications by the
    # next dispatch round (on the loop's thread, as every launch)
    fallbacks: queue.SimpleQueue[tuple[Fence, Job]]
    _spark: SparkSession | None
    _spark_lock: threading.Lock

    def spark(self) -> SparkSession:
        with self._spark_lock:
            if self._spark is None:
                from lakewarden.spark.session import build_session

                self._spark = build_session(
                    self.rt.settings, self.rt.db_url, "lakewarden-scheduler"
                )
            return self._spark

    def _drop_spark_if_dead(self) -> None:
        """After a failure: if the JVM died, the next job starts a new one."""
        from lakewarden.spark.session import forget_dead_session, jvm_alive

        with self._spark_lock:
            if self._spark is not None and not jvm_alive(self._spark):
                log.warning("the Spark JVM is gone; a new session starts with the next job")
                forget_dead_session()
                self._spark = None

    def dispatch_once(self) -> bool:
        """One dispatch round: up to DISPATCH_BATCH planned tasks, as many as the modes
        have room for, moved to running in one transaction (one fence check, one pick, one
        guarded move for all), then their jobs started. Whether any task was picked."""
        fence = self.leading()
        if fence is None:  # a deposed leader launches nothing, not even what it tried
            return False
        self.launch_fallbacks()
        rooms = {
            RunMode.SESSION: max(0, self.rt.settings.max_concurrent_jobs - len(self.inflight)),
            RunMode.APPLICATION: self.applications.room(),
        }
        if not any(rooms.values()):
            return False
        me = self.rt.process_id
        try:
            with round_transaction(self.rt.engine) as s:
                check_fence(s, fence)  # the lease row key-shared until this round commits
                quota = quota_holds(s, self.rt.settings)
                picks = s.execute(
                    _NEXT_PLANNED,
                    {
                        "pool_limits": json.dumps(self.capacity.limits()),
                        "pool_modes": json.dumps(self.rt.settings.pool_modes),
                        "rooms": json.dumps(rooms),
                        "quota_tables": list(quota.tables),
                        "quota_pools": list(quota.pools),
                        "batch": min(DISPATCH_BATCH, sum(rooms.values())),
                        "region": fence.region,
                    },
                ).all()
                if not picks:
                    return False
                found = {
                    task.id: (task, row)
                    for task, row in s.execute(
                        select(Task, ManagedTable)
                        .join(ManagedTable, ManagedTable.id == Task.table_id)
                        .where(Task.id.in_([p.id for p in picks]))
                    ).all()
                }
                pairs = [(found[p.id][1], found[p.id][0]) for p in picks]
                verdicts = policy_gate.judge_all(s, pairs)
                reasons: dict[int, str] = {}
                for pick, (_, task), verdict in zip(picks, pairs, verdicts, strict=True):
                    if verdict.go:
                        reasons[task.id] = _dispatch_reason(pick, task)
                        continue
                    # The policy changed since planning: never run under an old one.
                    cancel = verdict.action == "cancel"
                    repo.transition(
                        s,
                        task.id,
                        TaskState.CANCELLED if cancel else TaskState.PENDING,
                        actor=me,
                        expected=(TaskState.PLANNED,),
                        fence=fence,
                        reason=f"not dispatched: {verdict.reason}",
                        **({} if cancel else {"plan": None, "holder": None}),
                    )
                moved = repo.transition_each(
                    s,
                    reasons,
                    TaskState.RUNNING,
                    actor=me,
                    expected=(TaskState.PLANNED,),
                    fence=fence,
                    attempt=Task.attempt + 1,
                    holder=me,
                )
                policies = {t.id: v.policy for (_, t), v in zip(pairs, verdicts, strict=True)}
                jobs = [Job.of(s, task, found[task.id][1], policies[task.id]) for task in moved]
                s.add_all(
                    JobRun(
                        task_id=job.task_id,
                        attempt=job.attempt,
                        state=RunState.RUNNING,
                        scheduler_id=me,
                        leader_epoch=fence.epoch,
                        spark_job_group=job.group,
                        mode=RunMode.SESSION
                        if runs_natively(job)
                        else mode_of(self.rt.settings, job.pool, job.format),
                    )
                    for job in jobs
                )
        except FencedOut as exc:
            log.warning("dispatch refused: %s", exc)
            return False
        for job in jobs:
            self._start(fence, job)
        return True

    def _start(self, fence: Fence, job: Job) -> None:
        with log_context(**job.log_fields):
            log.info(
                "task %d: running %s on %s (attempt %d)",
                job.task_id,
                job.kind,
                job.ref.dotted,
                job.attempt,
            )
            native = runs_natively(job)
            if (
                not native
                and mode_of(self.rt.settings, job.pool, job.format) == RunMode.APPLICATION
            ):
                self.applications.launch(fence, job, job.timeout_s)
                return
        stop = threading.Event() if native else None
        run = functools.partial(self._run_native, stop) if stop is not None else self._run_job
        future = self.pool.submit(run, fence, job)
        self.inflight[job.task_id] = Inflight(future, job.group, job.timeout_s, stop=stop)
        future.add_done_callback(functools.partial(self._forget, job.task_id))

    def _run_native(self, stop: threading.Event, fence: Fence, job: Job) -> str | None:
        """The job without Spark (`jobs.delta.run_native`); one that turns out Spark's
        is queued for its application (`fallbacks`), whose run says why."""
        with log_context(**job.log_fields):

            def stopped() -> str | None:
                entry = self.inflight.get(job.task_id)
                if not stop.is_set() or entry is None:
                    return None
                if entry.timed_out:
                    return f"job exceeded its timeout of {entry.timeout_s:.0f}s and was cancelled"
                return "the job was cancelled"

            try:
                return run_native(self.rt, lambda: fence, job, stopped)
            except Ineligible as exc:
                log.info("task %d: not without Spark (%s): its own application", job.task_id, exc)
                self.fallbacks.put((fence, job))
                self.wake.set()
                return None
            except Exception as exc:  # recording the outcome failed: say so on the run
                log.exception("task %d: its run without Spark failed", job.task_id)
                return finish_run(self.rt, fence, job.task_id, job.attempt, error=exc)

    def launch_fallbacks(self) -> None:
        """Launch the applications of the jobs that turned out Spark's (`_run_native`), as
        many as max_concurrent_applications has room for (the rest wait for a later round)."""
        while self.applications.room() > 0:
            try:
                fence, job = self.fallbacks.get_nowait()
            except queue.Empty:
                return
            with log_context(**job.log_fields):
                self.applications.launch(fence, job, job.timeout_s)

    def _forget(self, task_id: int, _future: Future[Any]) -> None:
        self.inflight.pop(task_id, None)
        self.wake.set()  # a slot is free (and its table and pool may take the next task)

    def _run_job(self, fence: Fence, job: Job) -> str:
        with log_context(**job.log_fields):  # a pool thread: the context is bound here
            return self._run_job_in_context(fence, job)

    def _run_job_in_context(self, fence: Fence, job: Job) -> str:
        def explain(exc: BaseException) -> BaseException:
            entry = self.inflight.get(job.task_id)
            if entry is not None and entry.timed_out:
                return TimeoutError(
                    f"job exceeded its timeout of {entry.timeout_s:.0f}s and was cancelled"
                )
            return exc

        try:
            spark = self.spark()
        except Exception as exc:
            log.exception("task %d: no Spark session", job.task_id)
            return finish_run(self.rt, fence, job.task_id, job.attempt, error=exc)
        return run_job(
            self.rt,
            spark,
            lambda: fence,
            job,
            explain_error=explain,
            after_failure=self._drop_spark_if_dead,
        )

    def cancel_requested_jobs(self) -> None:
        """Cancel the Spark job groups of tasks cancelled through the API or past their timeout."""
        if not self.inflight:
            return
        with round_transaction(self.rt.engine) as s:
            cancelled = set(
                s.scalars(
                    select(Task.id).where(
                        Task.id.in_(list(self.inflight)), Task.state == TaskState.CANCELLED
                    )
                )
            )
        now = time.monotonic()
        for task_id, entry in list(self.inflight.items()):
            if task_id in cancelled:
                log.info("task %d cancelled: cancelling Spark job group %s", task_id, entry.group)
            elif now > entry.deadline:
                if not entry.timed_out:
                    entry.timed_out = True
                    log.warning(
                        "task %d exceeded %.0fs: cancelling Spark job group %s",
                        task_id,
                        entry.timeout_s,
                        entry.group,
                    )
                # Again each round until the attempt ends: a cancel reaches only the group's
                # jobs already submitted, and a job started after it (a slow start under load)
                # would otherwise run on unbounded.
            else:
                continue
            if entry.stop is not None:  # a job without Spark: it asks before committing
                entry.stop.set()
            elif self._spark is not None:
                self._spark.sparkContext.cancelJobGroup(entry.group)
