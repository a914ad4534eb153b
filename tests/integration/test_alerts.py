"""Alerting on a real Postgres: rules fire once (deduplicated), resolve when the condition
clears, are delivered over real HTTP to webhook, Slack and Alertmanager sinks with
retries, and are listed and acknowledged through the API. Plus Prometheus metrics."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from fastapi.testclient import TestClient
from helpers import Receiver
from sqlalchemy import select, text

from lakewarden.alerts.rules import evaluate_leader_rule, evaluate_task_rules
from lakewarden.alerts.sinks import deliver_pending
from lakewarden.db.models import Alert, ManagedTable
from lakewarden.db.session import transaction
from lakewarden.runtime import Runtime
from lakewarden.tasks import repo


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver(fail_first=1)
    yield r
    r.close()


def _failed_task(rt: Runtime, name: str = "t") -> int:
    with transaction(rt.engine) as s:
        row = ManagedTable(catalog="lake", namespace="ns", name=name, policy={})
        s.add(row)
        s.flush()
        task_id = repo.create_task(s, table_id=row.id, kind="compaction", trigger={}, actor="t")
    with rt.engine.begin() as conn:
        conn.execute(
            text("UPDATE tasks SET state = 'failed', reason = 'boom' WHERE id = :i"), {"i": task_id}
        )
    assert task_id is not None
    return task_id


def _open_alerts(rt: Runtime) -> list[Alert]:
    with transaction(rt.engine) as s:
        return list(s.scalars(select(Alert).where(Alert.state != "resolved")))


def test_failed_task_fires_once_and_resolves_when_a_later_task_succeeds(rt: Runtime) -> None:
    task_id = _failed_task(rt)
    now = datetime.now(UTC)
    for _ in range(3):  # evaluated repeatedly: still one alert
        with transaction(rt.engine) as s:
            evaluate_task_rules(s, rt.settings, now)
    alerts = _open_alerts(rt)
    assert [(a.rule, a.key, a.severity) for a in alerts] == [
        ("task_failed", "ns.t:compaction", "critical")
    ]
    assert f"task {task_id}" in alerts[0].summary and "boom" in alerts[0].summary
    assert alerts[0].runbook and "GET /api/v1/tasks" in alerts[0].runbook
    with transaction(rt.engine) as s:
        table_id = s.scalar(select(ManagedTable.id))
        assert table_id is not None
        later = repo.create_task(s, table_id=table_id, kind="compaction", trigger={}, actor="t")
    with rt.engine.begin() as conn:
        conn.execute(text("UPDATE tasks SET state = 'succeeded' WHERE id = :i"), {"i": later})
    with transaction(rt.engine) as s:
        evaluate_task_rules(s, rt.settings, now)
    assert _open_alerts(rt) == []


def test_backlog_and_no_leader_rules(rt: Runtime) -> None:
    rt.settings.alert_backlog_age_s = 60
    rt.settings.alert_no_leader_s = 5
    with transaction(rt.engine) as s:
        row = ManagedTable(catalog="lake", namespace="ns", name="q", policy={})
        s.add(row)
        s.flush()
        repo.create_task(s, table_id=row.id, kind="compaction", trigger={}, actor="t")
    with rt.engine.begin() as conn:
        conn.execute(text("UPDATE tasks SET created_at = now() - interval '2 hours'"))
        conn.execute(
            text(
                "INSERT INTO leader_lease VALUES ('scheduler', 'gone', 3, "
                "now() - interval '1 hour', now() - interval '1 hour', "
                "now() - interval '10 minutes')"
            )
        )
    with transaction(rt.engine) as s:
        evaluate_task_rules(s, rt.settings, datetime.now(UTC))
        evaluate_leader_rule(s, rt.settings)
    rules = sorted(a.rule for a in _open_alerts(rt))
    assert rules == ["backlog_stale", "no_leader"]
    with rt.engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE leader_lease SET holder = 'back', expires_at = now() + "
                "interval '15 seconds'"
            )
        )
    with transaction(rt.engine) as s:
        evaluate_leader_rule(s, rt.settings)
    assert [a.rule for a in _open_alerts(rt)] == ["backlog_stale"]


def test_delivery_to_all_sinks_with_retry(rt: Runtime, receiver: Receiver) -> None:
    rt.settings.alert_webhook_url = receiver.url + "/hook"
    rt.settings.alert_slack_url = receiver.url + "/slack"
    rt.settings.alert_alertmanager_url = receiver.url + "/am"
    _failed_task(rt)
    with transaction(rt.engine) as s:
        evaluate_task_rules(s, rt.settings, datetime.now(UTC))
    with httpx.Client(timeout=5) as client:
        assert deliver_pending(rt.engine, rt.settings, client) == 0  # the first POST got a 503
        alert = _open_alerts(rt)[0]
        assert alert.delivery_attempts == 1 and "503" in (alert.delivery_error or "")
        with rt.engine.begin() as conn:
            conn.execute(text("UPDATE alerts SET next_delivery_at = now()"))
        assert deliver_pending(rt.engine, rt.settings, client) == 1
        assert deliver_pending(rt.engine, rt.settings, client) == 0  # nothing changed since
    paths = [p for p, _ in receiver.received]
    assert sorted(set(paths)) == ["/am/api/v2/alerts", "/hook", "/slack"]
    by_path = dict(receiver.received)
    assert by_path["/hook"]["rule"] == "task_failed"
    assert "task_failed firing" in by_path["/slack"]["text"]
    assert by_path["/am/api/v2/alerts"][0]["labels"]["alertname"] == "lakewarden_task_failed"


def test_alerts_api_and_metrics(client: TestClient, rt: Runtime) -> None:
    _failed_task(rt)
    with transaction(rt.engine) as s:
        evaluate_task_rules(s, rt.settings, datetime.now(UTC))
    items = client.get("/api/v1/alerts").json()["items"]
    assert [a["rule"] for a in items] == ["task_failed"]
    r = client.post(f"/api/v1/alerts/{items[0]['id']}/ack", json={"by": "oncall"})
    assert r.status_code == 200 and r.json()["state"] == "acknowledged"
    assert client.post("/api/v1/alerts/999/ack", json={"by": "x"}).status_code == 404
    assert client.post(f"/api/v1/alerts/{items[0]['id']}/ack", json={}).status_code == 422
    assert client.get("/api/v1/alerts", params={"state": "nope"}).status_code == 422
    body = client.get("/metrics").text
    assert 'lakewarden_tasks{kind="compaction",state="failed"} 1.0' in body
    assert 'lakewarden_alerts_open{rule="task_failed",severity="critical"} 1.0' in body
    assert "lakewarden_scheduler_leader 0.0" in body


def test_table_unhealthy_beyond_its_slo_window(rt: Runtime) -> None:
    from helpers import append_batches, make_table

    from services.scheduler.health_watch import measure_due_tables

    append_batches(make_table(rt), 6)  # 12 small files: 11 reducible
    with transaction(rt.engine) as s:
        s.add(
            ManagedTable(
                catalog="lake",
                namespace="sales",
                name="orders",
                policy={"slo": {"min_score": 90, "window_minutes": 30}},
            )
        )
    now = datetime.now(UTC)
    assert measure_due_tables(rt, now) == 1
    assert measure_due_tables(rt, now) == 0  # measured recently
    with transaction(rt.engine) as s:
        row = s.scalars(select(ManagedTable)).one()
        assert row.health_score is not None and row.health_score < 90
        assert row.unhealthy_since is not None
    with transaction(rt.engine) as s:
        evaluate_task_rules(s, rt.settings, now)
    assert _open_alerts(rt) == []  # not yet beyond the window
    with transaction(rt.engine) as s:
        evaluate_task_rules(s, rt.settings, now + timedelta(minutes=31))
    (alert,) = _open_alerts(rt)
    assert alert.rule == "table_unhealthy" and "SLO 90" in alert.summary
    # The owner lowers the bar: the next measurement clears it, the alert resolves.
    with rt.engine.begin() as conn:
        conn.execute(
            text(
                'UPDATE managed_tables SET policy = \'{"slo": {"min_score": 10}}\', '
                "health_measured_at = NULL"
            )
        )
    measure_due_tables(rt, now)
    with transaction(rt.engine) as s:
        evaluate_task_rules(s, rt.settings, now + timedelta(minutes=31))
    assert _open_alerts(rt) == []


def test_tables_of_two_catalogs_never_share_an_alert_and_scopes_follow_the_catalog(
    rt: Runtime,
) -> None:
    """The same namespace.name in two catalogs: two alerts, each visible (and acknowledged)
    only where a grant covers its own catalog."""
    from fastapi.testclient import TestClient
    from helpers import bearer, issue_token

    from services.api.app import create_app

    ids = []
    for catalog in ("lake", "second"):
        with transaction(rt.engine) as s:
            row = ManagedTable(catalog=catalog, namespace="ns.eu", name="t", policy={})
            s.add(row)
            s.flush()
            ids.append(
                repo.create_task(s, table_id=row.id, kind="compaction", trigger={}, actor="t")
            )
    with rt.engine.begin() as conn:
        conn.execute(text("UPDATE tasks SET state = 'failed', reason = 'boom'"))
    with transaction(rt.engine) as s:
        evaluate_task_rules(s, rt.settings, datetime.now(UTC))
    keys = sorted(a.key for a in _open_alerts(rt))
    assert keys == ["ns.eu.t:compaction", "second:ns.eu.t:compaction"]
    viewer = issue_token(rt, "operator@second/ns.*", name="second-ops")
    with TestClient(create_app(rt, background=False), headers=bearer(viewer)) as c:
        (seen,) = c.get("/api/v1/alerts").json()["items"]
        assert seen["key"] == "second:ns.eu.t:compaction"
        other = next(a.id for a in _open_alerts(rt) if a.key.startswith("ns.eu"))
        # out of its scope: as if it did not exist (not a 403 naming its namespace)
        assert c.post(f"/api/v1/alerts/{other}/ack", json={"by": "x"}).status_code == 404
        assert c.post(f"/api/v1/alerts/{seen['id']}/ack", json={"by": "x"}).status_code == 200
