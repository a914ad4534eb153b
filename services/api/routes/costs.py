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


def window_start(since: str | None) -> datetime:
    """`since` as ISO 8601 (default: 7 days ago; a time without a zone is UTC; a bare
    number is a 422, never read as epoch seconds). One in the future is a window with no
    run yet: an empty answer, not an error."""
    if since is None:
        return datetime.now(UTC) - timedelta(days=7)
    try:
        after = datetime.fromisoformat(since)
    except ValueError:
        raise HTTPException(422, f"since: {since!r} is not an ISO 8601 date-time") from None
    return after.replace(tzinfo=UTC) if after.tzinfo is None else after


@router.get(
    "",
    response_model=CostsOut,
    responses={
        200: {
            "content": {"text/csv": {"schema": {"type": "string"}}},
            "description": "JSON, or with format=csv one line per group",
        }
    },
)
def list_costs(
    session: SessionDep,
    access: AccessDep,
    by: Annotated[costs.By, Query(description="what to roll up by")] = "table",
    since: Annotated[
        str | None,
        Query(
            max_length=64,
            description="runs finished at or after this (ISO 8601); default: 7 days ago",
            json_schema_extra={"format": "date-time"},
        ),
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
