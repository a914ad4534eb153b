"""What maintenance cost (issue 32 §3): each run's Spark metrics (`metrics.cost`, from
Spark's own task metrics: `lakewarden.spark.cost`) and what its commit wrote (the committed
snapshot's summary, as ingested: Spark reports no output metrics for Iceberg's DataSource V2
writes) rolled up per table, namespace, kind, pool or day, within the caller's viewer
grants; as JSON or CSV."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query, Response
from sqlalchemy import Float, and_, cast, func, literal_column, select

from lakewarden.auth.grants import Role
from lakewarden.db.models import JobRun, ManagedTable, Task, TimelineEvent
from services.api.access import AccessDep
from services.api.deps import SessionDep
from services.api.schemas import CostRowOut, CostsOut

router = APIRouter(prefix="/api/v1/costs", tags=["tasks"])

By = Literal["table", "namespace", "kind", "pool", "day"]
# The sums of a group: output name -> the run's metrics.cost field.
SUMS = {
    "executor_cpu_s": "executor_cpu_s",
    "executor_run_s": "executor_run_s",
    "input_bytes": "input_bytes",
    "shuffle_bytes": "shuffle_write_bytes",
}
# What the committed snapshot wrote: output name -> its summary's field.
WRITTEN = {"written_bytes": "added-files-size", "files_written": "added-data-files"}
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


@router.get("", response_model=CostsOut)
def list_costs(
    session: SessionDep,
    access: AccessDep,
    by: Annotated[By, Query(description="what to roll up by")] = "table",
    since: Annotated[
        datetime | None,
        Query(description="runs finished at or after this (ISO 8601); default: 7 days ago"),
    ] = None,
    format: Annotated[Literal["json", "csv"], Query(description="csv: one row per group")] = "json",
) -> Any:
    """The Spark cost of the runs that finished since `since`, per group, costliest first
    (by executor CPU): runs, runs with Spark metrics, executor CPU and task seconds, bytes
    read, shuffle bytes, bytes and data files their commits wrote, and wall seconds."""
    after = since or datetime.now(UTC) - timedelta(days=7)
    if after.tzinfo is None:
        after = after.replace(tzinfo=UTC)  # a time without a zone is UTC
    if after > datetime.now(UTC):
        raise HTTPException(422, f"since: {after.isoformat()} is in the future")
    keys = _keys(by)
    cost = JobRun.metrics["cost"]
    sums = [
        func.coalesce(func.sum(cast(cost[field].astext, Float)), 0.0).label(name)
        for name, field in SUMS.items()
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
        .where(
            and_(
                JobRun.finished_at >= after,
                access.scope(Role.viewer, ManagedTable.catalog, ManagedTable.namespace),
            )
        )
        .group_by(*keys)
        .order_by(literal_column("executor_cpu_s").desc(), *keys)
        .limit(MAX_GROUPS + 1)
    )
    found = session.execute(stmt).all()
    rows = [
        CostRowOut(
            key=_key_of(by, tuple(r[: len(keys)])),
            runs=r.runs,
            measured_runs=r.measured_runs,
            wall_s=round(float(r.wall_s), 3),
            **{name: round(float(getattr(r, name)), 3) for name in [*SUMS, *WRITTEN]},
        )
        for r in found[:MAX_GROUPS]
    ]
    out = CostsOut(by=by, since=after, truncated=len(found) > MAX_GROUPS, items=rows)
    if format == "csv":
        return _csv(out)
    return out


def _csv(out: CostsOut) -> Response:
    buffer = io.StringIO()
    fields = list(CostRowOut.model_fields)
    writer = csv.DictWriter(buffer, fieldnames=[out.by, *fields[1:]])
    writer.writeheader()
    for row in out.items:
        values = row.model_dump()
        writer.writerow({out.by: values.pop("key"), **values})
    return Response(
        buffer.getvalue(),
        media_type="text/csv",
        headers={"Content-Disposition": f'attachment; filename="costs-by-{out.by}.csv"'},
    )
