"""What keeps jobs off a table: a writer's blocker (for a while: streaming writers), and an
operator's pause (until resumed). Both are `table_blockers` rows (lakewarden.tables); the
fleet-wide freeze is in routes/maintenance.py. And the resume of one kind the leader held
on the table after a failure that would repeat itself (lakewarden.holds)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, Response

from lakewarden import holds, tables
from lakewarden.auth.grants import Role
from lakewarden.policy.model import KINDS
from services.api import errors
from services.api.access import AccessDep, TableDep
from services.api.deps import Id, SessionDep
from services.api.policies import table_out
from services.api.schemas import BlockerIn, BlockerOut, HoldIn, HoldOut, TableOut

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


@router.post(
    "/{namespace}/{name}/pause",
    response_model=TableOut,
    responses=errors.documented(409, body=True, notes=errors.ON_TABLE),
)
def pause_table(
    row: TableDep, session: SessionDep, access: AccessDep, body: HoldIn | None = None
) -> TableOut:
    """No maintenance job starts on the table until it is resumed; jobs already running
    finish, and tasks are still created and planned (explain and the task list say what
    waits, and why). Pausing a paused table keeps its first pause. Operator."""
    access.need(Role.operator, row.catalog, row.namespace)
    before = tables.pause_of(session, row.id)
    hold = tables.pause(session, row, by=access.actor, reason=body.reason if body else None)
    if before is None:
        access.change = {"paused": HoldOut.model_validate(hold).model_dump(mode="json")}
    return table_out(session, row)


@router.post(
    "/{namespace}/{name}/resume",
    response_model=TableOut,
    responses=errors.documented(409, notes=errors.ON_TABLE),
)
def resume_table(row: TableDep, session: SessionDep, access: AccessDep) -> TableOut:
    """Lift the table's pause: its planned tasks may start again (a table not paused is
    left as it is). Operator."""
    access.need(Role.operator, row.catalog, row.namespace)
    before = tables.pause_of(session, row.id)
    if tables.resume(session, row) and before is not None:
        access.change = {"resumed": HoldOut.model_validate(before).model_dump(mode="json")}
    return table_out(session, row)


@router.post(
    "/{namespace}/{name}/kinds/{kind}/resume",
    response_model=TableOut,
    responses=errors.documented(
        409, notes={404: "the table is not managed, or `kind` is not a maintenance kind"}
    ),
)
def resume_kind(
    kind: Annotated[str, Path(pattern=r"^[a-z_]{1,64}$", description="a maintenance kind")],
    row: TableDep,
    session: SessionDep,
    access: AccessDep,
) -> TableOut:
    """Lift the hold the leader put on `kind` on this table after a rewrite failed
    validation or the same error repeated: its tasks are created and started again (a kind
    not held is left as it is). Acknowledging the failure's alert does the same. Operator."""
    access.need(Role.operator, row.catalog, row.namespace, target=f"kind {kind[:64]}")
    if kind not in KINDS:
        raise HTTPException(
            404, f"{kind[:64]!r} is not a maintenance kind: one of {', '.join(KINDS)}"
        )
    lifted = holds.lift(session, row.id, kind)
    if lifted is not None:
        access.change = {
            "resumed": {
                "kind": kind,
                "held_since": lifted.created_at.isoformat(),
                "reason": lifted.reason,
            }
        }
    return table_out(session, row)
