"""The global freeze: an incident's brake on every table at once (no job starts; running
ones finish). A `table_blockers` row without a table (lakewarden.tables.freeze)."""

from __future__ import annotations

from fastapi import APIRouter

from lakewarden import tables
from lakewarden.auth.grants import Role
from lakewarden.db.models import ManagedTable
from services.api import errors
from services.api.access import Access, AccessDep
from services.api.deps import SessionDep
from services.api.schemas import HoldIn, HoldOut, MaintenanceOut

router = APIRouter(prefix="/api/v1/maintenance", tags=["maintenance"])

# Freezing touches every table, so it needs the operator role on everything (a grant
# without a catalog: `operator`), as other fleet-wide things do (Access.need with no scope).
# Reading the switch needs a viewer role anywhere: the freeze holds every caller's tables.


def _state(session: SessionDep, access: Access) -> MaintenanceOut:
    visible = access.scope(Role.viewer, ManagedTable.catalog, ManagedTable.namespace)
    hold = tables.freeze_of(session)
    return MaintenanceOut(
        frozen=hold is not None,
        by=hold.holder if hold else None,
        since=hold.created_at if hold else None,
        reason=hold.reason if hold else None,
        paused_tables=tables.paused_tables(session, visible),
    )


@router.get("", response_model=MaintenanceOut, responses=errors.documented())
def get_maintenance(session: SessionDep, access: AccessDep) -> MaintenanceOut:
    """Whether every table is frozen (by whom, since when, why), and how many of the tables
    you may see are paused one by one."""
    return _state(session, access)


@router.post("/freeze", response_model=MaintenanceOut, responses=errors.documented(409, body=True))
def freeze_maintenance(
    session: SessionDep, access: AccessDep, body: HoldIn | None = None
) -> MaintenanceOut:
    """No maintenance job starts on any table until unfrozen; jobs already running finish,
    and tasks are still created and planned. Freezing a frozen fleet keeps the first
    freeze. Operator on everything."""
    access.need(Role.operator, None, None, target="maintenance")
    before = tables.freeze_of(session)
    hold = tables.freeze(session, by=access.actor, reason=body.reason if body else None)
    if before is None:
        access.change = {"frozen": HoldOut.model_validate(hold).model_dump(mode="json")}
    return _state(session, access)


@router.post("/unfreeze", response_model=MaintenanceOut, responses=errors.documented(409))
def unfreeze_maintenance(session: SessionDep, access: AccessDep) -> MaintenanceOut:
    """Lift the freeze: planned tasks may start again (tables paused one by one stay
    paused). Operator on everything."""
    access.need(Role.operator, None, None, target="maintenance")
    before = tables.freeze_of(session)
    if tables.unfreeze(session) and before is not None:
        access.change = {"unfrozen": HoldOut.model_validate(before).model_dump(mode="json")}
    return _state(session, access)
