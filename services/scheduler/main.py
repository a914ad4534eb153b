"""The scheduler process: stand by, or lead: dispatch planned tasks to a warm Spark session.

A scheduler serves one region (LAKEWARDEN_REGION): it leads or stands by for that region's
lease and runs only the tables of its catalogs (lakewarden.catalogs.regions).

Threads: a Ticker (lakewarden.process) per periodic job (the lease renewal, and the
leader's reaper, health-alerts-readiness round and sweep); the main loop dispatches; a pool runs
Spark jobs (each in its own Spark job group, so it can be cancelled). Every write that
depends on leading carries the fence.

The rounds live in their own modules: `lease` (renewal, leading), `capacity` (the elastic
pools' capacity), `dispatch` (the next task, its job, cancellations) and `periodic`
(heartbeat, reaper, health and alerts, sweep, log pruning). Each round's own transaction
commits once, at its end: a commit inside it raises
(`lakewarden.db.session.round_transaction`).
"""

from __future__ import annotations

import logging
import queue
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from lakewarden import process
from lakewarden.events.listener import libpq_url
from lakewarden.leader import Fence, resign
from lakewarden.process import Ticker
from lakewarden.runtime import Runtime
from lakewarden.states import TaskState
from lakewarden.tasks.wakeup import TaskWakeup
from services.scheduler.applications import Applications
from services.scheduler.capacity import Capacity
from services.scheduler.dispatch import Inflight
from services.scheduler.periodic import (
    LOG_PRUNE_INTERVAL_S,
    METRICS_FOLD_INTERVAL_S,
    PUBLISH_INTERVAL_S,
    PeriodicRounds,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


class Scheduler(PeriodicRounds):
    """The scheduler process: its lease (`LeaseRounds`), dispatch (`DispatchRounds`) and
    periodic rounds (`PeriodicRounds`), each in its own module; here, its state, the main
    loop and the tickers that run the rounds, and shutdown."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.stop = threading.Event()
        self.fence: Fence | None = None  # this region's lease (LAKEWARDEN_REGION)
        self.fleet_fence: Fence | None = None  # the fleet-wide duties' lease
        self._valid_until = 0.0  # monotonic deadline of our last successful renewal
        self._fleet_valid_until = 0.0
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
        self.fallbacks = queue.SimpleQueue()  # jobs tried without Spark that are Spark's
        # Elastic pools' capacity (pool_capacity): decided by its own ticker, read by dispatch.
        self.capacity = Capacity(rt, self.wake)
        self.warmed = threading.Event()  # the warm-up job ran (or failed, or is off)
        self.task_wakeup: TaskWakeup | None = None
        self._spark: SparkSession | None = None
        self._spark_lock = threading.Lock()
        self.tickers: list[Ticker] = []

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
            # The fleet-wide duties' lease, on its own thread: it never delays the above.
            Ticker(
                "fleet-lease",
                s.lease_renew_interval_s,
                self.renew_fleet,
                self.stop,
                wait_first=True,
                fixed_rate=True,
            ),
            *(
                Ticker(name, seconds, fn, self.stop, wait_first=True)
                for name, seconds, fn in (
                    ("heartbeat", s.heartbeat_interval_s, self.beat),
                    ("reaper", max(5.0, s.stale_after_s / 3), self.reap),
                    ("health-alerts-readiness", s.alert_interval_s, self.health_alerts_readiness),
                    ("sweep", s.sweep_interval_s, self.sweep),
                    ("metrics-fold", METRICS_FOLD_INTERVAL_S, self.fold_metrics),
                    ("history-retention", s.retention_interval_s, self.prune_history),
                    ("publish", PUBLISH_INTERVAL_S, self.publish),
                    ("log-pruning", LOG_PRUNE_INTERVAL_S, self.prune_logs),
                    ("capacity", s.capacity_interval_s, self.decide_capacity),
                )
            ),
        ]
        for first in (self.renew, self.renew_fleet, self.beat):
            try:
                first()
            except Exception:
                # Never fatal at start (a lock another starting scheduler holds past the
                # lease's statement timeout, a database restarting): its ticker tries again.
                log.exception("%s failed at start; it is tried again", first.__name__)
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
        log.info("scheduler %s started (region %s)", self.rt.process_id, self.rt.settings.region)
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

    def decide_capacity(self) -> None:
        self.capacity.round(self.leading())

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
            if ticker.name in ("lease", "fleet-lease"):  # not outliving the resignation
                ticker.join(timeout=5.0)
        self.pool.shutdown(wait=True, cancel_futures=False)
        for fence in (self.fleet_fence, self.fence):
            if fence is not None:
                with self._lease_db.begin() as conn:
                    resign(conn, fence)
        process.forget(self.rt)


def main(rt: Runtime) -> None:
    scheduler = Scheduler(rt)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: scheduler.stop.set())
    scheduler.serve()
