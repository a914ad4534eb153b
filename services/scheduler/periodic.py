"""The scheduler's periodic rounds, each on a ticker of its own (`Scheduler.serve`): the
heartbeat, the reaper, health and alerts (then readiness), the sweep, the metric rollups'
fold, history retention, write-audit-publish, and log pruning. All but the heartbeat and
log pruning are the leader's only; those two run on every scheduler. A region's leader runs
its region's tables only; the fleet-wide duties (judging the task alert rules, the metric
fold, history retention) run under the fleet lease, which one region leader holds
(lakewarden.catalogs.regions)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from lakewarden import history, process
from lakewarden.alerts.tick import alert_tick
from lakewarden.spark import logfiles
from services.scheduler.dispatch import DispatchRounds
from services.scheduler.health_watch import measure_due_tables
from services.scheduler.publish import PUBLISH_INTERVAL_S, publish_round
from services.scheduler.readiness import readiness_round
from services.scheduler.reaper import abandon_orphans
from services.scheduler.sweeps import sweep_due_tasks

log = logging.getLogger(__name__)

__all__ = [
    "LOG_PRUNE_INTERVAL_S",
    "METRICS_FOLD_INTERVAL_S",
    "PUBLISH_INTERVAL_S",
    "PeriodicRounds",
]

LOG_PRUNE_INTERVAL_S = 3600.0  # how often each scheduler prunes its Spark log files
# How often the leader folds the metric deltas: a scrape sums at most this long's worth.
METRICS_FOLD_INTERVAL_S = 15.0


class PeriodicRounds(DispatchRounds):
    """The periodic rounds (they read the jobs in flight and the Spark session)."""

    def beat(self) -> None:
        """Say this process is alive and still runs its jobs (its own ticker: these writes
        never delay a renewal): one statement for the process and every task it holds."""
        held = (set(self.inflight) | self.applications.task_ids()) if self.fence else set()
        process.beat(self.rt, held=held)

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

    def health_alerts_readiness(self) -> None:
        """Measure the health of the tables due for it, judge and deliver alerts, then judge
        partition readiness (last: whatever happens there, the alerts went out)."""
        fence = self.leading()
        if fence is not None:
            measure_due_tables(self.rt, datetime.now(UTC), region=fence.region)
        if self.leading_fleet() is not None:
            alert_tick(self.rt, as_leader=True)
        if fence is not None:
            readiness_round(self.rt, fence, datetime.now(UTC))

    def sweep(self) -> None:
        """Create the time-based kinds' tasks (TTL, clean) that are due."""
        fence = self.leading()
        if fence is not None:
            sweep_due_tasks(self.rt, fence, datetime.now(UTC))

    def fold_metrics(self) -> None:
        """Fold the metric deltas the triggers appended into the counts /metrics reads."""
        fence = self.leading_fleet()
        if fence is not None:
            history.fold_metric_deltas(self.rt, fence)

    def prune_history(self) -> None:
        """Delete the history past its retention, in small fenced batches."""
        fence = self.leading_fleet()
        if fence is not None:
            history.prune_history(self.rt, fence)

    def publish(self) -> None:
        """Audit the audit branches' new heads; fast-forward main to those that pass."""
        fence = self.leading()
        if fence is not None:
            publish_round(self.rt, fence)

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
