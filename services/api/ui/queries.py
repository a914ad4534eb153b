"""What the dashboard shows that no API route answers: per-table facts for one page of the
overview, the backlog, live processes and the 24 h trends. Every query is limited to what
the caller may see (`where`: `access.scope(...)` on ManagedTable), and reads through
indexes: the page's table ids (ix_tasks_table_id), the open states (ix_tasks_state)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, Float, and_, cast, func, or_, select
from sqlalchemy.orm import Session

from lakewarden.db.models import JobRun, ManagedTable, ProcessHeartbeat, Task
from lakewarden.states import OPEN_TASK_STATES, TaskState
from lakewarden.tasks.repo import last_success_by_kind

FAILED_WINDOW = timedelta(hours=24)  # "failed" on the overview: failed in the last day
TREND_WINDOW = timedelta(hours=24)


@dataclass
class TableFacts:
    open_tasks: int = 0
    failed_tasks: int = 0  # failed within FAILED_WINDOW
    last_success: dict[str, datetime] = field(default_factory=dict)  # kind -> when


def table_facts(session: Session, ids: Sequence[int], now: datetime) -> dict[int, TableFacts]:
    """Open and recently failed task counts and the last success per kind, for the tables
    `ids` (what fires comes with the tables list: TableOut.health_signals)."""
    facts = {i: TableFacts() for i in ids}
    if not ids:
        return facts
    is_open = Task.state.in_(OPEN_TASK_STATES)
    counts = session.execute(
        select(
            Task.table_id,
            func.count().filter(is_open),
            func.count().filter(
                Task.state == TaskState.FAILED, Task.updated_at >= now - FAILED_WINDOW
            ),
        )
        .where(Task.table_id.in_(ids))
        .group_by(Task.table_id)
    )
    for table_id, open_n, failed_n in counts:
        facts[table_id].open_tasks, facts[table_id].failed_tasks = open_n, failed_n
    for table_id, kinds in last_success_by_kind(session, ids).items():
        facts[table_id].last_success = kinds
    return facts


def backlog(session: Session, where: ColumnElement[bool]) -> list[tuple[str, str, int]]:
    """(kind, state, count) of the open tasks the caller may see."""
    rows = session.execute(
        select(Task.kind, Task.state, func.count())
        .join(ManagedTable, ManagedTable.id == Task.table_id)
        .where(Task.state.in_(OPEN_TASK_STATES), where)
        .group_by(Task.kind, Task.state)
        .order_by(Task.kind, Task.state)
    )
    return [(kind, state, n) for kind, state, n in rows]


def processes(session: Session, now: datetime, live_within_s: float) -> list[dict[str, Any]]:
    """Every process that beat in the last ten minutes, `live` if within `live_within_s`."""
    rows = session.scalars(
        select(ProcessHeartbeat)
        .where(ProcessHeartbeat.last_seen >= now - timedelta(minutes=10))
        .order_by(ProcessHeartbeat.role, ProcessHeartbeat.process_id)
    )
    return [
        {
            "process_id": p.process_id,
            "role": p.role,
            "hostname": p.hostname,
            "pid": p.pid,
            "started_at": p.started_at,
            "last_seen": p.last_seen,
            "age_s": (now - p.last_seen).total_seconds(),
            "live": (now - p.last_seen).total_seconds() <= live_within_s,
            "current_task_id": p.current_task_id,
        }
        for p in rows
    ]


Series = dict[str, list[tuple[datetime, float]]]


@dataclass(frozen=True)
class Trends:
    start: datetime
    end: datetime
    backlog: Series  # kind -> open tasks at each hour
    latency_s: Series  # kind -> mean created -> succeeded, by the hour it ended
    job_s: Series  # kind -> mean Spark run duration, by the hour it ended


def trends(session: Session, where: ColumnElement[bool], now: datetime) -> Trends:
    """The last 24 h, hour by hour, per kind: each point at the end of its hour (the
    current hour's at the next full hour, where the plot ends)."""
    end = now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    start = end - TREND_WINDOW
    hours = select(
        func.generate_series(start + timedelta(hours=1), end, timedelta(hours=1)).label("at")
    ).subquery()
    # Open at an hour: created before it and still open, or ended after it. Only tasks
    # open now or that changed within the window can be.
    ended_after = and_(Task.state.not_in(OPEN_TASK_STATES), Task.updated_at > hours.c.at)
    backlog_rows = session.execute(
        select(hours.c.at, Task.kind, func.count(Task.id))
        .join(
            Task,
            and_(Task.created_at <= hours.c.at, or_(Task.state.in_(OPEN_TASK_STATES), ended_after)),
        )
        .join(ManagedTable, ManagedTable.id == Task.table_id)
        .where(or_(Task.state.in_(OPEN_TASK_STATES), Task.updated_at >= start), where)
        .group_by(hours.c.at, Task.kind)
        .order_by(hours.c.at)
    )
    hour = func.date_trunc("hour", Task.updated_at) + timedelta(hours=1)
    seconds = func.extract("epoch", Task.updated_at - Task.created_at)
    latency_rows = session.execute(
        select(hour, Task.kind, func.avg(seconds))
        .join(ManagedTable, ManagedTable.id == Task.table_id)
        .where(Task.state == TaskState.SUCCEEDED, Task.updated_at >= start, where)
        .group_by(hour, Task.kind)
        .order_by(hour)
    )
    run_hour = func.date_trunc("hour", JobRun.finished_at) + timedelta(hours=1)
    job_rows = session.execute(
        select(run_hour, Task.kind, func.avg(cast(JobRun.duration_ms, Float) / 1000.0))
        .join(Task, Task.id == JobRun.task_id)
        .join(ManagedTable, ManagedTable.id == Task.table_id)
        .where(JobRun.finished_at >= start, JobRun.duration_ms.is_not(None), where)
        .group_by(run_hour, Task.kind)
        .order_by(run_hour)
    )
    return Trends(
        start=start,
        end=end,
        backlog=_series(backlog_rows),
        latency_s=_series(latency_rows),
        job_s=_series(job_rows),
    )


def _series(rows: Any) -> Series:
    out: Series = defaultdict(list)
    for at, kind, value in rows:
        out[kind].append((at, float(value)))
    return dict(sorted(out.items()))
