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
  Prometheus cost);
- per pool: running and runnable queued jobs, its limit now, an elastic pool's capacity,
  its bounds and the leader's changes to it (`lakewarden.capacity`).

A counter whose rows move back (a retried task) drops; Prometheus reads that as a reset,
which `rate()` handles. Rows deleted (retention, a purge) take nothing back: counters
never drop as history is pruned.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
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
from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from lakewarden import capacity
from lakewarden.auth.grants import Role
from lakewarden.catalogs.regions import region_leaders, table_region
from lakewarden.db.locks import DBLocks
from lakewarden.db.models import ManagedTable, Task
from lakewarden.leader import leader_status
from lakewarden.settings import DEFAULT_REGION, Settings
from lakewarden.states import (
    OPEN_TASK_STATES,
    WAITING_TASK_STATES,
    AlertState,
    RunState,
    sql_in,
)
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
        yield from self._pools()
        yield from self._tables()

    def _pools(self) -> Iterator[Metric]:
        """Each pool's work and limit; an elastic pool's capacity, its bounds, and the
        leader's changes to it (lakewarden.capacity)."""
        pools = capacity.pools_view(self.session, self.settings, decisions=0)
        families = {
            name: GaugeMetricFamily(f"lakewarden_pool_{name}", doc, labels=["pool"])
            for name, doc in (
                ("running", "jobs of the pool running now"),
                ("queued", "runnable planned tasks of the pool (due, their table idle)"),
                ("limit", "jobs the pool may run at once now (listed pools with a limit)"),
                ("capacity", "an elastic pool's capacity now (POOL_CAPACITY)"),
                ("capacity_min", "an elastic pool's minimum capacity"),
                ("capacity_max", "an elastic pool's maximum capacity"),
            )
        }
        for p in pools:
            families["running"].add_metric([p["pool"]], p["running"])
            families["queued"].add_metric([p["pool"]], p["queued"])
            if p["limit"] is not None:
                families["limit"].add_metric([p["pool"]], p["limit"])
            if (elastic := p["elastic"]) is not None:
                families["capacity"].add_metric([p["pool"]], elastic["capacity"])
                families["capacity_min"].add_metric([p["pool"]], elastic["min"])
                families["capacity_max"].add_metric([p["pool"]], elastic["max"])
        yield from families.values()
        changes = CounterMetricFamily(
            "lakewarden_pool_capacity_changes",
            "the leader's changes of an elastic pool's capacity, by direction",
            labels=["pool", "direction"],
        )
        for pool, direction, n in self._rows(
            "SELECT pool, CASE WHEN after > before THEN 'up' ELSE 'down' END, count(*) "
            "FROM capacity_decisions WHERE pool = ANY(:pools) GROUP BY 1, 2",
            pools=list(self.settings.pool_capacity),
        ):
            changes.add_metric([pool, direction], n)
        yield changes

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
        open_rows = self._rows(
            f"SELECT kind, state, count(*) FROM tasks WHERE {sql_in('state', OPEN_TASK_STATES)} "
            "GROUP BY 1, 2"
        )
        for kind, state, n in open_rows:
            tasks.add_metric([kind, state], n)
        yield self._region_backlog(open_rows)
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

    def _region_backlog(self, open_rows: list[Any]) -> GaugeMetricFamily:
        """Open tasks per region and state: a region whose leader is gone (its
        `lakewarden_region_leader` 0) shows its backlog growing. One region: the counts
        above, no query; more: the same open rows, each with its table's region."""
        family = GaugeMetricFamily(
            "lakewarden_region_tasks",
            "open tasks (the backlog) per region, by state",
            labels=["region", "state"],
        )
        counts: dict[tuple[str, str], int] = {}
        if self.settings.regions == [DEFAULT_REGION]:
            for _, state, n in open_rows:
                counts[(DEFAULT_REGION, state)] = counts.get((DEFAULT_REGION, state), 0) + n
        else:
            region = table_region().label("region")
            rows = self.session.execute(
                select(region, Task.state, func.count())
                .join(ManagedTable, ManagedTable.id == Task.table_id)
                .where(Task.state.in_(OPEN_TASK_STATES))
                .group_by(region, Task.state)
            )
            counts = {(r, state): n for r, state, n in rows}
        for (r, state), n in sorted(counts.items()):
            family.add_metric([r, state], n)
        return family

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
            "Spark executor CPU the ended runs used (Spark's own task metrics, plus the driver "
            "CPU of work done in their place: an Arrow-rewritten compaction's), by kind",
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
        total = self.session.execute(
            text("SELECT count(*) FROM managed_tables WHERE retired_at IS NULL")
        ).scalar_one()
        yield GaugeMetricFamily("lakewarden_tables", "managed tables (not retired)", value=total)
        yield GaugeMetricFamily(
            "lakewarden_tables_omitted",
            "managed tables left out of the per-table series (LAKEWARDEN_METRICS_MAX_TABLES)",
            value=max(0, total - self.settings.metrics_max_tables),
        )


# The per-table series, rendered here rather than by prometheus_client: at the default
# 1,000 tables they are ~6,000 samples, and the client escapes every label of every sample
# (most of a scrape's time, ~0.4 s on a busy 2-core machine). These lines are the bytes it
# would write (tests/unit/test_metrics_exposition.py compares them), with each table's
# labels escaped once.
_HEALTH = "lakewarden_table_health_score"
_HEALTH_HELP = "the table's last measured health score (0-100)"
_SUCCESS = "lakewarden_table_last_success_age_seconds"
_SUCCESS_HELP = "seconds since the table's last succeeded task of each kind"

# The least healthy first, never measured last: the guard keeps the tables on-call most
# needs to see. Ages against the database's clock, which wrote the times.
_TABLE_SERIES_SQL = """
WITH listed AS (
    SELECT id, catalog, namespace, name, health_score FROM managed_tables
    WHERE retired_at IS NULL ORDER BY health_score ASC NULLS LAST, id LIMIT :limit)
SELECT l.id, l.catalog, l.namespace, l.name, l.health_score, s.kind,
    greatest(0, extract(epoch FROM now() - s.at))
FROM listed l LEFT JOIN table_last_success s ON s.table_id = l.id
"""  # in no order: sorting 6,000 rows by text took longer than the join


def _label_value(value: str) -> str:
    """A label value as the text format quotes it (prometheus_client's own escaping)."""
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def table_series(session: Session, settings: Settings) -> bytes:
    """The per-table families (`metrics_max_tables` tables, the least healthy first), in
    the text format: the health score, and the age of the last success per kind."""
    rows = session.execute(text(_TABLE_SERIES_SQL), {"limit": settings.metrics_max_tables})
    return render_table_series(rows.all())


def render_table_series(
    rows: Iterable[tuple[int, str, str, str, float | None, str | None, Any]],
) -> bytes:
    """`_TABLE_SERIES_SQL`'s rows, in any order, as the two families' text."""
    health: list[str] = [f"# HELP {_HEALTH} {_HEALTH_HELP}\n", f"# TYPE {_HEALTH} gauge\n"]
    success: list[str] = [f"# HELP {_SUCCESS} {_SUCCESS_HELP}\n", f"# TYPE {_SUCCESS} gauge\n"]
    # Each table's labels, escaped once, split where `kind` goes: the client sorts labels
    # by name (catalog, kind, namespace, table).
    labels_of: dict[int, tuple[str, str]] = {}
    for table_id, catalog, namespace, name, score, kind, age in rows:
        labels = labels_of.get(table_id)
        if labels is None:
            c, n, t = (_label_value(v) for v in (catalog, namespace, name))
            labels = labels_of[table_id] = (f'catalog="{c}",', f'namespace="{n}",table="{t}"')
            if score is not None:
                health.append(f"{_HEALTH}{{{labels[0]}{labels[1]}}} {floatToGoString(score)}\n")
        if kind is not None:
            both = f'{labels[0]}kind="{_label_value(kind)}",{labels[1]}'
            success.append(f"{_SUCCESS}{{{both}}} {floatToGoString(float(age))}\n")
    return "".join(health + success).encode("utf-8")


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
    return Response(exposition(session, rt.settings), media_type=CONTENT_TYPE_LATEST)


def exposition(session: Session, settings: Settings) -> bytes:
    """What a scrape answers: every family, in Prometheus' text format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(LakewardenCollector(session, settings))
    return generate_latest(registry) + table_series(session, settings)
