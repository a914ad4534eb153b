"""The alert store: one open alert per (rule, key); fire, resolve when clear, acknowledge."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import ColumnElement, func, select, text, update
from sqlalchemy.orm import Session

from lakewarden.db.models import Alert
from lakewarden.db.paging import Page, PageRequest, keyset_page
from lakewarden.states import AlertState, sql_in

# The inference clause names the open-alert index's predicate as literals, so that
# Postgres matches it to that partial unique index.
_FIRE = text(
    f"""
    INSERT INTO alerts (rule, key, severity, state, summary, details, runbook)
    VALUES (:rule, :key, :severity, :firing, :summary, CAST(:details AS jsonb), :runbook)
    ON CONFLICT (rule, key) WHERE {sql_in("state", AlertState.RESOLVED, negate=True)}
    DO UPDATE SET last_seen = now(), summary = EXCLUDED.summary,
                  details = EXCLUDED.details, severity = EXCLUDED.severity
    """
).bindparams(firing=AlertState.FIRING.value)


def fire(
    session: Session,
    rule: str,
    key: str,
    *,
    severity: str,
    summary: str,
    details: dict[str, Any],
    runbook: str,
) -> None:
    """Open the alert, or refresh the open one (deduplicated by rule and key)."""
    session.execute(
        _FIRE,
        {
            "rule": rule,
            "key": key,
            "severity": severity,
            "summary": summary,
            "details": json.dumps(details, default=str),
            "runbook": runbook,
        },
    )


def resolve_absent(session: Session, rule: str, active_keys: set[str]) -> int:
    """Resolve the open alerts of `rule` whose condition no longer holds."""
    q = update(Alert).where(Alert.rule == rule, Alert.state != AlertState.RESOLVED)
    if active_keys:
        q = q.where(Alert.key.not_in(active_keys))
    result = session.execute(
        q.values(
            state=AlertState.RESOLVED,
            resolved_at=func.now(),
            next_delivery_at=func.now(),
            delivery_attempts=0,
        )
    )
    return int(result.rowcount)  # type: ignore[attr-defined]


def acknowledge(session: Session, alert_id: int, by: str) -> Alert | None:
    alert = session.scalars(
        select(Alert).where(Alert.id == alert_id).with_for_update()
    ).one_or_none()
    if alert is None or alert.state != AlertState.FIRING:
        return alert
    alert.state = AlertState.ACKNOWLEDGED
    alert.acked_by = by
    alert.acked_at = func.now()
    session.flush()
    session.refresh(alert)
    return alert


def list_alerts(
    session: Session,
    page: PageRequest,
    *,
    state: str | None = None,
    where: ColumnElement[bool] | None = None,
) -> Page[Alert]:
    """Alerts, newest first: in `state`, or without it the open ones (not resolved); only
    those matching `where` (e.g. a caller's scope, on ALERT_NAMESPACE)."""
    q = select(Alert).where(
        Alert.state != AlertState.RESOLVED if state is None else Alert.state == state
    )
    if where is not None:
        q = q.where(where)
    return keyset_page(session, q, Alert.id, page)


# An alert about one table names it in details["table"] (namespace.name); its namespace is
# what a scoped grant is checked against. Fleet-wide alerts have none (NULL).
ALERT_NAMESPACE = func.split_part(Alert.details["table"].astext, ".", 1)


def table_of(session: Session, alert_id: int) -> tuple[bool, str | None]:
    """(whether the alert exists, the namespace.name it is about or None if fleet-wide)."""
    details = session.scalar(select(Alert.details).where(Alert.id == alert_id))
    if details is None:
        return False, None
    table = details.get("table")
    return True, table if isinstance(table, str) and "." in table else None
