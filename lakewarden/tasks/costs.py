"""What maintenance cost, rolled up (issue 32 §3): each run's Spark metrics (`metrics.cost`,
Spark's own task metrics: `lakewarden.spark.cost`) and what its commit wrote (the committed
snapshot's summary, as ingested: Spark reports no output metrics for Iceberg's DataSource V2
writes), per table, namespace, kind, pool or day. The API (`GET /api/v1/costs`, the CLI's
`lakewarden costs`) and the dashboard's costs page read it here."""

from __future__ import annotations

import csv
import io
from datetime import datetime
from typing import Any, Literal, get_args

from sqlalchemy import ColumnElement, Float, and_, cast, func, literal_column, select
from sqlalchemy.orm import Session

from lakewarden.db.models import JobRun, ManagedTable, Task, TimelineEvent

By = Literal["table", "namespace", "kind", "pool", "day"]
BY: tuple[str, ...] = get_args(By)
# The sums of a group from the runs' metrics.cost: output name -> its field.
SPARK = {
    "executor_cpu_s": "executor_cpu_s",
    "executor_run_s": "executor_run_s",
    "input_bytes": "input_bytes",
    "shuffle_bytes": "shuffle_write_bytes",
}
# ... and from the committed snapshot's summary: output name -> its field.
WRITTEN = {"written_bytes": "added-files-size", "files_written": "added-data-files"}
FIELDS = ("key", "runs", "measured_runs", *SPARK, *WRITTEN, "wall_s")
MAX_GROUPS = 1000


def _keys(by: By) -> list[Any]:
    keys: dict[str, list[Any]] = {
        "table": [ManagedTable.catalog, ManagedTable.namespace, ManagedTable.name],
        "namespace": [ManagedTable.catalog, ManagedTable.namespace],
        "kind": [Task.kind],
        "pool": [Task.pool],
        "day": [func.date_trunc("day", JobRun.finished_at)],
    }
    return keys[by]


def _key_of(by: By, values: tuple[Any, ...]) -> str:
    if by == "day":
        return str(values[0].date().isoformat())
    return ".".join(str(v) for v in values)  # catalog.namespace[.name], a kind, a pool


def rollup(
    session: Session, by: By, since: datetime, visible: ColumnElement[bool]
) -> tuple[list[dict[str, Any]], bool]:
    """The groups of the runs finished since `since` on tables `visible` selects,
    costliest first (executor CPU), at most MAX_GROUPS; and whether there were more."""
    keys = _keys(by)
    cost = JobRun.metrics["cost"]
    sums = [
        func.coalesce(func.sum(cast(cost[field].astext, Float)), 0.0).label(name)
        for name, field in SPARK.items()
    ] + [
        func.coalesce(func.sum(cast(TimelineEvent.summary[field].astext, Float)), 0.0).label(name)
        for name, field in WRITTEN.items()
    ]
    stmt = (
        select(
            *keys,
            func.count().label("runs"),
            func.count(cost).label("measured_runs"),
            *sums,
            (func.coalesce(func.sum(JobRun.duration_ms), 0) / 1000.0).label("wall_s"),
        )
        .join(Task, Task.id == JobRun.task_id)
        .join(ManagedTable, ManagedTable.id == Task.table_id)
        .outerjoin(
            TimelineEvent,
            and_(
                TimelineEvent.table_id == Task.table_id,
                TimelineEvent.snapshot_id == JobRun.committed_snapshot_id,
            ),
        )
        .where(and_(JobRun.finished_at >= since, visible))
        .group_by(*keys)
        .order_by(literal_column("executor_cpu_s").desc(), *keys)
        .limit(MAX_GROUPS + 1)
    )
    found = session.execute(stmt).all()
    rows = [
        {
            "key": _key_of(by, tuple(r[: len(keys)])),
            "runs": r.runs,
            "measured_runs": r.measured_runs,
            **{name: round(float(getattr(r, name)), 3) for name in [*SPARK, *WRITTEN]},
            "wall_s": round(float(r.wall_s), 3),
        }
        for r in found[:MAX_GROUPS]
    ]
    return rows, len(found) > MAX_GROUPS


def as_csv(by: str, rows: list[dict[str, Any]]) -> str:
    """One line per group, the group's column named after `by`."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow([by, *FIELDS[1:]])
    for row in rows:
        writer.writerow([row[f] for f in FIELDS])
    return buffer.getvalue()
