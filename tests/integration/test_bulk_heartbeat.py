"""One heartbeat per tick: the scheduler's beat says it is alive and that it still holds
every task it runs (jobs in its session and submitted applications) in one statement,
not one UPDATE per task; a task someone else holds keeps that holder's heartbeat."""

from __future__ import annotations

from typing import Any

from helpers import manage
from sqlalchemy import event, select, text

from lakewarden.db.locks import DBLocks
from lakewarden.db.models import Task
from lakewarden.db.session import transaction
from lakewarden.leader import Fence
from lakewarden.runtime import Runtime
from services.scheduler.main import Scheduler


def _run_as(rt: Runtime, task_id: int, holder: str) -> None:
    with rt.engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE tasks SET state = 'running', holder = :h, "
                "heartbeat_at = now() - interval '1 hour' WHERE id = :id"
            ),
            {"h": holder, "id": task_id},
        )


def test_the_scheduler_beats_for_everything_it_holds_in_one_statement(rt: Runtime) -> None:
    ours = [manage(rt, f"beat{i}", {}) for i in range(3)]
    theirs = manage(rt, "beat_other", {})
    for task_id in ours:
        _run_as(rt, task_id, rt.process_id)
    _run_as(rt, theirs, "another-scheduler")
    sched = Scheduler(rt)
    try:
        sched.fence = Fence(DBLocks.SCHEDULER_LEASE, rt.process_id, 1)
        # What it runs: two jobs in its session (one since taken over by another
        # scheduler) and an application; beat reads only their task ids.
        held: Any = None
        sched.inflight.update({ours[0]: held, ours[1]: held, theirs: held})
        sched.applications.running[ours[2]] = held
        statements: list[str] = []

        def count(*args: Any) -> None:
            statements.append(args[2])

        event.listen(rt.engine, "before_cursor_execute", count)
        try:
            sched.beat()
        finally:
            event.remove(rt.engine, "before_cursor_execute", count)
    finally:
        sched.pool.shutdown()
    assert len(statements) == 1, statements
    with transaction(rt.engine) as s:
        fresh = dict(
            s.execute(
                select(Task.id, Task.heartbeat_at > text("now() - interval '1 minute'"))
            ).all()
        )
    assert fresh == {ours[0]: True, ours[1]: True, ours[2]: True, theirs: False}
