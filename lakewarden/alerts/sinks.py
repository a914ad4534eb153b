"""Deliver alert changes (fired, acknowledged, resolved) to every configured sink.

Sinks: a generic JSON webhook, a Slack-compatible incoming webhook, and an
Alertmanager-compatible endpoint (`POST /api/v2/alerts`). Several processes may
deliver (API replicas and the leader: a missing leader must still be reported),
so each alert is claimed with SKIP LOCKED; failures retry with backoff.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from lakewarden.backoff import retry_delay_s
from lakewarden.db.models import Alert
from lakewarden.settings import Settings
from lakewarden.states import AlertState

log = logging.getLogger(__name__)

DELIVERY_RETRY_BASE_S = 2.0  # the first failed delivery is retried after 1-2 s


def generic_payload(a: Alert) -> dict[str, Any]:
    return {
        "id": a.id,
        "rule": a.rule,
        "key": a.key,
        "severity": a.severity,
        "state": a.state,
        "summary": a.summary,
        "details": a.details,
        "runbook": a.runbook,
        "first_seen": a.first_seen.isoformat(),
        "last_seen": a.last_seen.isoformat(),
        "resolved_at": a.resolved_at.isoformat() if a.resolved_at else None,
    }


def slack_payload(a: Alert) -> dict[str, Any]:
    icons: dict[str, str] = {
        AlertState.RESOLVED: ":white_check_mark:",
        AlertState.ACKNOWLEDGED: ":eyes:",
    }
    icon = icons.get(a.state, ":rotating_light:")
    return {
        "text": f"{icon} [{a.severity}] lakewarden {a.rule} {a.state}: {a.summary}\n"
        f"What to do: {a.runbook}"
    }


def alertmanager_payload(a: Alert) -> list[dict[str, Any]]:
    alert: dict[str, Any] = {
        "labels": {
            "alertname": f"lakewarden_{a.rule}",
            "key": a.key,
            "severity": a.severity,
            "service": "lakewarden",
        },
        "annotations": {"summary": a.summary, "runbook": a.runbook or ""},
        "startsAt": a.first_seen.isoformat(),
    }
    if a.state == AlertState.RESOLVED and a.resolved_at is not None:
        alert["endsAt"] = a.resolved_at.isoformat()
    return [alert]


def sinks(settings: Settings) -> list[tuple[str, str]]:
    out = []
    if settings.alert_webhook_url:
        out.append(("webhook", settings.alert_webhook_url))
    if settings.alert_slack_url:
        out.append(("slack", settings.alert_slack_url))
    if settings.alert_alertmanager_url:
        out.append(("alertmanager", settings.alert_alertmanager_url.rstrip("/") + "/api/v2/alerts"))
    return out


PAYLOADS = {
    "webhook": generic_payload,
    "slack": slack_payload,
    "alertmanager": alertmanager_payload,
}


def deliver_pending(session: Session, settings: Settings, client: httpx.Client) -> int:
    """Send every alert whose state changed since its last delivery. Returns deliveries."""
    targets = sinks(settings)
    if not targets:
        return 0
    pending = session.scalars(
        select(Alert)
        .where(
            Alert.delivered_state.is_distinct_from(Alert.state),
            Alert.next_delivery_at <= func.now(),
        )
        .order_by(Alert.id)
        .limit(50)
        .with_for_update(skip_locked=True)
    ).all()
    delivered = 0
    for alert in pending:
        errors = []
        for name, url in targets:
            try:
                client.post(url, json=PAYLOADS[name](alert)).raise_for_status()
            except httpx.HTTPError as exc:
                errors.append(f"{name}: {exc}")
        if errors:
            alert.delivery_attempts += 1
            delay = retry_delay_s(
                alert.delivery_attempts, DELIVERY_RETRY_BASE_S, settings.retry_cap_s
            )
            alert.next_delivery_at = datetime.now(UTC) + timedelta(seconds=delay)
            alert.delivery_error = "; ".join(errors)[:2000]
            log.warning(
                "alert %d delivery failed (attempt %d): %s",
                alert.id,
                alert.delivery_attempts,
                alert.delivery_error,
            )
        else:
            alert.delivered_state = alert.state
            alert.delivery_attempts = 0
            alert.delivery_error = None
            delivered += 1
    session.flush()
    return delivered
