"""Blockers: a writer keeps maintenance off a table for a while (streaming writers)."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Response

from lakewarden import tables
from lakewarden.auth.grants import Role
from services.api import errors
from services.api.access import AccessDep, TableDep
from services.api.deps import Id, SessionDep
from services.api.schemas import BlockerIn, BlockerOut

router = APIRouter(prefix="/api/v1/catalogs/{catalog}/tables", tags=["blockers"])


@router.post(
    "/{namespace}/{name}/blockers",
    status_code=201,
    response_model=BlockerOut,
    responses=errors.documented(409, body=True, notes=errors.ON_TABLE),
)
def add_blocker(
    body: BlockerIn, row: TableDep, session: SessionDep, access: AccessDep
) -> BlockerOut:
    """No maintenance job starts on the table until the blocker expires or is removed
    (a job already running finishes; Iceberg's commit checks keep the writer safe)."""
    access.need(Role.operator, row.catalog, row.namespace)
    blocker = tables.add_blocker(
        session, row, holder=body.holder, reason=body.reason, ttl_s=body.ttl_s
    )
    return BlockerOut.model_validate(blocker)


@router.get(
    "/{namespace}/{name}/blockers",
    response_model=list[BlockerOut],
    responses=errors.documented(notes=errors.ON_TABLE),
)
def list_blockers(row: TableDep, session: SessionDep) -> list[BlockerOut]:
    """The table's live blockers."""
    return [BlockerOut.model_validate(b) for b in tables.live_blockers(session, row.id)]


@router.delete(
    "/{namespace}/{name}/blockers/{blocker_id}",
    status_code=204,
    responses=errors.documented(
        409, notes={404: "the table is not managed, or has no such blocker"}
    ),
)
def remove_blocker(
    blocker_id: Id, row: TableDep, session: SessionDep, access: AccessDep
) -> Response:
    access.need(Role.operator, row.catalog, row.namespace, target=f"blocker {blocker_id}")
    if not tables.remove_blocker(session, row, blocker_id):
        raise HTTPException(404, f"blocker {blocker_id} does not exist on this table")
    return Response(status_code=204)
