"""One alerting round: evaluate the rules this process may judge, deliver changes, and
re-send the open alerts whose re-send is due (Alertmanager forgets those it stops hearing of)."""

from __future__ import annotations

import functools
from datetime import UTC, datetime

import httpx

from lakewarden.alerts.rules import evaluate_leader_rule, evaluate_task_rules
from lakewarden.alerts.sinks import deliver_pending, resend_open
from lakewarden.db.session import transaction
from lakewarden.runtime import Runtime


@functools.cache
def _client() -> httpx.Client:
    return httpx.Client(timeout=5.0)


def alert_tick(rt: Runtime, *, as_leader: bool) -> None:
    """The leader judges task rules; API replicas judge leadership; all deliver and re-send
    (each alert is claimed: one process sends it)."""
    with transaction(rt.engine) as s:
        if as_leader:
            evaluate_task_rules(s, rt.settings, datetime.now(UTC))
        else:
            evaluate_leader_rule(s, rt.settings)
    deliver_pending(rt.engine, rt.settings, _client())
    resend_open(rt.engine, rt.settings, _client())
