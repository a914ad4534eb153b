"""Make every maintenance commit identifiable, so a job is never committed twice.

The scheduler sets the commit properties (task id and attempt) for the job's thread;
runners that commit through Iceberg's Java actions put them into the snapshot summary.
Before re-running a task, the scheduler looks for a snapshot carrying its task id.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from pyiceberg.table import Table

TASK_KEY = "lakewarden.task-id"
ATTEMPT_KEY = "lakewarden.attempt"

_PROPERTIES: ContextVar[dict[str, str] | None] = ContextVar(
    "lakewarden_commit_properties", default=None
)


@contextmanager
def committing_as(task_id: int, attempt: int) -> Iterator[None]:
    token = _PROPERTIES.set({TASK_KEY: str(task_id), ATTEMPT_KEY: str(attempt)})
    try:
        yield
    finally:
        _PROPERTIES.reset(token)


def commit_properties() -> dict[str, str]:
    return dict(_PROPERTIES.get() or {})


def task_id() -> int | None:
    """The task the running job belongs to (None outside a scheduled job)."""
    value = (_PROPERTIES.get() or {}).get(TASK_KEY)
    return int(value) if value is not None else None


# The check a job makes right before each statement that commits (or deletes files): the
# scheduler installs one that asks the current policy (lakewarden.policy_gate) and raises
# lakewarden.outcomes.PolicyChanged when it no longer allows the task.
_GUARD: ContextVar[Callable[[], None] | None] = ContextVar("lakewarden_commit_guard", default=None)


@contextmanager
def guarded_by(check: Callable[[], None]) -> Iterator[None]:
    token = _GUARD.set(check)
    try:
        yield
    finally:
        _GUARD.reset(token)


def before_commit() -> None:
    """Runners call this right before committing; it raises if the policy says stop."""
    check = _GUARD.get()
    if check is not None:
        check()


def find_commit(table: Table, task_id: int) -> tuple[int, str | None] | None:
    """The (snapshot id, attempt) of the newest commit task `task_id` made, if any (a job
    with partial progress commits once per file-group batch)."""
    for snapshot in sorted(table.snapshots(), key=lambda s: s.timestamp_ms, reverse=True):
        summary = snapshot.summary
        if summary is not None and summary.get(TASK_KEY) == str(task_id):
            return snapshot.snapshot_id, summary.get(ATTEMPT_KEY)
    return None
