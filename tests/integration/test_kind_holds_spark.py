"""The runaway loop after a failed validation, on real Spark + Iceberg (issue 23): with the
test-only failpoint that corrupts every rewrite, a writer keeps committing small files;
each commit goes the real road (`refresh_table`: ingest, then `evaluate_events`), the
sweep runs, the leader's alert round runs, a worker plans and the leading scheduler
dispatches whatever it would. Exactly one rewrite runs and is never published; the kind is then
held (explain and the table say why, and how to lift it), so the commits that follow make
no compaction and none runs, until the alert is acknowledged; then compaction runs again.
Without the hold, every commit made a new compaction that failed again."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from conftest import serve
from helpers import append_batches, make_table, manage, task_of
from sqlalchemy import select

from lakewarden.alerts.rules import evaluate_task_rules
from lakewarden.catalogs.catalog import TableRef
from lakewarden.db.models import Alert, JobRun, Task, TimelineEvent
from lakewarden.db.session import transaction
from lakewarden.events.refresh import refresh_table
from lakewarden.runtime import Runtime
from lakewarden.states import TaskState
from services.scheduler.main import Scheduler
from services.scheduler.sweeps import sweep_due_tasks
from services.worker.main import Worker

pytestmark = pytest.mark.spark

POLICY = {"compaction": {"min_small_files": 5, "min_input_files": 5, "max_attempts": 3}}
NAME = "runaway"
TABLE = f"/api/v1/tables/sales/{NAME}"


def _round(rt: Runtime, scheduler: Scheduler, batch: int) -> list[str]:
    """A writer's commit (two small files), then everything the control plane does about
    it; returns the states the compaction jobs it ran ended in."""
    append_batches(rt.catalog.load_table(f"sales.{NAME}"), 1, start=1000 * batch)
    refresh_table(rt, rt.settings.catalog_name, TableRef("sales", NAME), source="test")
    scheduler.renew()
    fence = scheduler.leading()
    assert fence is not None
    sweep_due_tasks(rt, fence, datetime.now(UTC))
    with transaction(rt.engine) as s:
        evaluate_task_rules(s, rt.settings, datetime.now(UTC))
    while Worker(rt).run_once():
        pass
    ended = []
    while scheduler.dispatch_once():
        for task_id, entry in list(scheduler.inflight.items()):
            state = str(entry.future.result(timeout=300))
            scheduler.inflight.pop(task_id, None)  # its slot is free (as _forget does)
            if task_of(rt, task_id).kind == "compaction":  # the sweep's kinds run too
                ended.append(state)
    return ended


def _compactions(rt: Runtime) -> list[tuple[int, str, int]]:
    """(task id, state, runs) of every compaction task of the table."""
    with transaction(rt.engine) as s:
        tasks = s.scalars(select(Task).where(Task.kind == "compaction").order_by(Task.id)).all()
        return [
            (
                t.id,
                t.state,
                len(s.scalars(select(JobRun.id).where(JobRun.task_id == t.id)).all()),
            )
            for t in tasks
        ]


def test_a_failed_validation_stops_the_kind_until_its_alert_is_acknowledged(
    scheduler: Scheduler, spark_rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    append_batches(make_table(spark_rt, name=NAME), 6)  # 6 small files in each of 2 partitions
    first = manage(spark_rt, NAME, POLICY)
    monkeypatch.setattr(spark_rt.settings, "failpoint", "corrupt-rewrite-then-write")
    monkeypatch.setattr(spark_rt.settings, "failpoints_enabled", True)

    # Round 1: the first compaction rewrites, fails validation and is never published.
    assert _round(spark_rt, scheduler, 1) == [TaskState.FAILED]
    failed = task_of(spark_rt, first)
    assert "never published" in (failed.reason or "")
    # The writer keeps committing: each commit would want a compaction (the small files
    # are back), but none is made and none runs.
    for batch in range(2, 6):
        assert _round(spark_rt, scheduler, batch) == []
    assert _compactions(spark_rt) == [(first, TaskState.FAILED, 1)]
    with transaction(spark_rt.engine) as s:
        decisions = s.scalars(
            select(TimelineEvent.decision_detail)
            .where(TimelineEvent.decision.is_not(None), TimelineEvent.decision != "superseded")
            .order_by(TimelineEvent.id)
        ).all()
        alert_id = s.scalars(
            select(Alert.id).where(
                Alert.rule == "rewrite_mismatch",
                Alert.key == f"sales.{NAME}:compaction",
                Alert.state == "firing",
            )
        ).one()
    held = [d["compaction"] for d in decisions if d and d["compaction"]["decision"] == "held"]
    assert len(held) >= 4, decisions
    assert "compaction held since" in held[-1]["reason"]

    with serve(spark_rt) as client:
        explain = client.get(f"{TABLE}/explain")
        assert explain.status_code == 200, explain.text
        said = (
            f"rewrite of task {first} failed validation (rewrite_mismatch) and was not published; "
            f"acknowledge alert {alert_id} or POST /api/v1/catalogs/"
            f"{spark_rt.settings.catalog_name}/tables/sales/{NAME}/kinds/compaction/resume "
            "to lift"
        )
        assert said in explain.json()["summary"]
        assert said in explain.json()["kinds"]["compaction"]["reason"]
        assert [h["kind"] for h in client.get(TABLE).json()["held"]] == ["compaction"]

        # The acknowledgement lifts it: the next commit makes a compaction, which runs
        # (the fault fixed meanwhile: the failpoint off) and succeeds.
        r = client.post(f"/api/v1/alerts/{alert_id}/ack", json={"by": "oncall"})
        assert r.status_code == 200, r.text
        assert client.get(TABLE).json()["held"] == []
    monkeypatch.setattr(spark_rt.settings, "failpoints_enabled", False)
    assert _round(spark_rt, scheduler, 6) == [TaskState.SUCCEEDED]
    assert [(state, runs) for _, state, runs in _compactions(spark_rt)] == [
        (TaskState.FAILED, 1),
        (TaskState.SUCCEEDED, 1),
    ]
