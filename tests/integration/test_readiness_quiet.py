"""Readiness under the quiet rule, without Spark (pyiceberg writes): partitions become ready
and tagged once quiet; a late write into them un-readies them, and, already quiet again, the
same round makes them ready again on the new snapshot: every change is notified, in order."""

from __future__ import annotations

import pytest
from helpers import (
    Receiver,
    append_batches,
    current,
    lead,
    make_table,
    past_quiet,
    readiness_rows,
)
from sqlalchemy import select

from lakewarden.db.models import ManagedTable
from lakewarden.db.session import transaction
from lakewarden.readiness import commits_after
from lakewarden.runtime import Runtime
from services.scheduler.readiness import readiness_round

POLICY = {
    "readiness": {
        "enabled": True,
        "partition": "region",
        "rule": "quiet",
        "quiet_minutes": 0.0001,  # quiet once the commit's millisecond has passed
        "tag": True,
    }
}


def test_a_late_write_unreadies_and_a_quiet_partition_is_ready_again_on_the_new_snapshot(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    receiver = Receiver()
    monkeypatch.setattr(rt.settings, "alert_webhook_url", receiver.url)
    table = append_batches(make_table(rt, name="quiet"), 1)
    with transaction(rt.engine) as s:
        s.add(
            ManagedTable(
                catalog=rt.settings.catalog_name, namespace="sales", name="quiet", policy=POLICY
            )
        )
    fence = lead(rt)

    assert readiness_round(rt, fence, past_quiet()) == 2
    first = table.refresh().current_snapshot()
    assert first is not None
    states = readiness_rows(rt)
    assert {p: (r.ready, r.tag, r.snapshot_id) for p, r in states.items()} == {
        "a": (True, "ready-a", first.snapshot_id),
        "b": (True, "ready-b", first.snapshot_id),
    }
    assert states["a"].reason is not None and states["a"].reason.startswith(
        "complete: no commit touched it for 0.0001 min after its last commit"
    )
    assert readiness_round(rt, fence, past_quiet()) == 0  # nothing new: nothing moves

    table = append_batches(table, 1, start=100, regions=("a",))  # a late write into a only
    late = table.current_snapshot()
    assert late is not None
    assert readiness_round(rt, fence, past_quiet()) == 2  # a: un-ready, then ready
    states = readiness_rows(rt)
    assert states["a"].ready and states["a"].snapshot_id == late.snapshot_id
    assert states["a"].unready_reason is not None
    assert states["a"].unready_reason.startswith(f"late commit {late.snapshot_id} at ")
    assert states["b"].snapshot_id == first.snapshot_id and states["b"].unready_reason is None
    refs = table.refresh().refs()
    assert (refs["ready-a"].snapshot_id, refs["ready-b"].snapshot_id) == (
        late.snapshot_id,
        first.snapshot_id,
    )
    sent = [(b["event"], b["details"]["partition"]) for _, b in receiver.received]
    assert sent == [
        ("partition_ready", "a"),
        ("partition_ready", "b"),
        ("partition_unready", "a"),
        ("partition_ready", "a"),
    ]
    receiver.close()


def test_a_compaction_that_finds_nothing_to_do_counts_as_having_run_on_the_partition(
    rt: Runtime,
) -> None:
    """The required kind's planner judged the partition fine (one file each: nothing to
    merge) after its last commit: the task is skipped, and that counts."""
    from lakewarden.db.models import Task
    from lakewarden.states import TaskState
    from services.worker.main import Worker

    append_batches(make_table(rt, name="fine"), 1)
    policy = {"readiness": {**POLICY["readiness"], "tag": False, "require": ["compaction"]}}
    with transaction(rt.engine) as s:
        s.add(
            ManagedTable(
                catalog=rt.settings.catalog_name, namespace="sales", name="fine", policy=policy
            )
        )
    fence = lead(rt)
    assert readiness_round(rt, fence, past_quiet()) == 0
    waiting = readiness_rows(rt)["a"]
    assert not waiting.ready and waiting.reason is not None
    assert waiting.reason.startswith("waiting for compaction to run on it since its last commit")
    assert Worker(rt).run_once()
    with transaction(rt.engine) as s:
        (task,) = s.scalars(select(Task)).all()
        assert (task.kind, task.state, task.trigger["source"]) == (
            "compaction",
            TaskState.SKIPPED,
            "readiness",
        )
    assert readiness_round(rt, fence, past_quiet()) == 2
    ready = readiness_rows(rt)["a"]
    assert ready.ready and ready.tag is None
    assert ready.reason is not None and ready.reason.endswith("; compaction ran on it since")


def test_after_a_rollback_only_the_commits_past_the_fork_are_new(rt: Runtime) -> None:
    """The round's cursor is off main's history after a rollback: the commits made on main
    since the fork are new, and main's older history is not read again (it made every
    ready partition flap: un-readied as 'late' and readied again in one round)."""
    table = append_batches(make_table(rt, name="forked"), 3)
    fork = current(table).snapshot_id
    table = append_batches(table, 2, start=100)
    cursor = current(table).snapshot_id  # the round had read up to here
    assert commits_after(table, cursor) == []
    table.manage_snapshots().rollback_to_snapshot(fork).commit()
    table = append_batches(table.refresh(), 1, start=200)
    new = commits_after(table.refresh(), cursor)
    assert [s.snapshot_id for s in new] == [current(table).snapshot_id]


def test_a_task_readiness_opens_says_the_policy_version_it_was_born_under(rt: Runtime) -> None:
    """Every birth stamps the table's policy version on the trigger (`tasks.birth`); the
    readiness round left it out."""
    from lakewarden.db.models import Task

    append_batches(make_table(rt, name="stamped"), 1)
    policy = {"readiness": {**POLICY["readiness"], "tag": False, "require": ["compaction"]}}
    with transaction(rt.engine) as s:
        s.add(
            ManagedTable(
                catalog=rt.settings.catalog_name,
                namespace="sales",
                name="stamped",
                policy=policy,
                policy_version=3,
            )
        )
    readiness_round(rt, lead(rt), past_quiet())
    with transaction(rt.engine) as s:
        (task,) = s.scalars(select(Task)).all()
        assert (task.trigger["source"], task.trigger.get("policy_version")) == ("readiness", 3)
