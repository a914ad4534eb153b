"""A firing alert stays firing in Alertmanager for as long as it fires in lakewarden.

Alertmanager ends an alert at its `endsAt`, or, when none is given, `resolve_timeout`
after it last heard of it. The fake Alertmanager here is a real HTTP server that keeps
alerts that way (with a short resolve timeout); the real alert loop (`Ticker` running
`alert_tick`, as a scheduler runs it) delivers to it. A critical `task_failed` must stay
active across several resolve timeouts, without a moment when Alertmanager had dropped
it, and end when the alert resolves."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from conftest import make_test_runtime
from helpers import serve_http
from sqlalchemy import text

from lakewarden.alerts.tick import alert_tick
from lakewarden.db.models import ManagedTable
from lakewarden.db.session import transaction
from lakewarden.process import Ticker
from lakewarden.runtime import Runtime
from lakewarden.tasks import repo

RESOLVE_TIMEOUT_S = 1.5  # Alertmanager's resolve_timeout, shortened
RESEND_S = 0.5  # alert_resend_interval_s: well within it, as 60 s is within 5 min
TICK_S = 0.2  # alert_interval_s: how often the loop runs
WATCH_TIMEOUTS = 3  # watch the alert for this many resolve timeouts


@dataclass
class Held:
    ends_at: float  # epoch seconds
    gaps: int = 0  # times it was sent again after Alertmanager had already ended it


class FakeAlertmanager:
    """`POST /api/v2/alerts` as Alertmanager keeps alerts: by their labels; `endsAt` as
    sent, or `resolve_timeout` after receipt when not sent."""

    def __init__(self, resolve_timeout_s: float) -> None:
        self.alerts: dict[str, Held] = {}
        self.lock = threading.Lock()
        self.posted = threading.Event()
        am = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                now = time.time()
                with am.lock:
                    for alert in body:
                        name = json.dumps(alert["labels"], sort_keys=True)
                        sent = alert.get("endsAt")
                        ends = datetime.fromisoformat(sent).timestamp() if sent else None
                        held = am.alerts.setdefault(name, Held(now))
                        if held.ends_at < now:
                            held.gaps += 1  # it had ended: Alertmanager sent "resolved"
                        held.ends_at = ends if ends is not None else now + resolve_timeout_s
                am.posted.set()
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server, self.url = serve_http(Handler)

    def active(self) -> dict[str, Held]:
        """The alerts active now, by alertname."""
        now = time.time()
        with self.lock:
            return {
                json.loads(k)["alertname"]: h for k, h in self.alerts.items() if h.ends_at > now
            }

    def close(self) -> None:
        self.server.shutdown()


@pytest.fixture
def alertmanager() -> Iterator[FakeAlertmanager]:
    am = FakeAlertmanager(RESOLVE_TIMEOUT_S)
    yield am
    am.close()


@pytest.fixture
def leader_rt(db_url: str, tmp_path: Path, alertmanager: FakeAlertmanager) -> Iterator[Runtime]:
    rt = make_test_runtime(
        db_url,
        tmp_path,
        alert_alertmanager_url=alertmanager.url,
        alert_resend_interval_s=RESEND_S,
        alert_interval_s=TICK_S,
    )
    stop = threading.Event()
    loop = Ticker("alerts", TICK_S, lambda: alert_tick(rt, as_leader=True), stop)
    loop.start()
    yield rt
    stop.set()
    loop.join()
    rt.engine.dispose()


def _task(rt: Runtime, table_id: int, state: str) -> None:
    with transaction(rt.engine) as s:
        task_id = repo.create_task(s, table_id=table_id, kind="compaction", trigger={}, actor="t")
    with rt.engine.begin() as c:
        c.execute(text("UPDATE tasks SET state = :s WHERE id = :i"), {"s": state, "i": task_id})


def _wait_until(condition: object, seconds: float, am: FakeAlertmanager) -> None:
    """Wait (woken by each POST) until `condition()` holds, at most `seconds`."""
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:  # type: ignore[operator]
        am.posted.wait(max(0.0, deadline - time.monotonic()))
        am.posted.clear()


def test_a_critical_alert_stays_in_alertmanager_across_resolve_timeouts(
    leader_rt: Runtime, alertmanager: FakeAlertmanager
) -> None:
    rt, am = leader_rt, alertmanager
    with transaction(rt.engine) as s:
        table = ManagedTable(catalog="lake", namespace="ns", name="t", policy={})
        s.add(table)
        s.flush()
        table_id = table.id
    _task(rt, table_id, "failed")
    _wait_until(lambda: "lakewarden_task_failed" in am.active(), 30, am)
    assert "lakewarden_task_failed" in am.active(), "the alert reached Alertmanager"

    # Watch it for several resolve timeouts: at each re-send, and at the end, it is active,
    # and it was never sent again after Alertmanager had ended it.
    end = time.monotonic() + WATCH_TIMEOUTS * RESOLVE_TIMEOUT_S
    while time.monotonic() < end:
        am.posted.wait(max(0.0, end - time.monotonic()))
        am.posted.clear()
        assert "lakewarden_task_failed" in am.active()
    active = am.active()
    assert "lakewarden_task_failed" in active, "Alertmanager dropped the firing alert"
    assert active["lakewarden_task_failed"].gaps == 0

    # A later task succeeds: the alert resolves, and Alertmanager is told it ended then.
    _task(rt, table_id, "succeeded")

    _wait_until(lambda: "lakewarden_task_failed" not in am.active(), 30, am)
    with rt.engine.connect() as c:
        resolved_at = c.execute(text("SELECT resolved_at FROM alerts")).scalar_one()
    assert "lakewarden_task_failed" not in am.active()
    (held,) = am.alerts.values()
    assert held.ends_at == resolved_at.timestamp(), "ended by the resolution, not by expiry"
