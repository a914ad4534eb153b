"""Liveness, readiness, and who leads the scheduler."""

from __future__ import annotations

import logging
import uuid

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from sqlalchemy import text
from sqlalchemy.orm import Session

from lakewarden.auth.grants import Role
from lakewarden.catalogs.regions import lease_name, region_leaders
from lakewarden.db.locks import DBLocks
from lakewarden.db.schema_compat import schema_fit
from lakewarden.leader import leader_status
from services.api.access import AccessDep
from services.api.deps import RuntimeDep, SessionDep
from services.api.schemas import LeaderOut, ReadyOut, RegionOut

log = logging.getLogger(__name__)

router = APIRouter(tags=["operations"])


@router.get("/healthz")
async def get_liveness() -> dict[str, str]:
    """The process is up (no dependencies checked). Async: answered on the event loop, not
    queued behind the requests holding the worker threads (B42: a burst of batches)."""
    return {"status": "ok"}


@router.get(
    "/readyz",
    response_model=ReadyOut,
    responses={503: {"model": ReadyOut, "description": "not ready: `reason` says why"}},
)
def get_readiness(rt: RuntimeDep) -> JSONResponse:
    """Ready to serve: the database answers and this code may run on its schema: at this
    code's migration head, or ahead of it by migrations that declare this head compatible
    (an upgrade's pre-upgrade migration leaves the old replicas ready; docs/deployment.md)."""
    try:
        with rt.engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        fit = schema_fit(rt.engine)
    except Exception as exc:
        # Anyone may call this: the driver's error (host, port, role) goes to the log only.
        error_id = uuid.uuid4().hex[:12]
        log.warning("not ready (%s): the database did not answer: %s", error_id, exc)
        reason = f"the database does not answer; the API's log has the error under {error_id}"
        return JSONResponse({"status": "unavailable", "reason": reason}, 503)
    if not fit.ready:
        return JSONResponse({"status": "unavailable", "reason": fit.reason}, 503)
    if len(rt.settings.regions) == 1:  # one region: GET /api/v1/scheduler/leader says it
        return JSONResponse({"status": "ready"})
    with Session(rt.engine) as session:  # shown, not failing: the API can still serve
        live = region_leaders(session, rt.settings.regions)
    stale = [region for region, ok in live.items() if not ok]
    return JSONResponse({"status": "ready", "stale_regions": stale})


@router.get("/api/v1/scheduler/leader", response_model=LeaderOut, tags=["scheduler"])
def get_scheduler_leader(session: SessionDep, access: AccessDep) -> LeaderOut:
    """The scheduler holding the lease, its epoch (fencing token) and last renewal."""
    access.need_somewhere(Role.viewer)
    status = leader_status(session)
    if status is None:
        return LeaderOut(holder=None, epoch=None, live=False)
    return LeaderOut(**status.__dict__)


@router.get("/api/v1/scheduler/regions", response_model=list[RegionOut], tags=["scheduler"])
def list_scheduler_regions(
    rt: RuntimeDep, session: SessionDep, access: AccessDep
) -> list[RegionOut]:
    """Each region's scheduler leader (not live: that region's maintenance stalls until a
    standby of its own leads), and which of them runs the fleet-wide duties."""
    access.need_somewhere(Role.viewer)
    fleet = leader_status(session, DBLocks.FLEET_LEASE)
    out = []
    for region in rt.settings.regions:
        status = leader_status(session, lease_name(region))
        if status is None:
            out.append(RegionOut(region=region, holder=None, epoch=None, live=False, fleet=False))
            continue
        runs_fleet = fleet is not None and fleet.live and fleet.holder == status.holder
        out.append(RegionOut(region=region, fleet=runs_fleet, **status.__dict__))
    return out
