"""Alerts: list what fires, acknowledge it."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, HTTPException, Query

from lakewarden import holds
from lakewarden.alerts import store
from lakewarden.auth.grants import Role
from lakewarden.states import AlertState
from services.api import errors
from services.api.access import AccessDep
from services.api.deps import Id, RuntimeDep, SessionDep
from services.api.paging import PageDep
from services.api.schemas import AckIn, AlertOut, AlertPage

router = APIRouter(prefix="/api/v1/alerts", tags=["alerts"])
STATES = tuple(s.value for s in AlertState)


@router.get("", response_model=AlertPage)
def list_alerts(
    session: SessionDep,
    access: AccessDep,
    rt: RuntimeDep,
    page: PageDep,
    state: Annotated[
        Literal[STATES] | None,  # type: ignore[valid-type]
        Query(description="without it, the open ones (firing or acknowledged)"),
    ] = None,
) -> AlertPage:
    """Alerts, newest first; without `state`, the open ones (firing or acknowledged)."""
    catalog = store.alert_catalog(rt.settings.catalog_name)
    visible = access.scope(Role.viewer, catalog, store.ALERT_NAMESPACE)
    return AlertPage.of(store.list_alerts(session, page, state=state, where=visible))


ACK_ERRORS = {
    404: "no such alert",
    409: "the alert is already resolved, or a concurrent change won",
}


@router.post(
    "/{alert_id}/ack",
    response_model=AlertOut,
    responses=errors.documented(body=True, notes=ACK_ERRORS),
)
def ack_alert(
    alert_id: Id, body: AckIn, rt: RuntimeDep, session: SessionDep, access: AccessDep
) -> AlertOut:
    """Acknowledge: operator on the alert's table, or everywhere for a fleet-wide alert.
    Acknowledging the alert of a failed task (rewrite_mismatch, task_failed) lifts the hold
    its failure put on the kind on that table: the kind runs again."""
    exists, table = store.table_of(session, alert_id)
    missing = f"alert {alert_id} does not exist"
    if not exists:
        raise HTTPException(404, missing)
    catalog = (table[0] or rt.settings.catalog_name) if table else None
    namespace = table[1] if table else None
    access.need_visible(
        Role.operator, catalog, namespace, target=f"alert {alert_id}", missing=missing
    )
    alert = store.acknowledge(session, alert_id, body.by)
    if alert is None:
        raise HTTPException(404, f"alert {alert_id} does not exist")
    if alert.state == AlertState.RESOLVED:
        raise HTTPException(409, f"alert {alert_id} is already resolved")
    # The kind its failure held on the table runs again (lakewarden.holds); acknowledging
    # it again lifts a hold a later failure made while the alert stayed acknowledged.
    lifted = holds.lift_for_alert(session, alert)
    if lifted is not None:
        access.change = {"lifted": {"kind": lifted.kind, "reason": lifted.reason}}
    return AlertOut.model_validate(alert)
