"""Prometheus metrics, computed from Postgres on each scrape, so every API replica
reports the same numbers and none keeps state."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import PlainTextResponse
from sqlalchemy import text

from lakewarden.auth.grants import Role
from lakewarden.db.locks import DBLocks
from lakewarden.states import FINISHED_TASK_STATES, WAITING_TASK_STATES, AlertState, sql_in
from services.api import errors
from services.api.access import OptionalAccessDep
from services.api.deps import SessionDep

router = APIRouter(tags=["operations"])

_QUERIES: list[tuple[str, str, str, str]] = [
    (
        "lakewarden_tasks",
        "gauge",
        "tasks by kind and state",
        "SELECT kind, state, count(*) FROM tasks GROUP BY kind, state",
    ),
    (
        "lakewarden_task_oldest_waiting_seconds",
        "gauge",
        "age of the oldest task waiting to be planned or run",
        "SELECT kind, extract(epoch FROM now() - min(created_at)) FROM tasks "
        f"WHERE {sql_in('state', WAITING_TASK_STATES)} GROUP BY kind",
    ),
    (
        "lakewarden_task_latency_seconds",
        "gauge",
        "creation to end of tasks finished in the last 24 h (quantile)",
        "SELECT kind, q, percentile_cont(q) WITHIN GROUP (ORDER BY "
        "extract(epoch FROM updated_at - created_at)) FROM tasks, "
        f"unnest(ARRAY[0.5, 0.9]) AS q WHERE {sql_in('state', FINISHED_TASK_STATES)} "
        "AND updated_at > now() - interval '24 hours' GROUP BY kind, q",
    ),
    (
        "lakewarden_job_runs",
        "gauge",
        "Spark job runs by kind and outcome",
        "SELECT t.kind, r.state, count(*) FROM job_runs r JOIN tasks t ON t.id = r.task_id "
        "GROUP BY t.kind, r.state",
    ),
    (
        "lakewarden_job_duration_seconds",
        "gauge",
        "duration of job runs finished in the last 24 h (quantile)",
        "SELECT t.kind, q, percentile_cont(q) WITHIN GROUP (ORDER BY r.duration_ms / 1000.0) "
        "FROM job_runs r JOIN tasks t ON t.id = r.task_id, unnest(ARRAY[0.5, 0.9]) AS q "
        "WHERE r.finished_at > now() - interval '24 hours' AND r.duration_ms IS NOT NULL "
        "GROUP BY t.kind, q",
    ),
    (
        "lakewarden_alerts_open",
        "gauge",
        "open alerts by rule and severity",
        "SELECT rule, severity, count(*) FROM alerts "
        f"WHERE {sql_in('state', AlertState.RESOLVED, negate=True)} "
        "GROUP BY rule, severity",
    ),
]
_LABELS = {
    "lakewarden_tasks": ("kind", "state"),
    "lakewarden_task_oldest_waiting_seconds": ("kind",),
    "lakewarden_task_latency_seconds": ("kind", "quantile"),
    "lakewarden_job_runs": ("kind", "state"),
    "lakewarden_job_duration_seconds": ("kind", "quantile"),
    "lakewarden_alerts_open": ("rule", "severity"),
}


def _line(name: str, labels: dict[str, object], value: float | None) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return f"{name}{{{inner}}} {float(value or 0):g}" if inner else f"{name} {float(value or 0):g}"


@router.get(
    "/metrics",
    response_class=PlainTextResponse,
    responses=errors.as_json(errors.APP_RESPONSES),
)
def get_metrics(session: SessionDep, access: OptionalAccessDep) -> str:
    """Prometheus text format. Needs a viewer of everything, unless `metrics_public`."""
    if access is not None:
        access.need(Role.viewer, None, None)
    out: list[str] = []
    lease = session.execute(
        text(
            "SELECT epoch, extract(epoch FROM expires_at - now()) FROM leader_lease "
            "WHERE name = :lease"
        ),
        {"lease": DBLocks.SCHEDULER_LEASE},
    ).one_or_none()
    out += [
        "# HELP lakewarden_scheduler_leader 1 while a scheduler holds a live lease",
        "# TYPE lakewarden_scheduler_leader gauge",
        _line("lakewarden_scheduler_leader", {}, 1 if lease and lease[1] > 0 else 0),
        "# HELP lakewarden_scheduler_epoch the leader's fencing token",
        "# TYPE lakewarden_scheduler_epoch gauge",
        _line("lakewarden_scheduler_epoch", {}, lease[0] if lease else 0),
    ]
    for name, kind, help_text, sql in _QUERIES:
        out += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        for row in session.execute(text(sql)):
            *labels, value = row
            out.append(_line(name, dict(zip(_LABELS[name], labels, strict=True)), value))
    return "\n".join(out) + "\n"
