"""A plan that fails goes back to pending after the shared backoff (lakewarden.backoff:
base·2^(attempt-1), jittered down to half), and fails for good once its attempts are spent."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from helpers import make_table
from pyiceberg.table import Table
from sqlalchemy import text

from lakewarden.db.models import ManagedTable, Task
from lakewarden.db.session import transaction
from lakewarden.kinds import REGISTRY
from lakewarden.kinds.base import PlanOutcome
from lakewarden.runtime import Runtime
from lakewarden.tasks import repo
from services.worker import main as worker_main
from services.worker.main import Worker


def _failing_planner(section: Any, table: Table, now: datetime) -> PlanOutcome:
    raise RuntimeError("the planner broke")


def test_a_failed_plan_is_retried_after_the_backoff_then_fails(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_table(rt)
    base = rt.settings.retry_base_s
    broken = replace(REGISTRY["compaction"], plan=_failing_planner)
    monkeypatch.setattr(worker_main, "get_kind", lambda _: broken)
    with transaction(rt.engine) as s:
        row = ManagedTable(
            catalog=rt.settings.catalog_name, namespace="sales", name="orders", policy={}
        )
        s.add(row)
        s.flush()
        task_id = repo.create_task(
            s, table_id=row.id, kind="compaction", trigger={}, actor="test", max_attempts=3
        )
    assert task_id is not None

    for attempt in (1, 2):
        before = datetime.now(UTC)
        assert Worker(rt).run_once()
        with transaction(rt.engine) as s:
            task = s.get(Task, task_id)
            assert task is not None
            assert (task.state, task.attempt) == ("pending", attempt)
            ceiling = timedelta(seconds=base * 2 ** (attempt - 1))
            assert before + ceiling / 2 <= task.not_before <= datetime.now(UTC) + ceiling
        with rt.engine.begin() as conn:  # the backoff has passed
            conn.execute(text("UPDATE tasks SET not_before = now()"))

    assert Worker(rt).run_once()
    with transaction(rt.engine) as s:
        task = s.get(Task, task_id)
        assert task is not None and (task.state, task.attempt) == ("failed", 3)
        assert "the planner broke" in (repo.history(s, task_id)[-1].reason or "")
