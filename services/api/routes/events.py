"""Commit notifications pushed by engines and catalogs (the webhook road)."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException

from lakewarden.auth.grants import Role
from lakewarden.catalog import TableRef, load_table
from lakewarden.events.ingest import event_for
from lakewarden.events.refresh import ingest_commits
from services.api import errors
from services.api.access import AccessDep
from services.api.deps import RuntimeDep, SessionDep, managed
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
            409: "a concurrent change won (a commit on a table whose stored policy no "
            "longer validates is recorded, with decision policy-invalid: a 202)",
        },
    ),
)
def post_event(
    body: EventIn, rt: RuntimeDep, session: SessionDep, access: AccessDep
) -> EventAccepted:
    """Report a commit. Idempotent: repeating it records nothing new.

    lakewarden reads the commit from the catalog itself and records every
    commit of the table it has not seen yet (one event per snapshot).
    """
    ref = TableRef(body.namespace, body.name)
    # An engine reporting its commits needs operator on the table's namespace.
    access.need(Role.operator, rt.settings.catalog_name, ref.namespace, target=ref.dotted)
    row = managed(session, rt, ref)
    table = load_table(rt.catalog, ref)
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
    event = event_for(session, row.id, snapshot_id)
    return EventAccepted(
        table=ref.dotted,
        new_events=len(ingested.new_event_ids),
        current_snapshot_id=ingested.current_snapshot_id,
        event=EventOut.model_validate(event) if event else None,
    )
