"""The audit trail: every state-changing request, appended (never changed) to audit_log.

A row is written whatever the request held: its text is made storable first (`storable`),
so a refusal whose detail quotes a NUL (which Postgres text and jsonb refuse) or a
10 MB value is recorded, not lost to a failed insert.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from sqlalchemy import and_, select
from sqlalchemy.orm import Session

from lakewarden.auth.grants import Caller, Role
from lakewarden.auth.sql import in_scope
from lakewarden.db.models import AuditEntry
from lakewarden.db.paging import Page, PageRequest, keyset_page

# Longest text kept of a free-text column (detail, path, target) and of each string in
# `change`; a VARCHAR column keeps at most its own length.
MAX_TEXT = 2000
# Escaped in every stored string: control characters but tab and newline (NUL, which
# Postgres refuses; ESC, which would drive the terminal of whoever reads the trail) and
# lone surrogates (which UTF-8 cannot encode).
_UNSTORABLE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")


def record(session: Session, **fields: Any) -> AuditEntry:
    columns = AuditEntry.__table__.columns
    entry = AuditEntry(
        **{
            name: storable(value, getattr(columns[name].type, "length", None) or MAX_TEXT)
            for name, value in fields.items()
        }
    )
    session.add(entry)
    session.flush()
    return entry


def storable(value: Any, limit: int = MAX_TEXT) -> Any:
    """`value` as a row can hold it: in every string (a dict's keys too) the characters
    of _UNSTORABLE escaped (`\\x00`), and at most `limit` characters (`…` past it)."""
    if isinstance(value, str):
        text = _UNSTORABLE.sub(_escaped, value)
        return text if len(text) <= limit else text[: limit - 1] + "…"
    if isinstance(value, dict):
        return {storable(k): storable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [storable(v) for v in value]
    return value


def _escaped(match: re.Match[str]) -> str:
    code = ord(match[0])
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


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
