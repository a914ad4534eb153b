"""Explain asks the rules the real paths ask, so it cannot drift from them: for the same
table and history, what explain says the next sweep or commit would do is what the leader's
sweep and the commit evaluation then do, with the same reason."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from helpers import append_batches, make_table
from sqlalchemy import select, text

from lakewarden.catalogs.catalog import TableRef
from lakewarden.db.locks import DBLocks
from lakewarden.db.models import ManagedTable, Task, TimelineEvent
from lakewarden.db.session import transaction
from lakewarden.evaluate import evaluate_events
from lakewarden.events.ingest import sync_table
from lakewarden.health.explain import explain_table
from lakewarden.leader import acquire_or_renew
from lakewarden.policy.model import Policy
from lakewarden.runtime import Runtime
from lakewarden.tables import add_table, effective_policy_for
from services.scheduler.sweeps import sweep_due_tasks

REF = TableRef("sales", "orders")


def _explain(rt: Runtime, now: datetime) -> dict[str, Any]:
    table = rt.catalog.load_table((REF.namespace, REF.name))
    with transaction(rt.engine) as s:
        row = s.scalars(select(ManagedTable)).one()
        policy: Policy = effective_policy_for(s, row)
        kinds: dict[str, Any] = explain_table(s, row, table, policy, now, settings=rt.settings)[
            "kinds"
        ]
        return kinds


def _trigger(kinds: dict[str, Any], kind: str, source: str) -> dict[str, Any]:
    (trigger,) = [t for t in kinds[kind]["triggers"] if t["source"] == source]
    assert isinstance(trigger, dict)
    return trigger


def test_explain_says_what_the_sweep_then_does(rt: Runtime) -> None:
    append_batches(make_table(rt), 1)
    with transaction(rt.engine) as s:
        add_table(s, rt.settings.catalog_name, REF, {"clean": {"interval_minutes": 60}})
    with rt.engine.begin() as conn:
        fence = acquire_or_renew(conn, DBLocks.SCHEDULER_LEASE, "leader", 60)
    assert fence is not None
    now = datetime.now(UTC)

    def sweep_and_end_its_task(last_created_ago: timedelta) -> list[int]:
        created = sweep_due_tasks(rt, fence, now)
        with rt.engine.begin() as conn:  # end it, as if it ran that long ago
            conn.execute(
                text("UPDATE tasks SET state = 'succeeded', created_at = :at WHERE kind = 'clean'"),
                {"at": now - last_created_ago},
            )
        return created

    # no clean task yet: due
    said = _trigger(_explain(rt, now), "clean", "sweep")
    assert said["would_create_task"] is True
    assert said["reason"] == "no clean task yet: the next sweep creates one"
    assert len(sweep_and_end_its_task(timedelta(minutes=30))) == 1

    # the last one 30 min ago, interval 60 min: not due, and the sweep creates nothing
    said = _trigger(_explain(rt, now), "clean", "sweep")
    assert said["would_create_task"] is False
    due_at = (now - timedelta(minutes=30) + timedelta(minutes=60)).isoformat()
    assert said["reason"] == f"the next clean task is due at {due_at}"
    assert sweep_and_end_its_task(timedelta(minutes=90)) == []

    # the last one 90 min ago: due, and the sweep's task gives the same reason
    said = _trigger(_explain(rt, now), "clean", "sweep")
    assert said["would_create_task"] is True
    assert said["reason"] == (
        "last clean task 90 min ago, interval 60 min: the next sweep creates one"
    )
    (created,) = sweep_due_tasks(rt, fence, now)
    with transaction(rt.engine) as s:
        task = s.get(Task, created)
        assert task is not None
        assert task.trigger["reason"] == "clean sweep: last clean task 90 min ago, interval 60 min"


def test_explain_judges_a_commit_as_evaluation_judges_it(rt: Runtime) -> None:
    """Commits ingested, then explain, then the evaluation of those commits: both judge the
    same snapshot and the same task history (files added since the last task, its state)."""
    table = make_table(rt)
    policy = {
        "compaction": {"min_small_files": 5, "min_input_files": 2},
        "clustering": {"enabled": True, "columns": ["id"], "min_changed_files": 6},
    }
    with transaction(rt.engine) as s:
        add_table(s, rt.settings.catalog_name, REF, policy)
    # 4 files (2 reducible), then 10 (8 reducible, 10 added since the last task)
    for batches, created in ((2, False), (3, True)):
        table = append_batches(table, batches)
        with transaction(rt.engine) as s:
            row = s.scalars(select(ManagedTable)).one()
            new_events = sync_table(s, row, table, source="test").new_event_ids
        said = _explain(rt, datetime.now(UTC))
        with transaction(rt.engine) as s:
            row = s.scalars(select(ManagedTable)).one()
            evaluate_events(s, row, new_events, actor="test")
            event = s.get(TimelineEvent, new_events[-1])
            assert event is not None
            decided = event.decision_detail
            assert decided is not None
        for kind in ("compaction", "clustering"):
            commit = _trigger(said, kind, "commits")
            assert commit["would_create_task"] is created, kind
            assert decided[kind]["decision"] == ("task-created" if created else "no-action")
            assert (commit["reason"], commit["metrics"]) == (
                decided[kind]["reason"],
                decided[kind]["metrics"],
            )
