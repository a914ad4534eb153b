"""Partition readiness, for downstream schedulers (`lakewarden.readiness`): which partitions
are ready (the leader's round records them), the writer's completeness watermark, and its
heartbeat for a partition it had nothing to write to."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query

from lakewarden import readiness, readiness_logs
from lakewarden.auth.grants import Role
from lakewarden.db.models import PartitionReadiness
from lakewarden.db.paging import keyset_page
from lakewarden.readiness_logs import path_log
from lakewarden.states import PATH_CATALOGS
from lakewarden.tables import ref_of
from services.api import errors
from services.api.access import AccessDep, TableDep
from services.api.deps import RuntimeDep, SessionDep
from services.api.paging import PageDep
from services.api.policies import current_policy
from services.api.routes.health import load_live_table
from services.api.schemas import (
    HeartbeatIn,
    HeartbeatOut,
    PartitionReadinessOut,
    PartitionReadinessPage,
    ReadinessPinOut,
    WatermarkIn,
    WatermarkOut,
)

PATH_FORMATS = frozenset(PATH_CATALOGS.values())

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
    rt: RuntimeDep,
    session: SessionDep,
    page: PageDep,
    ready: Annotated[bool | None, Query(description="only ready (true) or not ready")] = None,
) -> PartitionReadinessPage:
    """The partitions of the table's readiness column, newest recorded first: ready or not,
    since when, on which commit (an Iceberg snapshot, a Hudi instant, a Delta version), why,
    their tag, and how a reader pins them (`pin`). Empty while readiness is disabled or not
    yet judged (the leader judges it every alert interval)."""
    policy = current_policy(session, row)
    column = policy.readiness.partition
    if column is None:
        return PartitionReadinessPage(items=[], next_cursor=None)
    query = readiness.partitions_query(row.id, column, ready)
    location = readiness_logs.location(row.format, rt.catalogs.entry(row.catalog), ref_of(row))

    def item(p: PartitionReadiness) -> PartitionReadinessOut:
        out = PartitionReadinessOut.model_validate(p)
        pin = readiness.pin_of(row.format, p.snapshot_id, p.tag, location)
        return out.model_copy(update={"pin": ReadinessPinOut(**vars(pin)) if pin else None})

    return PartitionReadinessPage.of(keyset_page(session, query, PartitionReadiness.id, page), item)


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


@router.post(
    "/{namespace}/{name}/heartbeat",
    response_model=HeartbeatOut,
    responses=errors.documented(
        409,
        body=True,
        notes={
            **errors.ON_TABLE,
            409: "readiness is not enabled, or the table cannot be judged as the policy asks",
            422: "the partition is not named as readiness names the table's partitions, or it "
            "ends in the future",
        },
    ),
)
def post_heartbeat(
    body: HeartbeatIn, row: TableDep, rt: RuntimeDep, session: SessionDep, access: AccessDep
) -> HeartbeatOut:
    """The writer ran for `partition` and wrote nothing: a partition no commit touched
    becomes ready in the leader's next round, reason "no data: writer heartbeat at <time>
    by <actor>". A partition with data keeps its rule (the heartbeat is recorded and changes
    nothing). Operator."""
    access.need(Role.operator, row.catalog, row.namespace)
    policy = current_policy(session, row).readiness
    if not policy.enabled or policy.partition is None:
        raise HTTPException(
            409,
            f"readiness of {row.namespace}.{row.name} is disabled: a heartbeat is only used "
            "with readiness.enabled: true; set it first",
        )
    table_id, column = row.id, policy.partition
    try:  # the spec (a path table's log) says how its partitions are named
        if row.format in PATH_FORMATS:
            field = path_log(row.format, rt.catalogs.entry(row.catalog), ref_of(row)).field(column)
        else:
            field = readiness.partition_field(load_live_table(rt, row), column)
    except readiness.ReadinessProblem as exc:
        raise HTTPException(409, str(exc)) from exc
    try:
        label, end = readiness.parse_partition(field, body.partition)
    except readiness.ReadinessProblem as exc:
        raise HTTPException(422, str(exc)) from exc
    now = datetime.now(UTC)
    if end is not None and end > now + MAX_FUTURE:
        raise HTTPException(
            422,
            f"partition {label} ends at {end.isoformat()}, in the future (now is "
            f"{now.isoformat()}): a heartbeat declares it complete with no data; post it "
            "once the writer has run for the whole partition",
        )
    beat = readiness.post_heartbeat(session, table_id, column, label, end, access.actor)
    if beat.last_commit_snapshot_id is not None:
        at = beat.last_commit_at.isoformat() if beat.last_commit_at else "unknown"
        effect = (
            f"recorded; partition {label} has data (last commit {beat.last_commit_snapshot_id} "
            f"at {at}), so the heartbeat changes nothing: its readiness follows "
            f"readiness.rule {policy.rule!r}"
        )
    elif beat.ready:
        effect = f"recorded; partition {label} is already ready with no data"
    else:
        effect = (
            f"recorded; no commit touched partition {label}: it becomes ready with no data "
            "in the leader's next round"
        )
    access.change = {"partition": label, "has_data": beat.last_commit_snapshot_id is not None}
    return HeartbeatOut(
        partition=label,
        heartbeat_at=beat.at,
        has_data=beat.last_commit_snapshot_id is not None,
        effect=effect,
    )
