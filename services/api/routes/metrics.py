"""Prometheus metrics, computed from Postgres on each scrape, so every API replica
reports the same numbers and none keeps state.

A custom `prometheus_client` collector turns the rows into metric families (the client
escapes label values and writes the exposition format):

- counters of finished tasks and ended job runs, and histograms of task latency and job
  duration, from rollups kept as work finishes (migration 0024: triggers append each
  change's share to `metric_deltas` in its own transaction; the leader folds them into
  `metric_counts`; a scrape sums both): one small read, however long the history;
- gauges for what is true now, from indexed queries over open rows only: the backlog,
  the oldest waiting task, running runs, open alerts, the leader, the processes'
  heartbeats;
- per table (labelled catalog/namespace/table): the health score and the age of the last
  success per kind, for at most `metrics_max_tables` tables, the least healthy first
  (`lakewarden_tables_omitted` says how many were left out: a series per table is a
  Prometheus cost).

A counter whose rows move back (a retried task) drops; Prometheus reads that as a reset,
which `rate()` handles. Rows deleted (retention, a purge) take nothing back: counters
never drop as history is pruned.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString
from sqlalchemy import text
from sqlalchemy.orm import Session

from lakewarden.auth.grants import Role
from lakewarden.catalogs.regions import region_leaders
from lakewarden.db.locks import DBLocks
from lakewarden.leader import leader_status
from lakewarden.settings import Settings
from lakewarden.states import (
    OPEN_TASK_STATES,
    WAITING_TASK_STATES,
    AlertState,
    RunState,
    sql_in,
)
from lakewarden.tasks.repo import last_success_by_kind
from services.api import errors
from services.api.access import OptionalAccessDep
from services.api.deps import RuntimeDep, SessionDep

router = APIRouter(tags=["operations"])

# Seconds. A task waits for planning, a free slot and its run: minutes to hours.
TASK_LATENCY_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400)
# A Spark job: seconds for a small table to an hour or more for a big rewrite.
JOB_DURATION_BUCKETS = (1, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200)
# Heartbeats older than this are not exported: a process killed for good is forgotten
# rather than kept as a series for ever (its rows stay until a clean exit removes them).
HEARTBEAT_HORIZON_S = 3600


# The rollups (migration 0024): what is folded plus what is not yet, summed.
_ROLLUPS_SQL = (
    "SELECT family, kind, label, sum(n), sum(total) FROM ("
    "SELECT family, kind, label, n, total FROM metric_counts UNION ALL "
    "SELECT family, kind, label, n, total FROM metric_deltas) AS r GROUP BY 1, 2, 3"
)


class LakewardenCollector(Collector):
    """Reads every metric from `session` when collected (once per scrape)."""

    def __init__(self, session: Session, settings: Settings) -> None:
        self.session = session
        self.settings = settings

    def _rows(self, sql: str, **params: Any) -> list[Any]:
        return list(self.session.execute(text(sql), params))

    def _rollups(self) -> dict[str, dict[str, dict[str, tuple[int, float]]]]:
        """{family: {kind: {label: (count, sum)}}}, read once per scrape."""
        out: dict[str, dict[str, dict[str, tuple[int, float]]]] = {}
        for family, kind, label, n, total in self._rows(_ROLLUPS_SQL):
            out.setdefault(family, {}).setdefault(kind, {})[label] = (int(n), float(total))
        return out

    def collect(self) -> Iterator[Metric]:
        self.rollups = self._rollups()
        yield from self._leader()
        yield from self._tasks()
        yield from self._histograms()
        yield from self._job_runs()
        yield from self._alerts()
        yield from self._holds()
        yield from self._processes()
        yield from self._tables()

    def _leader(self) -> Iterator[Metric]:
        lease = self.session.execute(
            text(
                "SELECT epoch, extract(epoch FROM expires_at - now()) FROM leader_lease "
                "WHERE name = :lease"
            ),
            {"lease": DBLocks.SCHEDULER_LEASE},
        ).one_or_none()
        yield GaugeMetricFamily(
            "lakewarden_scheduler_leader",
            "1 while a scheduler holds a live lease",
            value=1 if lease and lease[1] > 0 else 0,
        )
        yield GaugeMetricFamily(
            "lakewarden_scheduler_epoch",
            "the leader's fencing token",
            value=lease[0] if lease else 0,
        )
        # Per region (lakewarden.catalogs.regions): 0 for a region whose leader is gone (a
        # data center's outage), whose tables' maintenance stalls until a standby leads.
        regions = GaugeMetricFamily(
            "lakewarden_region_leader",
            "1 while the region's scheduler holds a live lease",
            labels=["region"],
        )
        for region, live in region_leaders(self.session, self.settings.regions).items():
            regions.add_metric([region], 1 if live else 0)
        yield regions
        fleet = leader_status(self.session, DBLocks.FLEET_LEASE)
        yield GaugeMetricFamily(
            "lakewarden_fleet_leader",
            "1 while a region leader holds the fleet-wide duties' lease (alerts, rollups)",
            value=1 if fleet is not None and fleet.live else 0,
        )

    def _tasks(self) -> Iterator[Metric]:
        tasks = GaugeMetricFamily(
            "lakewarden_tasks",
            "tasks by kind and state (open states: the backlog)",
            labels=["kind", "state"],
        )
        finished = CounterMetricFamily(
            "lakewarden_tasks_finished",
            "tasks that reached a terminal state, by kind and outcome",
            labels=["kind", "outcome"],
        )
        # Open tasks are few, counted live (ix_tasks_state); finished ones from the rollups.
        for kind, state, n in self._rows(
            f"SELECT kind, state, count(*) FROM tasks WHERE {sql_in('state', OPEN_TASK_STATES)} "
            "GROUP BY 1, 2"
        ):
            tasks.add_metric([kind, state], n)
        for kind, states in sorted(self.rollups.get("task_state", {}).items()):
            for state, (n, _) in sorted(states.items()):
                if n:
                    tasks.add_metric([kind, state], n)
                    finished.add_metric([kind, state], n)
        oldest = GaugeMetricFamily(
            "lakewarden_task_oldest_waiting_seconds",
            "age of the oldest task waiting to be planned or run",
            labels=["kind"],
        )
        for kind, age in self._rows(
            "SELECT kind, extract(epoch FROM now() - min(created_at)) FROM tasks "
            f"WHERE {sql_in('state', WAITING_TASK_STATES)} GROUP BY kind"
        ):
            oldest.add_metric([kind], float(age))
        yield from (tasks, finished, oldest)

    def _histograms(self) -> Iterator[Metric]:
        for name, help_text, family_name, buckets in (
            (
                "lakewarden_task_latency_seconds",
                "creation to end of finished tasks (succeeded, skipped, failed)",
                "task_latency",
                TASK_LATENCY_BUCKETS,
            ),
            (
                "lakewarden_job_duration_seconds",
                "duration of ended Spark job runs",
                "job_duration",
                JOB_DURATION_BUCKETS,
            ),
        ):
            family = HistogramMetricFamily(name, help_text, labels=["kind"])
            for kind, by_le in sorted(self.rollups.get(family_name, {}).items()):
                n = sum(c for c, _ in by_le.values())
                if not n:
                    continue
                counts = {float(le): c for le, (c, _) in by_le.items()}  # "+Inf" reads inf
                cumulative, points = 0, []
                for le in buckets:
                    cumulative += counts.get(float(le), 0)
                    points.append((floatToGoString(le), cumulative))
                family.add_metric(
                    [kind],
                    buckets=[*points, ("+Inf", n)],
                    sum_value=sum(t for _, t in by_le.values()),
                )
            yield family

    def _job_runs(self) -> Iterator[Metric]:
        ended = CounterMetricFamily(
            "lakewarden_job_runs",
            "Spark job runs that ended, by kind and outcome (failures included)",
            labels=["kind", "state"],
        )
        running = GaugeMetricFamily(
            "lakewarden_job_runs_running", "Spark job runs running now", labels=["kind"]
        )
        for kind, states in sorted(self.rollups.get("run_state", {}).items()):
            for state, (n, _) in sorted(states.items()):
                if n:
                    ended.add_metric([kind, state], n)
        # Running runs are few (ix_job_runs_running).
        for kind, n in self._rows(
            "SELECT t.kind, count(*) FROM job_runs r JOIN tasks t ON t.id = r.task_id "
            f"WHERE {sql_in('r.state', RunState.RUNNING)} GROUP BY 1"
        ):
            running.add_metric([kind], n)
        cpu = CounterMetricFamily(
            "lakewarden_spark_executor_cpu_seconds",
            "Spark executor CPU the ended runs used (Spark's own task metrics), by kind",
            labels=["kind"],
        )
        for kind, labels in sorted(self.rollups.get("spark_cpu", {}).items()):
            measured = sum(n for n, _ in labels.values())
            if measured:
                cpu.add_metric([kind], sum(total for _, total in labels.values()))
        yield from (ended, running, cpu)

    def _alerts(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "lakewarden_alerts_open",
            "open alerts by rule and severity",
            labels=["rule", "severity"],
        )
        for rule, severity, n in self._rows(
            "SELECT rule, severity, count(*) FROM alerts "
            f"WHERE {sql_in('state', AlertState.RESOLVED, negate=True)} GROUP BY 1, 2"
        ):
            family.add_metric([rule, severity], n)
        yield family

    def _holds(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "lakewarden_kinds_held",
            "kinds held on a table after a failure that would repeat, by kind and rule "
            "(lifted by acknowledging the alert or POST .../kinds/{kind}/resume)",
            labels=["kind", "rule"],
        )
        for kind, rule, n in self._rows(
            "SELECT kind, rule, count(*) FROM kind_holds GROUP BY 1, 2"
        ):
            family.add_metric([kind, rule], n)
        yield family

    def _processes(self) -> Iterator[Metric]:
        age = GaugeMetricFamily(
            "lakewarden_process_heartbeat_age_seconds",
            "seconds since each process's last heartbeat (seen in the last hour)",
            labels=["role", "holder"],
        )
        up = GaugeMetricFamily(
            "lakewarden_process_up",
            "1 while the process's heartbeat is fresher than stale_after_s",
            labels=["role", "holder"],
        )
        for role, holder, seconds in self._rows(
            "SELECT role, process_id, extract(epoch FROM now() - last_seen) "
            "FROM process_heartbeats WHERE last_seen > now() - make_interval(secs => :horizon) "
            "ORDER BY role, process_id",
            horizon=HEARTBEAT_HORIZON_S,
        ):
            age.add_metric([role, holder], max(0.0, float(seconds)))
            up.add_metric([role, holder], 1 if seconds <= self.settings.stale_after_s else 0)
        yield from (age, up)

    def _tables(self) -> Iterator[Metric]:
        limit = self.settings.metrics_max_tables
        total = self.session.execute(
            text("SELECT count(*) FROM managed_tables WHERE retired_at IS NULL")
        ).scalar_one()
        # The least healthy first, never measured last: the guard keeps the tables on-call
        # most needs to see.
        rows = self._rows(
            "SELECT id, catalog, namespace, name, health_score FROM managed_tables "
            "WHERE retired_at IS NULL ORDER BY health_score ASC NULLS LAST, id LIMIT :limit",
            limit=limit,
        )
        yield GaugeMetricFamily("lakewarden_tables", "managed tables (not retired)", value=total)
        yield GaugeMetricFamily(
            "lakewarden_tables_omitted",
            "managed tables left out of the per-table series (LAKEWARDEN_METRICS_MAX_TABLES)",
            value=total - len(rows),
        )
        labels = ["catalog", "namespace", "table"]
        score = GaugeMetricFamily(
            "lakewarden_table_health_score",
            "the table's last measured health score (0-100)",
            labels=labels,
        )
        names = {}
        for table_id, catalog, namespace, name, health in rows:
            names[table_id] = [catalog, namespace, name]
            if health is not None:
                score.add_metric(names[table_id], health)
        success = GaugeMetricFamily(
            "lakewarden_table_last_success_age_seconds",
            "seconds since the table's last succeeded task of each kind",
            labels=[*labels, "kind"],
        )
        if names:
            # Ages against the database's clock, which wrote updated_at.
            now = self.session.execute(text("SELECT now()")).scalar_one()
            for table_id, kinds in sorted(last_success_by_kind(self.session, list(names)).items()):
                for kind, at in sorted(kinds.items()):
                    age = (now - at).total_seconds()
                    success.add_metric([*names[table_id], kind], max(0.0, age))
        yield from (score, success)


@router.get(
    "/metrics",
    response_class=Response,
    responses={
        200: {"content": {CONTENT_TYPE_LATEST: {}}, "description": "Prometheus text format"},
        **errors.as_json(errors.APP_RESPONSES),
    },
)
def get_metrics(session: SessionDep, access: OptionalAccessDep, rt: RuntimeDep) -> Response:
    """Prometheus text format. Needs a viewer of everything, unless `metrics_public`."""
    if access is not None:
        access.need(Role.viewer, None, None)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(LakewardenCollector(session, rt.settings))
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
