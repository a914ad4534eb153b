"""The pools: what each runs and queues, its limit now, and an elastic pool's capacity
with the leader's latest decisions and their reasons (lakewarden.capacity)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from lakewarden import capacity
from lakewarden.auth.grants import Role
from services.api.access import AccessDep
from services.api.deps import RuntimeDep, SessionDep
from services.api.schemas import PoolsOut

router = APIRouter(prefix="/api/v1/pools", tags=["scheduler"])


@router.get("", response_model=PoolsOut)
def list_pools(
    rt: RuntimeDep,
    session: SessionDep,
    access: AccessDep,
    decisions: Annotated[
        int, Query(ge=0, le=100, description="an elastic pool's latest decisions to list")
    ] = 5,
) -> PoolsOut:
    """Every pool the settings name or an open task uses: its mode, running and queued
    tasks, its limit now; for an elastic pool (`POOL_CAPACITY`) its min and max, its
    capacity now, since when it idles, and why it last scaled."""
    access.need_somewhere(Role.viewer)
    return PoolsOut.model_validate({"items": capacity.pools_view(session, rt.settings, decisions)})
