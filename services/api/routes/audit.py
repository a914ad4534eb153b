"""The audit trail: every state-changing request, who made it, and what came of it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Literal

from fastapi import APIRouter, HTTPException, Query

from lakewarden import audit
from lakewarden.auth.grants import Role
from lakewarden.catalogs.catalog import TableRef
from services.api.access import AccessDep
from services.api.deps import SessionDep
from services.api.paging import PageDep
from services.api.schemas import (
    TABLE_PATTERN,
    TEXT_PATTERN,
    AuditOut,
    AuditPage,
    documented_pattern,
)

router = APIRouter(prefix="/api/v1/audit", tags=["access"])

# No control characters: RequestLimits refuses them in any query (documented for clients).
Text = Annotated[
    str | None, Query(max_length=255, json_schema_extra=documented_pattern(TEXT_PATTERN))
]


@router.get("", response_model=AuditPage)
def list_audit(
    session: SessionDep,
    access: AccessDep,
    page: PageDep,
    actor: Text = None,
    action: Annotated[
        str | None,
        Query(
            max_length=64,
            description="an operationId",
            json_schema_extra=documented_pattern(TEXT_PATTERN),
        ),
    ] = None,
    outcome: Annotated[Literal["ok", "refused", "failed"] | None, Query()] = None,
    table: Annotated[
        str | None,
        Query(
            max_length=257,
            description="namespace.name",
            json_schema_extra=documented_pattern(TABLE_PATTERN),
        ),
    ] = None,
    since: Annotated[
        str | None,
        Query(
            max_length=64,
            description="ISO 8601 date-time (a bare number is refused, not read as epoch)",
            json_schema_extra={"format": "date-time"},
        ),
    ] = None,
) -> AuditPage:
    """Audit entries, newest first, within the caller's admin grants (fleet-wide entries,
    such as tokens, need admin on everything)."""
    access.need_somewhere(Role.admin)
    try:
        after = datetime.fromisoformat(since) if since is not None else None
    except ValueError:
        raise HTTPException(422, f"since: {since!r} is not an ISO 8601 date-time") from None
    if after is not None and after.tzinfo is None:
        after = after.replace(tzinfo=UTC)  # a time without a zone is UTC
    ref = TableRef.parse(table) if table is not None else None  # "" is a 422
    found = audit.list_entries(
        session,
        page,
        access.caller,
        actor=actor,
        action=action,
        outcome=outcome,
        table=(ref.namespace, ref.name) if ref else None,
        since=after,
    )
    return AuditPage.of(found, AuditOut.model_validate)
