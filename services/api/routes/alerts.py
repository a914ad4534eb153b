"""Alerts: list what fires, acknowledge it."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query
from pydantic import BaseModel, Field
from sqlalchemy import select

from lakewarden.alerts.store import acknowledge
from lakewarden.db.models import Alert
from lakewarden.states import AlertState
from services.api import errors
from services.api.deps import Cursor, Id, SessionDep
from services.api.schemas import TEXT_PATTERN, Page, RequestModel, documented_pattern

router = APIRouter(prefix="/api/v1/alerts", tags=["alerts"])
STATES = tuple(s.value for s in AlertState)


class AlertOut(BaseModel):
    id: int
    rule: str
    key: str
    severity: str
    state: str
    summary: str
    details: dict[str, Any]
    runbook: str | None
    first_seen: datetime
    last_seen: datetime
    resolved_at: datetime | None
    acked_by: str | None
    acked_at: datetime | None
    delivered_state: str | None
    delivery_attempts: int
    delivery_error: str | None


class AckIn(RequestModel):
    by: str = Field(
        min_length=1,
        max_length=255,
        description="who takes it",
        json_schema_extra=documented_pattern(TEXT_PATTERN),
    )


@router.get("", response_model=Page[AlertOut])
def list_alerts(
    session: SessionDep,
    state: Annotated[
        Literal[STATES] | None,  # type: ignore[valid-type]
        Query(description="without it, the open ones (firing or acknowledged)"),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Cursor = None,
) -> Page[AlertOut]:
    """Alerts, newest first; without `state`, the open ones (firing or acknowledged)."""
    q = select(Alert).order_by(Alert.id.desc()).limit(limit + 1)
    q = q.where(Alert.state != AlertState.RESOLVED if state is None else Alert.state == state)
    if cursor is not None:
        q = q.where(Alert.id < cursor)
    rows = list(session.scalars(q))
    more = len(rows) > limit
    rows = rows[:limit]
    return Page(
        items=[AlertOut.model_validate(r, from_attributes=True) for r in rows],
        next_cursor=rows[-1].id if more else None,
    )


@router.post(
    "/{alert_id}/ack",
    response_model=AlertOut,
    responses=errors.documented(
        body=True,
        notes={
            404: "no such alert",
            409: "the alert is already resolved, or a concurrent change won",
        },
    ),
)
def ack_alert(alert_id: Id, body: AckIn, session: SessionDep) -> AlertOut:
    alert = acknowledge(session, alert_id, body.by)
    if alert is None:
        raise HTTPException(404, f"alert {alert_id} does not exist")
    if alert.state == AlertState.RESOLVED:
        raise HTTPException(409, f"alert {alert_id} is already resolved")
    return AlertOut.model_validate(alert, from_attributes=True)
