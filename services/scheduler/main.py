"""The scheduler process: stand by, or lead: dispatch planned tasks to a warm Spark session.

Threads: a Ticker (lakewarden.process) per periodic job (the lease renewal, and the
leader's reaper, health-and-alerts round and sweep); the main loop dispatches; a pool runs
Spark jobs (each in its own Spark job group, so it can be cancelled). Every write that
depends on leading carries the fence.
"""

from __future__ import annotations

import functools
import json
import logging
import signal
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, select, text

from lakewarden import policy_gate, process
from lakewarden.alerts.tick import alert_tick
from lakewarden.db.locks import DBLocks
from lakewarden.db.models import JobRun, ManagedTable, Task
from lakewarden.db.session import transaction
from lakewarden.events.listener import libpq_url
from lakewarden.execute import Job, run_job
from lakewarden.leader import (
    Fence,
    FencedOut,
    acquire_or_renew,
    lease_engine,
    lease_expires_in,
    resign,
)
from lakewarden.logs import log_context
from lakewarden.process import Ticker
from lakewarden.quotas import quota_holds
from lakewarden.runtime import Runtime
from lakewarden.spark import logfiles
from lakewarden.states import RunMode, RunState, TaskState, sql_in
from lakewarden.tasks import repo
from lakewarden.tasks.runs import finish_run
from lakewarden.tasks.wakeup import TaskWakeup
from services.scheduler.applications import Applications, mode_of
from services.scheduler.health_watch import measure_due_tables
from services.scheduler.readiness import readiness_round
from services.scheduler.runs import abandon_orphans
from services.scheduler.sweeps import sweep_due_tasks

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

LOG_PRUNE_INTERVAL_S = 3600.0  # how often each scheduler prunes its Spark log files

# The next job to run, in this order: higher priority first; then the table that used
# the least Spark time in the last hour (fair share: a table with endless work cannot
# starve the rest, and idle capacity is still used); then the most expected gain per MB
# rewritten (compaction plans: data files removed per MB); then the oldest task. Never a
# table with a job already running, one a writer has blocked or an operator paused, a kind
# held on its table, any table while the fleet is frozen, a full pool, or a table or pool
# past its hard quota.
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
      AND (SELECT count(*) FROM tasks p
           WHERE {sql_in("p.state", TaskState.RUNNING)} AND p.pool = t.pool)
          < coalesce((CAST(:pool_limits AS jsonb) ->> t.pool)::int, 2147483647)
      -- not a pool whose execution mode (pool_modes) this scheduler has no room for
      AND coalesce(CAST(:pool_modes AS jsonb) ->> t.pool, '{RunMode.SESSION}')
          <> ALL(CAST(:full_modes AS text[]))
      -- no table or pool past its hard quota of Spark minutes (lakewarden.quotas)
      AND t.table_id <> ALL(CAST(:quota_tables AS bigint[]))
      AND t.pool <> ALL(CAST(:quota_pools AS text[]))
    ORDER BY t.priority DESC, used_ms ASC, gain_per_mb DESC NULLS LAST, t.id
    LIMIT 1
    FOR UPDATE OF t SKIP LOCKED
    """
    # Defaults: every pool in session mode, no mode full, no quota reached.
).bindparams(pool_modes="{}", full_modes=[], quota_tables=[], quota_pools=[])


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


class Scheduler:
    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.stop = threading.Event()
        self.fence: Fence | None = None
        self._valid_until = 0.0  # monotonic deadline of our last successful renewal
        self._next_try: float | None = None  # a standby's next try: when the lease lapses
        # Several jobs at once on the one session (Spark FAIR pools share its cores).
        self.pool = ThreadPoolExecutor(
            max_workers=rt.settings.max_concurrent_jobs, thread_name_prefix="job"
        )
        self.inflight: dict[int, Inflight] = {}
        # Jobs of application-mode pools (pool_modes): each its own Spark application.
        self.applications = Applications(rt)
        # Set when there may be something to dispatch: a task was planned (NOTIFY, see
        # lakewarden.tasks.wakeup) or a job ended (a slot is free). The loop sleeps on it.
        self.wake = threading.Event()
        self.warmed = threading.Event()  # the warm-up job ran (or failed, or is off)
        self.task_wakeup: TaskWakeup | None = None
        self._spark: SparkSession | None = None
        self._spark_lock = threading.Lock()
        self.tickers: list[Ticker] = []

    # --- leadership -------------------------------------------------------------
    @property
    def _lease_db(self) -> Engine:
        return lease_engine(self.rt.engine, self.rt.settings.lease_renew_interval_s)

    def renew(self) -> None:
        """Renew (or take) the lease, and nothing else: on the lease ticker's thread and
        connections of its own, so no other work of this process delays it (the fenced
        work does not block it in the database either: `lakewarden.leader`)."""
        ttl = self.rt.settings.lease_ttl_s
        started = time.monotonic()
        with self._lease_db.begin() as conn:
            fence = acquire_or_renew(conn, DBLocks.SCHEDULER_LEASE, self.rt.process_id, ttl)
            # A standby tries again the moment the leader's lease lapses, not up to a
            # renewal interval later: failover is the lease's TTL, not TTL + interval.
            left = None if fence else lease_expires_in(conn, DBLocks.SCHEDULER_LEASE)
        self._next_try = None if left is None else started + max(0.0, left) + 0.05
        if fence is not None:
            if self.fence is None or fence.epoch != self.fence.epoch:
                log.info("%s leads the scheduler (epoch %d)", self.rt.process_id, fence.epoch)
            # Our own idea of validity ends a margin before the database's.
            self._valid_until = started + ttl * 0.8
        elif self.fence is not None:
            log.warning("%s lost scheduler leadership", self.rt.process_id)
        self.fence = fence

    def _lease_due_in(self) -> float | None:
        return None if self._next_try is None else self._next_try - time.monotonic()

    def beat(self) -> None:
        """Say this process is alive and still runs its jobs (its own ticker: these writes
        never delay a renewal): one statement for the process and every task it holds."""
        held = (set(self.inflight) | self.applications.task_ids()) if self.fence else set()
        process.beat(self.rt, held=held)

    def leading(self) -> Fence | None:
        if self.fence is not None and time.monotonic() < self._valid_until:
            return self.fence
        return None

    def reap(self) -> None:
        """Return work whose holder went silent (a planner, or a previous leader's jobs)."""
        fence = self.leading()
        if fence is None:
            return
        returned = abandon_orphans(
            self.rt,
            fence,
            self.rt.settings.stale_after_s,
            set(self.inflight),
            applications=self.applications,
        )
        if returned:
            log.info("returned %d orphaned task(s) to pending", returned)

    def measure_and_alert(self) -> None:
        """Measure the health of the tables due for it, judge and deliver alerts, then judge
        partition readiness (last: whatever happens there, the alerts went out)."""
        fence = self.leading()
        if fence is not None:
            measure_due_tables(self.rt, datetime.now(UTC))
            alert_tick(self.rt, as_leader=True)
            readiness_round(self.rt, fence, datetime.now(UTC))

    def sweep(self) -> None:
        """Create the time-based kinds' tasks (TTL, clean) that are due."""
        fence = self.leading()
        if fence is not None:
            sweep_due_tasks(self.rt, fence, datetime.now(UTC))

    def prune_logs(self) -> None:
        """Delete this host's old Spark log files; never the live session's or a running
        application's (every scheduler, leading or not: the files are on its own disk)."""
        with self.applications.lock:
            keep = {f"{app.group}.log" for app in self.applications.running.values()}
        with self._spark_lock:
            if self._spark is not None:
                keep.add(f"{self._spark.sparkContext.applicationId}.log")
        data = self.rt.settings.data_dir
        logfiles.prune(
            (data / "spark" / "logs", self.applications.log_dir),
            self.rt.settings.spark_log_retention_days * 86_400,
            keep,
        )

    # --- Spark -----------------------------------------------------------------
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

    # --- dispatch --------------------------------------------------------------
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
            with transaction(self.rt.engine) as s:
                quota = quota_holds(s, self.rt.settings)
                pick = s.execute(
                    _NEXT_PLANNED,
                    {
                        "pool_limits": json.dumps(self.rt.settings.pool_limits),
                        "pool_modes": json.dumps(self.rt.settings.pool_modes),
                        "full_modes": full_modes,
                        "quota_tables": list(quota.tables),
                        "quota_pools": list(quota.pools),
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
                job = Job.of(s, task, row)
                s.add(
                    JobRun(
                        task_id=task_id,
                        attempt=attempt,
                        state=RunState.RUNNING,
                        scheduler_id=self.rt.process_id,
                        leader_epoch=fence.epoch,
                        spark_job_group=job.group,
                        mode=mode_of(self.rt.settings, job.pool),
                    )
                )
        except FencedOut as exc:
            log.warning("dispatch refused: %s", exc)
            return False
        with log_context(**job.log_fields):
            log.info(
                "task %d: running %s on %s (attempt %d)", task_id, job.kind, job.ref.dotted, attempt
            )
            if mode_of(self.rt.settings, job.pool) == RunMode.APPLICATION:
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
        with transaction(self.rt.engine) as s:
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

    # --- main loop -----------------------------------------------------------
    def serve(self) -> None:
        s = self.rt.settings
        self.tickers = [
            # The lease renews at a fixed rate: a slow renewal does not push the next back.
            Ticker(
                "lease",
                s.lease_renew_interval_s,
                self.renew,
                self.stop,
                wait_first=True,
                fixed_rate=True,
                due_in=self._lease_due_in,
            ),
            *(
                Ticker(name, seconds, fn, self.stop, wait_first=True)
                for name, seconds, fn in (
                    ("heartbeat", s.heartbeat_interval_s, self.beat),
                    ("reaper", max(5.0, s.stale_after_s / 3), self.reap),
                    ("health-and-alerts", s.alert_interval_s, self.measure_and_alert),
                    ("sweep", s.sweep_interval_s, self.sweep),
                    ("log-pruning", LOG_PRUNE_INTERVAL_S, self.prune_logs),
                )
            ),
        ]
        self.renew()
        self.beat()
        for ticker in self.tickers:
            ticker.start()
        if s.spark_warmup:
            # Warm the Spark session in the background: the first job (or a failover) is fast.
            threading.Thread(target=self._warm, name="spark-warmup", daemon=True).start()
        else:
            self.warmed.set()
        self.task_wakeup = TaskWakeup(
            libpq_url(self.rt.db_url), {TaskState.PLANNED: self.wake}, self.stop
        )
        self.task_wakeup.start()
        log.info("scheduler %s started", self.rt.process_id)
        while not self.stop.is_set():
            self.wake.clear()  # before looking: a wake-up while we look is kept
            try:
                self.cancel_requested_jobs()
                self.applications.poll(self.leading())
                while self.dispatch_once():
                    pass
            except Exception:
                log.exception("scheduler loop error")
            self._wait_for_work()
        self.shutdown()

    def _wait_for_work(self) -> None:
        """Sleep until there may be work: a wake-up, leadership just taken, or the poll
        fallback (scheduler_poll_interval_s; a NOTIFY is lost while its listener
        reconnects). Looks at stop, leadership and (with jobs running) cancellations and
        timeouts each second, as the loop did when it polled each second."""
        deadline = time.monotonic() + self.rt.settings.scheduler_poll_interval_s
        was_leading = self.leading() is not None
        while not self.stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0 or self.wake.wait(min(1.0, left)):
                return
            if not was_leading and self.leading() is not None:
                return
            if self.applications.task_ids():
                return  # submitted applications are polled by the loop, each second
            if self.inflight:
                try:
                    self.cancel_requested_jobs()
                except Exception:
                    log.exception("could not look for cancelled jobs")

    def _warm(self) -> None:
        """Build the session and run a tiny real Iceberg job on it (a scratch catalog of
        its own): the first real job then runs as fast as any later one."""
        try:
            from lakewarden.spark.warmup import open_catalog, run_warmup_job

            spark = self.spark()
            run_warmup_job(spark, self.rt.settings)
            open_catalog(spark, self.rt.catalogs.default)
        except Exception:
            log.exception("could not warm Spark; jobs will fail until it can start")
        finally:
            self.warmed.set()

    def shutdown(self) -> None:
        self.stop.set()
        for ticker in self.tickers:
            if ticker.name == "lease":  # a renewal in flight must not outlive the resignation
                ticker.join(timeout=5.0)
        self.pool.shutdown(wait=True, cancel_futures=False)
        if self.fence is not None:
            with self._lease_db.begin() as conn:
                resign(conn, self.fence)
        process.forget(self.rt)


def main(rt: Runtime) -> None:
    scheduler = Scheduler(rt)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: scheduler.stop.set())
    scheduler.serve()
