"""The leader's bookkeeping of work whose holder went silent: planners, earlier leaders' jobs."""

from __future__ import annotations

import logging
from datetime import timedelta

from sqlalchemy import func, select, update

from lakewarden.catalogs.regions import task_in_region
from lakewarden.db.models import JobRun, Task
from lakewarden.db.session import transaction
from lakewarden.leader import Fence, FencedOut
from lakewarden.runtime import Runtime
from lakewarden.states import RunState, TaskState
from lakewarden.tasks import repo
from services.scheduler.applications import Applications, reattach

log = logging.getLogger(__name__)


def abandon_orphans(
    rt: Runtime,
    fence: Fence,
    stale_after_s: float,
    inflight: set[int],
    applications: Applications | None = None,
) -> int:
    """Return work whose holder went silent: planners (stale heartbeat) and jobs of other leaders.

    A running task this leader does not hold was dispatched by a previous
    leader; it is re-planned from the table's real state, so a job that did
    commit before its leader died leaves nothing for the new plan to redo.
    A submitted application outlives its leader: a live one is re-attached (this leader
    watches it and it reports under this leader's fence), a dead one that committed is
    finished as succeeded; only a dead one without a commit is re-planned.
    """
    returned = 0
    # A region's leader returns its region's work only (lakewarden.catalogs.regions).
    mine = [] if fence.region is None else [task_in_region(fence.region)]
    with transaction(rt.engine) as s:
        stale = s.scalars(
            select(Task.id).where(
                Task.state == TaskState.PLANNING,
                Task.heartbeat_at < func.now() - timedelta(seconds=stale_after_s),
                *mine,
            )
        ).all()
        orphaned = s.scalars(
            select(Task.id).where(
                Task.state == TaskState.RUNNING, Task.holder != fence.holder, *mine
            )
        ).all()
    for task_id in stale:
        returned += _return_to_pending(
            rt, fence, task_id, TaskState.PLANNING, "planner went silent"
        )
    for task_id in orphaned:
        if task_id in inflight:
            continue
        if applications is not None:
            try:
                if reattach(rt, fence, task_id, applications) is not None:
                    continue
            except Exception:
                # Unknown (the catalog did not answer): neither re-attached nor re-planned.
                log.exception("task %d: could not judge its application", task_id)
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
