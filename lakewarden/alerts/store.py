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
    alert.next_delivery_at = func.now()  # a change: delivered now, not at the next re-send
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


# An alert about one table names it in details["table"] (namespace.name), its catalog in
# details["catalog"] (absent: the default catalog) and its namespace in details["namespace"]
# (absent, in alerts from before namespaces had levels: the table's first part); a scoped
# grant is checked against these. Fleet-wide alerts have none (NULL).
ALERT_NAMESPACE = func.coalesce(
    Alert.details["namespace"].astext, func.split_part(Alert.details["table"].astext, ".", 1)
)


def alert_catalog(default: str) -> ColumnElement[str]:
    """The catalog of an alert's table (`default` when the alert does not name one)."""
    return func.coalesce(Alert.details["catalog"].astext, default)


def table_details(catalog: str, namespace: str, name: str) -> dict[str, str]:
    """What an alert about one table says of it (see ALERT_NAMESPACE)."""
    return {"table": f"{namespace}.{name}", "catalog": catalog, "namespace": namespace}


def table_of(session: Session, alert_id: int) -> tuple[bool, tuple[str | None, str] | None]:
    """(whether the alert exists, (its table's catalog or None for the default, namespace),
    or None if fleet-wide)."""
    details = session.scalar(select(Alert.details).where(Alert.id == alert_id))
    if details is None:
        return False, None
    table = details.get("table")
    if not isinstance(table, str) or "." not in table:
        return True, None
    namespace = details.get("namespace") or table.split(".", 1)[0]
    return True, (details.get("catalog"), str(namespace))
