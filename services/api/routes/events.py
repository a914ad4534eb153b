"""Commit notifications pushed by engines and catalogs (the webhook road)."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException
from pyiceberg.exceptions import NoSuchTableError
from sqlalchemy import select

from lakewarden.catalog import InvalidIdentifier, TableRef
from lakewarden.db.models import TimelineEvent
from lakewarden.events.refresh import ingest_commits
from lakewarden.tables import get_table
from services.api import errors
from services.api.deps import RuntimeDep, SessionDep
from services.api.schemas import EventAccepted, EventIn, EventOut

router = APIRouter(prefix="/api/v1", tags=["events"])


@router.post(
    "/events",
    status_code=202,
    response_model=EventAccepted,
    responses=errors.documented(
        409,
        body=True,
        notes={
            404: "the table is not managed by lakewarden, or the catalog no longer has it",
            409: "the table's stored policy is no longer valid (the new commits cannot be "
            "judged), or a concurrent change won",
        },
    ),
)
def post_event(body: EventIn, rt: RuntimeDep, session: SessionDep) -> EventAccepted:
    """Report a commit. Idempotent: repeating it records nothing new.

    lakewarden reads the commit from the catalog itself and records every
    commit of the table it has not seen yet (one event per snapshot).
    """
    try:
        ref = TableRef(body.namespace, body.name)
    except InvalidIdentifier as exc:
        raise HTTPException(422, str(exc)) from exc
    row = get_table(session, rt.settings.catalog_name, ref)
    if row is None:
        raise HTTPException(404, f"table {ref.dotted} is not managed by lakewarden")
    try:
        table = rt.catalog.load_table((ref.namespace, ref.name))
    except NoSuchTableError as exc:
        raise HTTPException(404, f"catalog has no table {ref.dotted}") from exc
    wanted = body.snapshot_id
    if wanted is not None and table.metadata.snapshot_by_id(wanted) is None:
        current = table.current_snapshot()
        raise HTTPException(
            422,
            f"snapshot {wanted} is not in the metadata of {ref.dotted} "
            f"(current snapshot: {current.snapshot_id if current else None})",
        )
    ingested = ingest_commits(session, rt, row, table, source="webhook")
    snapshot_id = wanted if wanted is not None else ingested.current_snapshot_id
    event = session.scalars(
        select(TimelineEvent).where(
            TimelineEvent.table_id == row.id, TimelineEvent.snapshot_id == snapshot_id
        )
    ).one_or_none()
    return EventAccepted(
        table=ref.dotted,
        new_events=len(ingested.new_event_ids),
        current_snapshot_id=ingested.current_snapshot_id,
        event=EventOut.model_validate(event, from_attributes=True) if event else None,
    )
