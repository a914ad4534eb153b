"""The audit trail: every state-changing request, appended (never changed) to audit_log."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import and_, select
from sqlalchemy.orm import Session

from lakewarden.auth.grants import Caller, Role
from lakewarden.auth.sql import in_scope
from lakewarden.db.models import AuditEntry
from lakewarden.db.paging import Page, PageRequest, keyset_page


def record(session: Session, **fields: Any) -> AuditEntry:
    entry = AuditEntry(**fields)
    session.add(entry)
    session.flush()
    return entry


def diff(before: dict[str, Any] | None, after: dict[str, Any] | None) -> dict[str, list[Any]]:
    """What changed between two nested dicts: {"ttl.enabled": [false, true], ...}, dotted
    paths to [before, after] (null where a side lacks the key)."""

    def flat(d: dict[str, Any] | None, prefix: str = "") -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in (d or {}).items():
            path = f"{prefix}{key}"
            if isinstance(value, dict) and value:
                out.update(flat(value, path + "."))
            else:
                out[path] = value
        return out

    a, b = flat(before), flat(after)
    return {k: [a.get(k), b.get(k)] for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k)}


def list_entries(
    session: Session,
    page: PageRequest,
    caller: Caller,
    *,
    actor: str | None = None,
    action: str | None = None,
    outcome: str | None = None,
    table: tuple[str, str] | None = None,
    since: datetime | None = None,
) -> Page[AuditEntry]:
    """Audit entries the caller's admin grants cover, newest first. Entries without a
    table scope (tokens, alerts of the whole fleet) need admin everywhere."""
    scoped = in_scope(caller, Role.admin, AuditEntry.catalog, AuditEntry.namespace)
    if not caller.may_everywhere(Role.admin):
        scoped = and_(AuditEntry.namespace.is_not(None), scoped)
    query = select(AuditEntry).where(scoped)
    if actor is not None:
        query = query.where(AuditEntry.actor == actor)
    if action is not None:
        query = query.where(AuditEntry.action == action)
    if outcome is not None:
        query = query.where(AuditEntry.outcome == outcome)
    if table is not None:
        query = query.where(AuditEntry.namespace == table[0], AuditEntry.target == ".".join(table))
    if since is not None:
        query = query.where(AuditEntry.at >= since)
    return keyset_page(session, query, AuditEntry.id, page, newest_first=True)
