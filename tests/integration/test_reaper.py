"""The reaper returns a previous leader's running task and abandons its run in one fenced
transaction: both move, or (for a deposed leader) neither."""

from __future__ import annotations

from helpers import manage
from sqlalchemy import select, text

from lakewarden.db.locks import DBLocks
from lakewarden.db.models import JobRun, Task
from lakewarden.db.session import transaction
from lakewarden.leader import Fence, acquire_or_renew
from lakewarden.runtime import Runtime
from lakewarden.states import RunState, TaskState
from services.scheduler.reaper import abandon_orphans


def _running_orphan(rt: Runtime) -> int:
    """A task running under 'old-leader', with its run."""
    task_id = manage(rt, "t", {})
    with transaction(rt.engine) as s:
        s.execute(
            text(
                "UPDATE tasks SET state = 'running', holder = 'old-leader', attempt = 1 "
                "WHERE id = :i"
            ),
            {"i": task_id},
        )
        s.add(
            JobRun(
                task_id=task_id,
                attempt=1,
                state=RunState.RUNNING,
                scheduler_id="old-leader",
                leader_epoch=1,
            )
        )
    return task_id


def _lead(rt: Runtime, who: str) -> Fence:
    with rt.engine.begin() as conn:
        conn.execute(text("UPDATE leader_lease SET expires_at = now()"))
        fence = acquire_or_renew(conn, DBLocks.SCHEDULER_LEASE, who, 15)
    assert fence is not None
    return fence


def _states(rt: Runtime, task_id: int) -> tuple[str, str, str | None]:
    with transaction(rt.engine) as s:
        task = s.get(Task, task_id)
        run = s.scalars(select(JobRun).where(JobRun.task_id == task_id)).one()
        assert task is not None
        return task.state, run.state, run.error


def test_the_task_and_its_run_move_together(rt: Runtime) -> None:
    task_id = _running_orphan(rt)
    fence = _lead(rt, "new-leader")
    assert abandon_orphans(rt, fence, 30, inflight=set()) == 1
    task_state, run_state, error = _states(rt, task_id)
    assert (task_state, run_state) == (TaskState.PENDING, RunState.ABANDONED)
    assert error == f"scheduler leadership moved to new-leader (epoch {fence.epoch})"


def test_a_deposed_leader_moves_neither(rt: Runtime) -> None:
    task_id = _running_orphan(rt)
    deposed = _lead(rt, "new-leader")
    _lead(rt, "newer-leader")  # takes over: the fence of new-leader is stale
    assert abandon_orphans(rt, deposed, 30, inflight=set()) == 0
    task_state, run_state, error = _states(rt, task_id)
    assert (task_state, run_state, error) == (TaskState.RUNNING, RunState.RUNNING, None)
