"""Kind holds: a kind stopped on one table after a failure that would only repeat itself.

A rewrite that failed its validation is never published, and the table's next commit
would plan the same rewrite again, which fails again, without end (a
systematic fault: an engine bug on one column type, a corrupt input file). The same holds
for a job that fails with the same error run after run. So, when the leader records such
a failure (`lakewarden.tasks.runs.finish_run`, fenced, in the same transaction that fails
the task), it holds the kind on the table:

- no task of the kind is created on the table, by any path: `repo.create_task` refuses
  while a hold exists (commit evaluation, the sweep, readiness, a manual trigger or retry);
- a task of the kind already open does not start: dispatch skips it, as it skips a paused
  table (services/scheduler/dispatch.py);
- it stays until an operator acknowledges the alert its failure raised (`rule`: the
  critical `rewrite_mismatch`, or `task_failed`) or resumes the kind explicitly.

A pause or a writer's blocker (`table_blockers`) holds every kind of a table and lets
tasks be created meanwhile; a kind hold is per kind and stops creation too, and names the
failed task and its alert: its own table, with the same dispatch gate.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from lakewarden.db.models import Alert, JobRun, KindHold, ManagedTable, Task
from lakewarden.leader import Fence, check_fence
from lakewarden.states import AlertState, RunState, TaskState
from lakewarden.tasks.wakeup import announce

# The alert each cause raises (lakewarden.alerts.rules): acknowledging it lifts the hold.
VALIDATION_RULE = "rewrite_mismatch"
FAILED_RULE = "task_failed"
LIFTED_BY = (VALIDATION_RULE, FAILED_RULE)

# What varies between two runs failing for the same reason: numbers (ids, attempts, sizes,
# times) and generated names (UUIDs in file names). Masked before two errors are compared.
_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I)
_NUMBER = re.compile(r"\d+")


@dataclass(frozen=True)
class Cause:
    """Why a kind is to be held: the alert rule its failure raises, and what happened."""

    rule: str
    reason: str


def same_error(error: str) -> str:
    """`error` with what differs between runs of one fault masked (see _UUID, _NUMBER)."""
    return _NUMBER.sub("#", _UUID.sub("<uuid>", error)).strip()


def validation_failed(metrics: dict[str, Any] | None) -> bool:
    """Whether a run's metrics say its post-rewrite validation failed (as the
    rewrite_mismatch rule reads them)."""
    found = (metrics or {}).get("validation")
    return isinstance(found, dict) and found.get("status") == "failed"


def cause_of(
    session: Session, task: Task, metrics: dict[str, Any] | None, *, same_failures: int
) -> Cause | None:
    """After a run of `task` failed (its run already recorded and flushed): the cause to
    hold its kind for, or None. A failed validation holds at once; otherwise the table's
    last `same_failures` finished runs of the kind must all have failed with the same error
    (any other outcome among them breaks the streak; 0 turns this cause off)."""
    if validation_failed(metrics):
        return Cause(
            VALIDATION_RULE,
            f"rewrite of task {task.id} failed validation ({VALIDATION_RULE}) "
            "and was not published",
        )
    if same_failures < 1:
        return None
    last = session.execute(
        select(JobRun.state, JobRun.error)
        .join(Task, Task.id == JobRun.task_id)
        .where(
            Task.table_id == task.table_id,
            Task.kind == task.kind,
            JobRun.state != RunState.RUNNING,
        )
        .order_by(JobRun.id.desc())
        .limit(same_failures)
    ).all()
    errors = [e for state, e in last if state == RunState.FAILED and e]
    if len(errors) < same_failures or len({same_error(e) for e in errors}) != 1:
        return None
    return Cause(
        FAILED_RULE,
        f"{task.kind} failed {same_failures} times in a row with the same error "
        f"(last: task {task.id}, {errors[0][:300]})",
    )


def hold(session: Session, fence: Fence, task: Task, cause: Cause) -> tuple[KindHold, bool]:
    """Hold `task`'s kind on its table, as the leader (fenced). Idempotent: a kind already
    held keeps its first hold (its reason and alert stay true). Returns the hold and
    whether this call made it."""
    check_fence(session, fence)
    made = session.execute(
        insert(KindHold)
        .values(
            table_id=task.table_id,
            kind=task.kind,
            task_id=task.id,
            rule=cause.rule,
            reason=cause.reason,
            holder=fence.holder,
            leader_epoch=fence.epoch,
        )
        .on_conflict_do_nothing()
        .returning(KindHold.kind)
    ).first()
    found = hold_of(session, task.table_id, task.kind)
    assert found is not None  # ours, or the one the conflict found (committed: it waited)
    return found, made is not None


def hold_of(session: Session, table_id: int, kind: str) -> KindHold | None:
    return session.get(KindHold, (table_id, kind), populate_existing=True)


def holds_of(session: Session, table_ids: Iterable[int]) -> dict[int, list[KindHold]]:
    """The holds of each of `table_ids` that has any, by kind (one query)."""
    out: dict[int, list[KindHold]] = {}
    for h in session.scalars(
        select(KindHold)
        .where(KindHold.table_id.in_(list(table_ids)))
        .order_by(KindHold.table_id, KindHold.kind)
    ):
        out.setdefault(h.table_id, []).append(h)
    return out


def lift(session: Session, table_id: int, kind: str) -> KindHold | None:
    """Lift the hold of `kind` on the table; the hold lifted, or None if it was not held."""
    gone = session.scalars(
        delete(KindHold)
        .where(KindHold.table_id == table_id, KindHold.kind == kind)
        .returning(KindHold)
    ).one_or_none()
    if gone is not None:
        # A planned task of the kind may start now: wake the leader's dispatch at commit.
        announce(session, TaskState.PLANNED)
    return gone


def lift_for_alert(session: Session, alert: Alert) -> KindHold | None:
    """Acknowledging an alert about a failed task lifts the hold that failure made on its
    table's kind (its details name the task and the kind: lakewarden.alerts.rules)."""
    details = alert.details or {}
    task_id, kind = details.get("task_id"), details.get("kind")
    if alert.rule not in LIFTED_BY or not isinstance(task_id, int) or not isinstance(kind, str):
        return None
    task = session.get(Task, task_id)
    found = hold_of(session, task.table_id, kind) if task is not None else None
    if found is None or found.rule != alert.rule:
        return None
    return lift(session, found.table_id, kind)


def alert_of(session: Session, found: KindHold) -> int | None:
    """The id of the open alert whose acknowledgement lifts the hold (None: not raised yet,
    as the leader's next alert round does, or resolved since)."""
    if found.task_id is None:
        return None
    return session.scalar(
        select(Alert.id)
        .where(
            Alert.rule == found.rule,
            Alert.state != AlertState.RESOLVED,
            Alert.details["task_id"].astext == str(found.task_id),
        )
        .order_by(Alert.id.desc())
        .limit(1)
    )


def resume_path(row: ManagedTable, kind: str) -> str:
    return f"/api/v1/catalogs/{row.catalog}/tables/{row.namespace}/{row.name}/kinds/{kind}/resume"


def describe(session: Session, row: ManagedTable, found: KindHold) -> str:
    """Said the same way in explain, the task list, a refused trigger, the dashboard and
    the CLI: "compaction held since T: <reason>; acknowledge alert M or POST … to lift"."""
    alert = alert_of(session, found)
    ack = (
        f"acknowledge alert {alert}"
        if alert is not None
        else f"acknowledge its {found.rule} alert (raised at the leader's next alert round)"
    )
    return (
        f"{found.kind} held since {found.created_at.isoformat()}: {found.reason}; "
        f"{ack} or POST {resume_path(row, found.kind)} to lift"
    )


def shown(session: Session, row: ManagedTable, found: KindHold) -> dict[str, Any]:
    """The hold as the API shows it (explain, the table: `KindHoldOut`)."""
    return {
        "kind": found.kind,
        "since": found.created_at,
        "reason": found.reason,
        "task_id": found.task_id,
        "rule": found.rule,
        "alert_id": alert_of(session, found),
        "lift": describe(session, row, found),
    }
