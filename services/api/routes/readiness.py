"""Partition readiness, for downstream schedulers (`lakewarden.readiness`): which partitions
are ready (the leader's round records them), and the writer's completeness watermark."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query

from lakewarden import readiness
from lakewarden.auth.grants import Role
from lakewarden.db.models import PartitionReadiness
from lakewarden.db.paging import keyset_page
from services.api import errors
from services.api.access import AccessDep, TableDep
from services.api.deps import SessionDep
from services.api.paging import PageDep
from services.api.policies import current_policy
from services.api.schemas import PartitionReadinessPage, WatermarkIn, WatermarkOut

router = APIRouter(prefix="/api/v1/catalogs/{catalog}/tables", tags=["readiness"])

# A watermark says every row before it is written: one in the future is a clock or unit
# mistake (this much skew between the writer's clock and ours is allowed).
MAX_FUTURE = timedelta(minutes=5)


@router.get(
    "/{namespace}/{name}/partitions",
    response_model=PartitionReadinessPage,
    responses=errors.documented(notes=errors.ON_TABLE),
)
def list_partitions(
    row: TableDep,
    session: SessionDep,
    page: PageDep,
    ready: Annotated[bool | None, Query(description="only ready (true) or not ready")] = None,
) -> PartitionReadinessPage:
    """The partitions of the table's readiness column, newest recorded first: ready or not,
    since when, on which snapshot, why, and their tag. Empty while readiness is disabled or
    not yet judged (the leader judges it every alert interval)."""
    policy = current_policy(session, row)
    column = policy.readiness.partition
    if column is None:
        return PartitionReadinessPage(items=[], next_cursor=None)
    query = readiness.partitions_query(row.id, column, ready)
    return PartitionReadinessPage.of(keyset_page(session, query, PartitionReadiness.id, page))


@router.post(
    "/{namespace}/{name}/watermark",
    response_model=WatermarkOut,
    responses=errors.documented(
        409,
        body=True,
        notes={
            **errors.ON_TABLE,
            409: "readiness is not enabled with the watermark rule, or the watermark would go back",
        },
    ),
)
def post_watermark(
    body: WatermarkIn, row: TableDep, session: SessionDep, access: AccessDep
) -> WatermarkOut:
    """The writer declares every row with an event time before `watermark` written: under
    the watermark rule, partitions ending at or before it become ready (once the required
    kinds have run on them). It only moves forward. Operator."""
    access.need(Role.operator, row.catalog, row.namespace)
    policy = current_policy(session, row).readiness
    if not policy.enabled or policy.rule != "watermark":
        state = "disabled" if not policy.enabled else f"rule {policy.rule!r}"
        raise HTTPException(
            409,
            f"readiness of {row.namespace}.{row.name} is {state}: a watermark is only used "
            'with readiness.enabled: true and readiness.rule: "watermark"; set them first',
        )
    watermark = body.watermark.astimezone(UTC)
    latest = datetime.now(UTC) + MAX_FUTURE
    if watermark > latest:
        raise HTTPException(
            422,
            f"watermark {watermark.isoformat()} is in the future (now is "
            f"{datetime.now(UTC).isoformat()}): it declares rows up to it written",
        )
    moved, stored = readiness.post_watermark(session, row.id, watermark, access.actor)
    if not moved:
        at = stored.isoformat() if stored else "unknown"
        raise HTTPException(
            409,
            f"the watermark only moves forward: it is at {at}, later than {watermark.isoformat()}",
        )
    access.change = {"watermark": watermark.isoformat()}
    return WatermarkOut(watermark=watermark)
