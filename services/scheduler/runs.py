"""The leader's bookkeeping of work whose holder went silent: planners, earlier leaders' jobs."""

from __future__ import annotations

import logging
from datetime import timedelta

from sqlalchemy import func, select, update

from lakewarden.db.models import JobRun, Task
from lakewarden.db.session import transaction
from lakewarden.leader import Fence, FencedOut
from lakewarden.runtime import Runtime
from lakewarden.states import RunState, TaskState
from lakewarden.tasks import repo

log = logging.getLogger(__name__)


def abandon_orphans(rt: Runtime, fence: Fence, stale_after_s: float, inflight: set[int]) -> int:
    """Return work whose holder went silent: planners (stale heartbeat) and jobs of other leaders.

    A running task this leader does not hold was dispatched by a previous
    leader; it is re-planned from the table's real state, so a job that did
    commit before its leader died leaves nothing for the new plan to redo.
    """
    returned = 0
    with transaction(rt.engine) as s:
        stale = s.scalars(
            select(Task.id).where(
                Task.state == TaskState.PLANNING,
                Task.heartbeat_at < func.now() - timedelta(seconds=stale_after_s),
            )
        ).all()
        orphaned = s.scalars(
            select(Task.id).where(Task.state == TaskState.RUNNING, Task.holder != fence.holder)
        ).all()
    for task_id in stale:
        returned += _return_to_pending(
            rt, fence, task_id, TaskState.PLANNING, "planner went silent"
        )
    for task_id in orphaned:
        if task_id in inflight:
            continue
        returned += _return_to_pending(
            rt,
            fence,
            task_id,
            TaskState.RUNNING,
            "its scheduler lost leadership mid-run; re-planning",
        )
    return returned


def _return_to_pending(rt: Runtime, fence: Fence, task_id: int, src: str, reason: str) -> int:
    """One fenced transaction: the task goes back to pending and, if it was running, its
    run is abandoned with it; when either is refused, neither moves."""
    try:
        with transaction(rt.engine) as s:
            repo.transition(
                s,
                task_id,
                TaskState.PENDING,
                actor=rt.process_id,
                expected=(src,),
                fence=fence,
                reason=reason,
                holder=None,
                plan=None,
            )
            if src == TaskState.RUNNING:
                s.execute(
                    update(JobRun)
                    .where(JobRun.task_id == task_id, JobRun.state == RunState.RUNNING)
                    .values(
                        state=RunState.ABANDONED,
                        finished_at=func.now(),
                        error=f"scheduler leadership moved to {fence.holder} (epoch {fence.epoch})",
                    )
                )
        return 1
    except (repo.TransitionRejected, FencedOut) as exc:
        log.info("task %d not returned: %s", task_id, exc)
        return 0
