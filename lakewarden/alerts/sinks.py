"""Deliver alert changes (fired, acknowledged, resolved) to every configured sink, and
keep Alertmanager told of the alerts still open.

Sinks: a generic JSON webhook, a Slack-compatible incoming webhook, and an
Alertmanager-compatible endpoint (`POST /api/v2/alerts`). The first two also take
notifications (`notify`: e.g. partition_ready), which are not alerts and are not stored
here. Several processes may deliver alerts (API replicas and the leader: a missing leader
must still be reported), so each alert is claimed (SKIP LOCKED, then a lease) and sent with
no lock held; failures retry with backoff.

Alertmanager forgets an alert that is not sent again before its `endsAt` (or, without one,
its `resolve_timeout`, 5 min by default): a firing alert is therefore re-sent to it every
`alert_resend_interval_s` (`resend_open`), with `endsAt` a few re-send intervals ahead, as
Prometheus does; so it stays active while lakewarden runs, and ends by itself a few
intervals after lakewarden stops saying so. A resolved alert carries its resolution time.
The other sinks hear of changes only. `next_delivery_at` of an alert delivered as it is
schedules its next re-send (a change resets it to now: delivered at once).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from sqlalchemy import ColumnElement, Engine, func, select, update

from lakewarden.backoff import retry_delay_s
from lakewarden.db.models import Alert
from lakewarden.db.session import transaction
from lakewarden.redact import redact, secrets_of
from lakewarden.settings import Settings
from lakewarden.states import OPEN_ALERT_STATES, AlertState

log = logging.getLogger(__name__)

DELIVERY_RETRY_BASE_S = 2.0  # the first failed delivery is retried after 1-2 s
# A firing alert sent to Alertmanager ends this many re-send intervals later unless sent
# again (Prometheus uses 4): a late or failed re-send or two do not end it.
RESEND_VALIDITY = 4


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


def alertmanager_payload(a: Alert, settings: Settings) -> list[dict[str, Any]]:
    """The alert as Alertmanager's API takes it. `endsAt`: when it resolved; while it is
    open, a few re-send intervals from now (see the module's docstring)."""
    if a.state == AlertState.RESOLVED and a.resolved_at is not None:
        ends_at = a.resolved_at
    else:
        validity_s = RESEND_VALIDITY * settings.alert_resend_interval_s
        ends_at = datetime.now(UTC) + timedelta(seconds=validity_s)
    alert: dict[str, Any] = {
        "labels": {
            "alertname": f"lakewarden_{a.rule}",
            "key": a.key,
            "severity": a.severity,
            "service": "lakewarden",
        },
        "annotations": {"summary": a.summary, "runbook": a.runbook or ""},
        "startsAt": a.first_seen.isoformat(),
        "endsAt": ends_at.isoformat(),
    }
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


def delivery_error(sink: str, exc: Exception) -> str:
    """What went wrong, named by the sink and never by its URL (a webhook's URL is its
    secret: Slack's token is its path): `slack: HTTP 500`, `webhook: ConnectError: [Errno
    111] Connection refused`. httpx's texts of a status or a bad URL name the URL, so of
    those only the status or the type is kept; a transport error's text names the cause."""
    if isinstance(exc, httpx.HTTPStatusError):
        return f"{sink}: HTTP {exc.response.status_code}"
    message = str(exc).strip().splitlines() if isinstance(exc, httpx.TransportError) else []
    return f"{sink}: {type(exc).__name__}" + (f": {message[0]}" if message else "")


def payload(sink: str, a: Alert, settings: Settings) -> Any:
    if sink == "alertmanager":
        return alertmanager_payload(a, settings)
    return generic_payload(a) if sink == "webhook" else slack_payload(a)


def notification_payload(
    sink: str, event: str, summary: str, details: dict[str, Any]
) -> dict[str, Any] | None:
    """A notification (news, not an alert: it never fires, is never acknowledged or
    resolved) as `sink` takes it; None for Alertmanager, which knows only alerts."""
    if sink == "webhook":
        return {"type": "notification", "event": event, "summary": summary, "details": details}
    if sink == "slack":
        return {"text": f":information_source: lakewarden {event}: {summary}"}
    return None


def notify(
    settings: Settings, client: httpx.Client, event: str, summary: str, details: dict[str, Any]
) -> list[str]:
    """Post a notification to every configured sink that takes one (webhook, Slack). Returns
    what failed, by sink (`delivery_error`: never a URL); the caller keeps it for a retry."""
    errors = []
    for name, url in sinks(settings):
        body = notification_payload(name, event, summary, details)
        if body is None:
            continue
        try:
            client.post(url, json=body).raise_for_status()
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            errors.append(delivery_error(name, exc))
    return errors


DELIVERY_LEASE_S = 60.0  # a claimed alert is not claimed again for this long (> its POSTs)


def _claim(engine: Engine, *, resend: bool = False) -> Alert | None:
    """Take the next alert whose state changed since its last delivery (with `resend`: the
    next open alert delivered as it is whose re-send is due), in a transaction of its own:
    its `next_delivery_at` moves a lease ahead, so no other process claims it while this
    one delivers (with no row lock held), and that value marks the claim."""
    which: ColumnElement[bool]
    if resend:
        which = Alert.state.in_(OPEN_ALERT_STATES) & (Alert.delivered_state == Alert.state)
    else:
        which = Alert.delivered_state.is_distinct_from(Alert.state)
    with transaction(engine) as s:
        due = (
            select(Alert.id)
            .where(which, Alert.next_delivery_at <= func.now())
            .order_by(Alert.id)
            .limit(1)
            .with_for_update(skip_locked=True)
            .scalar_subquery()
        )
        return s.scalars(
            update(Alert)
            .where(Alert.id == due)
            .values(next_delivery_at=func.now() + timedelta(seconds=DELIVERY_LEASE_S))
            .returning(Alert)
        ).one_or_none()


def _record(engine: Engine, claimed: Alert, **values: Any) -> None:
    """Write a delivery's outcome, only if the claim still stands: a change of the alert
    meanwhile that re-queued it (resolved: `next_delivery_at` reset), or a claim by another
    process after the lease ran out, wins, and the alert is delivered again as it is now."""
    with transaction(engine) as s:
        s.execute(
            update(Alert)
            .where(Alert.id == claimed.id, Alert.next_delivery_at == claimed.next_delivery_at)
            .values(**values)
        )


def _send(
    engine: Engine,
    settings: Settings,
    client: httpx.Client,
    alert: Alert,
    targets: list[tuple[str, str]],
    secrets: list[str],
) -> bool:
    """Post the claimed `alert` to `targets` and record the outcome: delivered (an open
    alert's next re-send scheduled), or retried after backoff (never later than its next
    re-send would be). Returns whether every target took it."""
    resend_s = settings.alert_resend_interval_s
    errors = []
    for name, url in targets:
        try:
            client.post(url, json=payload(name, alert, settings)).raise_for_status()
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            errors.append(delivery_error(name, exc))
    if errors:
        attempts = alert.delivery_attempts + 1
        delay = min(retry_delay_s(attempts, DELIVERY_RETRY_BASE_S, settings.retry_cap_s), resend_s)
        error = redact("; ".join(errors), secrets)[:2000]
        _record(
            engine,
            alert,
            delivery_attempts=attempts,
            next_delivery_at=func.now() + timedelta(seconds=delay),
            delivery_error=error,
        )
        log.warning("alert %d delivery failed (attempt %d): %s", alert.id, attempts, error)
        return False
    is_open = alert.state in OPEN_ALERT_STATES
    _record(
        engine,
        alert,
        delivered_state=alert.state,
        delivery_attempts=0,
        delivery_error=None,
        next_delivery_at=func.now() + timedelta(seconds=resend_s if is_open else 0),
    )
    return True


def deliver_pending(
    engine: Engine, settings: Settings, client: httpx.Client, limit: int = 50
) -> int:
    """Send every alert whose state changed since its last delivery. Returns deliveries.

    Each alert is claimed, then sent with no transaction open (a slow sink holds no lock
    that acknowledging, resolving or another deliverer waits for), then its outcome is
    recorded under the claim: the state that was sent, or the retry after backoff."""
    targets = sinks(settings)
    return _deliver(engine, settings, client, targets, limit, resend=False)


def resend_open(engine: Engine, settings: Settings, client: httpx.Client, limit: int = 200) -> int:
    """Send each open alert whose re-send is due to Alertmanager again (the one sink that
    forgets an alert not re-sent). Returns the re-sends."""
    targets = [t for t in sinks(settings) if t[0] == "alertmanager"]
    return _deliver(engine, settings, client, targets, limit, resend=True)


def _deliver(
    engine: Engine,
    settings: Settings,
    client: httpx.Client,
    targets: list[tuple[str, str]],
    limit: int,
    *,
    resend: bool,
) -> int:
    if not targets:
        return 0
    secrets = secrets_of(settings, engine.url.render_as_string(hide_password=False))
    delivered = 0
    for _ in range(limit):
        alert = _claim(engine, resend=resend)
        if alert is None:
            break
        delivered += _send(engine, settings, client, alert, targets, secrets)
    return delivered
