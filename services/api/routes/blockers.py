"""Blockers: a writer keeps maintenance off a table for a while (streaming writers)."""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter, HTTPException, Response
from pydantic import BaseModel, Field
from sqlalchemy import func, select

from lakewarden.db.models import TableBlocker
from services.api import errors
from services.api.deps import Id, SessionDep, TableDep
from services.api.schemas import (
    FREE_TEXT_PATTERN,
    TEXT_PATTERN,
    RequestModel,
    documented_pattern,
)

router = APIRouter(prefix="/api/v1/tables", tags=["blockers"])


class BlockerIn(RequestModel):
    FREE_TEXT = frozenset({"reason"})
    holder: str = Field(
        min_length=1,
        max_length=255,
        description="who blocks, e.g. a job id",
        json_schema_extra=documented_pattern(TEXT_PATTERN),
    )
    reason: str | None = Field(
        default=None, max_length=2000, json_schema_extra=documented_pattern(FREE_TEXT_PATTERN)
    )
    ttl_s: float = Field(gt=0, le=7 * 24 * 3600, description="the blocker lapses after this")


class BlockerOut(BaseModel):
    id: int
    holder: str
    reason: str | None
    created_at: datetime
    expires_at: datetime


@router.post(
    "/{namespace}/{name}/blockers",
    status_code=201,
    response_model=BlockerOut,
    responses=errors.documented(409, body=True, notes=errors.ON_TABLE),
)
def add_blocker(body: BlockerIn, row: TableDep, session: SessionDep) -> TableBlocker:
    """No maintenance job starts on the table until the blocker expires or is removed
    (a job already running finishes; Iceberg's commit checks keep the writer safe)."""
    blocker = TableBlocker(
        table_id=row.id,
        holder=body.holder,
        reason=body.reason,
        expires_at=func.now() + func.make_interval(0, 0, 0, 0, 0, 0, body.ttl_s),
    )
    session.add(blocker)
    session.flush()
    session.refresh(blocker)
    return blocker


@router.get(
    "/{namespace}/{name}/blockers",
    response_model=list[BlockerOut],
    responses=errors.documented(notes=errors.ON_TABLE),
)
def list_blockers(row: TableDep, session: SessionDep) -> list[TableBlocker]:
    """The table's live blockers."""
    return list(
        session.scalars(
            select(TableBlocker)
            .where(TableBlocker.table_id == row.id, TableBlocker.expires_at > func.now())
            .order_by(TableBlocker.id)
        )
    )


@router.delete(
    "/{namespace}/{name}/blockers/{blocker_id}",
    status_code=204,
    responses=errors.documented(
        409, notes={404: "the table is not managed, or has no such blocker"}
    ),
)
def remove_blocker(blocker_id: Id, row: TableDep, session: SessionDep) -> Response:
    blocker = session.get(TableBlocker, blocker_id)
    if blocker is None or blocker.table_id != row.id:
        raise HTTPException(404, f"blocker {blocker_id} does not exist on this table")
    session.delete(blocker)
    return Response(status_code=204)
