"""The scheduler's dispatch round: pick the next planned task (`_NEXT_PLANNED`), move it to
running in one transaction, and run its job on the warm Spark session (or launch it as an
application); and the cancellation check of the jobs it runs."""

from __future__ import annotations

import functools
import json
import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import select, text

from lakewarden.catalogs.regions import in_region_sql
from lakewarden.db.models import JobRun, ManagedTable, Task
from lakewarden.db.session import round_transaction
from lakewarden.jobs.execute import OWN_FAMILY_FORMATS, Job, run_job
from lakewarden.leader import Fence, FencedOut
from lakewarden.logs import log_context
from lakewarden.policy import gate as policy_gate
from lakewarden.policy.quotas import quota_holds
from lakewarden.settings import DEFAULT_REGION
from lakewarden.states import RunMode, RunState, TaskState, sql_in
from lakewarden.tasks import repo
from lakewarden.tasks.runs import finish_run
from services.scheduler.applications import Applications, mode_of
from services.scheduler.lease import LeaseRounds

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

# The next job to run, in this order: higher priority first; then the table that used
# the least Spark time in the last hour (fair share: a table with endless work cannot
# starve the rest, and idle capacity is still used); then a table's oldest planned task
# before its others (a live writer keeps compaction due: without this, a clean, which
# has no gain, waited behind every new compaction of the table); then the most expected
# gain per MB rewritten (compaction plans: data files removed per MB); then the oldest
# task. Never a
# table with a job already running, one a writer has blocked or an operator paused, a kind
# held on its table, any table while the fleet is frozen, a full pool, or a table or pool
# past its hard quota, or another region's table.
_NEXT_PLANNED = text(
    f"""
    SELECT t.id, t.priority, coalesce(u.used_ms, 0) AS used_ms,
           extract(epoch FROM now() - t.created_at) AS waited_s,
           ((t.plan->>'files_before')::float - (t.plan->>'expected_files_after')::float)
             / greatest(1.0, coalesce((t.plan->>'bytes_to_rewrite')::float, 0) / 1048576)
             AS gain_per_mb
    FROM tasks t
    LEFT JOIN (
        SELECT k.table_id,
               sum(coalesce(r.duration_ms, extract(epoch FROM now() - r.started_at) * 1000))
                   AS used_ms
        FROM job_runs r JOIN tasks k ON k.id = r.task_id
        WHERE r.started_at > now() - interval '1 hour'
        GROUP BY k.table_id
    ) u ON u.table_id = t.table_id
    WHERE {sql_in("t.state", TaskState.PLANNED)} AND t.not_before <= now()
      AND NOT EXISTS (SELECT 1 FROM tasks r
                      WHERE r.table_id = t.table_id AND {sql_in("r.state", TaskState.RUNNING)})
      -- nothing holds the table (lakewarden.tables): a writer's live blocker, its pause
      -- (no expiry), or the global freeze (no table, no expiry)
      AND NOT EXISTS (SELECT 1 FROM table_blockers b
                      WHERE (b.table_id = t.table_id OR b.table_id IS NULL)
                        AND (b.expires_at IS NULL OR b.expires_at > now()))
      -- nor its kind on it (lakewarden.holds: after a failed validation, or repeated errors)
      AND NOT EXISTS (SELECT 1 FROM kind_holds h
                      WHERE h.table_id = t.table_id AND h.kind = t.kind)
      -- a pool's limit is per region: another region's jobs (or a dead region's
      -- orphans) never take this region's slots
      AND (SELECT count(*) FROM tasks p
           WHERE {sql_in("p.state", TaskState.RUNNING)} AND p.pool = t.pool
             AND {in_region_sql("p.table_id")})
          < coalesce((CAST(:pool_limits AS jsonb) ->> t.pool)::int, 2147483647)
      -- not a pool whose execution mode (pool_modes) this scheduler has no room for
      AND coalesce(CAST(:pool_modes AS jsonb) ->> t.pool, '{RunMode.SESSION}')
          <> ALL(CAST(:full_modes AS text[]))
      -- a Hudi table's job is always an application (execute.OWN_FAMILY_FORMATS)
      AND NOT ('{RunMode.APPLICATION}' = ANY(CAST(:full_modes AS text[]))
               AND EXISTS (SELECT 1 FROM managed_tables m
                           WHERE m.id = t.table_id
                             AND {sql_in("m.format", OWN_FAMILY_FORMATS)}))
      -- no table or pool past its hard quota of Spark minutes (lakewarden.policy.quotas)
      AND t.table_id <> ALL(CAST(:quota_tables AS bigint[]))
      AND t.pool <> ALL(CAST(:quota_pools AS text[]))
      -- only this leader's region's tables (lakewarden.catalogs.regions)
      AND {in_region_sql("t.table_id")}
    ORDER BY t.priority DESC, used_ms ASC,
             t.id = (SELECT min(f.id) FROM tasks f
                     WHERE f.table_id = t.table_id AND {sql_in("f.state", TaskState.PLANNED)})
               DESC,
             gain_per_mb DESC NULLS LAST, t.id
    LIMIT 1
    FOR UPDATE OF t SKIP LOCKED
    """
    # Defaults: every pool in session mode, no mode full, no quota reached, the default region.
).bindparams(pool_modes="{}", full_modes=[], quota_tables=[], quota_pools=[], region=DEFAULT_REGION)


@dataclass
class Inflight:
    """A job this scheduler runs: its future, Spark job group and deadline."""

    future: Future[Any]
    group: str
    timeout_s: float
    deadline: float = 0.0
    timed_out: bool = False

    def __post_init__(self) -> None:
        self.deadline = time.monotonic() + self.timeout_s


class DispatchRounds(LeaseRounds):
    """Dispatch, the Spark session the jobs share, and the jobs in flight (state set by
    `Scheduler.__init__`). Each dispatch is one round: its transaction commits once, at
    its end (`round_transaction`)."""

    pool: ThreadPoolExecutor
    inflight: dict[int, Inflight]
    applications: Applications
    wake: threading.Event
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
        fence = self.leading()
        full_modes = [
            mode
            for mode, full in (
                (RunMode.SESSION, len(self.inflight) >= self.rt.settings.max_concurrent_jobs),
                (RunMode.APPLICATION, not self.applications.has_room()),
            )
            if full
        ]
        if fence is None or len(full_modes) == 2:
            return False
        try:
            with round_transaction(self.rt.engine) as s:
                quota = quota_holds(s, self.rt.settings)
                pick = s.execute(
                    _NEXT_PLANNED,
                    {
                        "pool_limits": json.dumps(self.rt.settings.pool_limits),
                        "pool_modes": json.dumps(self.rt.settings.pool_modes),
                        "full_modes": full_modes,
                        "quota_tables": list(quota.tables),
                        "quota_pools": list(quota.pools),
                        "region": fence.region,
                    },
                ).one_or_none()
                if pick is None:
                    return False
                task_id, priority, used_ms, waited_s, gain = pick
                task = s.get(Task, task_id)
                assert task is not None
                row = s.get(ManagedTable, task.table_id)
                assert row is not None
                verdict = policy_gate.judge(s, row, task)
                if not verdict.go:
                    # The policy changed since planning: never run under an old one.
                    cancel = verdict.action == "cancel"
                    repo.transition(
                        s,
                        task_id,
                        TaskState.CANCELLED if cancel else TaskState.PENDING,
                        actor=self.rt.process_id,
                        expected=(TaskState.PLANNED,),
                        fence=fence,
                        reason=f"not dispatched: {verdict.reason}",
                        **({} if cancel else {"plan": None, "holder": None}),
                    )
                    return True
                attempt = task.attempt + 1
                repo.transition(
                    s,
                    task_id,
                    TaskState.RUNNING,
                    actor=self.rt.process_id,
                    expected=(TaskState.PLANNED,),
                    fence=fence,
                    reason=f"dispatched to Spark, attempt {attempt}/{task.max_attempts}: "
                    f"priority {priority}, table used {used_ms / 1000:.0f}s of Spark in the "
                    f"last hour, waited {waited_s:.0f}s, pool {task.pool!r}"
                    + (f", {gain:.1f} data files removed per MB" if gain is not None else ""),
                    attempt=attempt,
                    holder=self.rt.process_id,
                )
                job = Job.of(s, task, row, verdict.policy)
                s.add(
                    JobRun(
                        task_id=task_id,
                        attempt=attempt,
                        state=RunState.RUNNING,
                        scheduler_id=self.rt.process_id,
                        leader_epoch=fence.epoch,
                        spark_job_group=job.group,
                        mode=mode_of(self.rt.settings, job.pool, job.format),
                    )
                )
        except FencedOut as exc:
            log.warning("dispatch refused: %s", exc)
            return False
        with log_context(**job.log_fields):
            log.info(
                "task %d: running %s on %s (attempt %d)", task_id, job.kind, job.ref.dotted, attempt
            )
            if mode_of(self.rt.settings, job.pool, job.format) == RunMode.APPLICATION:
                self.applications.launch(fence, job, job.timeout_s)
                return True
        future = self.pool.submit(self._run_job, fence, job)
        self.inflight[task_id] = Inflight(future, job.group, job.timeout_s)
        future.add_done_callback(functools.partial(self._forget, task_id))
        return True

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
        if not self.inflight or self._spark is None:
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
            elif now > entry.deadline and not entry.timed_out:
                entry.timed_out = True
                log.warning(
                    "task %d exceeded %.0fs: cancelling Spark job group %s",
                    task_id,
                    entry.timeout_s,
                    entry.group,
                )
            else:
                continue
            self._spark.sparkContext.cancelJobGroup(entry.group)
