"""Every log line about a task names it: the worker's planning of a task logs with its
task_id, table and attempt (lakewarden.logs.log_context, a contextvar the handlers' filter
reads)."""

from __future__ import annotations

import logging

import pytest

from lakewarden.db.models import ManagedTable
from lakewarden.db.session import transaction
from lakewarden.logs import ContextFilter
from lakewarden.runtime import Runtime
from lakewarden.tasks import repo
from services.worker.main import Worker


def test_planning_logs_carry_the_task(rt: Runtime, caplog: pytest.LogCaptureFixture) -> None:
    with transaction(rt.engine) as s:
        # A catalog nobody registered: planning fails, and says so in the log.
        row = ManagedTable(catalog="unregistered", namespace="ns", name="t", policy={})
        s.add(row)
        s.flush()
        task_id = repo.create_task(s, table_id=row.id, kind="compaction", trigger={}, actor="t")
    caplog.handler.addFilter(ContextFilter())  # as setup_logging puts it on every handler
    caplog.set_level(logging.INFO)
    assert Worker(rt).run_once()
    about_task = [r for r in caplog.records if r.name.startswith(("lakewarden", "services"))]
    assert about_task, "planning logged"
    for record in about_task:
        fields = (record.task_id, record.table, record.attempt)  # type: ignore[attr-defined]
        assert fields == (task_id, "unregistered.ns.t", 1), record.getMessage()
