"""What maintenance cost, per table, namespace, kind, pool or day (`lakewarden.tasks.costs`),
within the caller's viewer grants; as JSON or CSV."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query, Response

from lakewarden.auth.grants import Role
from lakewarden.db.models import ManagedTable
from lakewarden.tasks import costs
from services.api.access import AccessDep
from services.api.deps import SessionDep
from services.api.schemas import CostRowOut, CostsOut

router = APIRouter(prefix="/api/v1/costs", tags=["tasks"])


def window_start(since: datetime | None) -> datetime:
    """`since` (default: 7 days ago; a time without a zone is UTC); a 422 in the future."""
    after = since or datetime.now(UTC) - timedelta(days=7)
    if after.tzinfo is None:
        after = after.replace(tzinfo=UTC)
    if after > datetime.now(UTC):
        raise HTTPException(422, f"since: {after.isoformat()} is in the future")
    return after


@router.get("", response_model=CostsOut)
def list_costs(
    session: SessionDep,
    access: AccessDep,
    by: Annotated[costs.By, Query(description="what to roll up by")] = "table",
    since: Annotated[
        datetime | None,
        Query(description="runs finished at or after this (ISO 8601); default: 7 days ago"),
    ] = None,
    format: Annotated[Literal["json", "csv"], Query(description="csv: one row per group")] = "json",
) -> Any:
    """The Spark cost of the runs that finished since `since`, per group, costliest first
    (by executor CPU): runs, runs with Spark metrics, executor CPU and task seconds, bytes
    read, shuffle bytes, bytes and data files their commits wrote, and wall seconds."""
    after = window_start(since)
    visible = access.scope(Role.viewer, ManagedTable.catalog, ManagedTable.namespace)
    rows, truncated = costs.rollup(session, by, after, visible)
    if format == "csv":
        return Response(
            costs.as_csv(by, rows),
            media_type="text/csv",
            headers={"Content-Disposition": f'attachment; filename="costs-by-{by}.csv"'},
        )
    items = [CostRowOut.model_validate(r) for r in rows]
    return CostsOut(by=by, since=after, truncated=truncated, items=items)
