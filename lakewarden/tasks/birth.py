"""A task's birth: the one way a task is opened, whoever asks (commit evaluation, a manual
trigger or retry, the leader's sweep, the readiness round).

It copies what the kind's policy section says of running the task (priority, attempts,
pool) and stamps the table's policy version on the trigger, so every task says which
policy it was born under. `repo.create_task` then refuses a second open task of the kind
on the table, and a task of a kind held on the table (`lakewarden.holds`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select, tuple_
from sqlalchemy.orm import Session

from lakewarden.db.models import KindHold, Task
from lakewarden.policy.model import KindPolicy
from lakewarden.states import OPEN_TASK_STATES
from lakewarden.tasks import repo


@dataclass(frozen=True)
class Birth:
    """A task to open on a table under its policy's `section` (of policy `policy_version`)."""

    table_id: int
    policy_version: int
    kind: str
    section: KindPolicy
    trigger: dict[str, Any]


def open_tasks(session: Session, births: Sequence[Birth], *, actor: str) -> dict[int, int]:
    """Open the tasks of `births` in one statement: {index in `births`: new id} for those
    opened; the others' table has one open already or the kind is held on it (`why_not_all`
    says which)."""
    return repo.create_tasks(
        session,
        [
            repo.NewTask(
                table_id=b.table_id,
                kind=b.kind,
                trigger={**b.trigger, "policy_version": b.policy_version},
                priority=b.section.priority,
                max_attempts=b.section.max_attempts,
                pool=b.section.pool,
            )
            for b in births
        ],
        actor=actor,
    )


def open_task(
    session: Session,
    *,
    table_id: int,
    policy_version: int,
    kind: str,
    section: KindPolicy,
    trigger: dict[str, Any],
    actor: str,
) -> int | None:
    """Open a task of `kind` on the table under its policy's `section`; the new id, or None
    when the table has one open already or the kind is held on it (`why_not` says which)."""
    birth = Birth(table_id, policy_version, kind, section, trigger)
    return open_tasks(session, [birth], actor=actor).get(0)


def why_not(session: Session, table_id: int, kind: str) -> KindHold | Task | None:
    """Why `open_task` opened nothing: the kind's hold on the table, else the open task
    that already covers it (None: that task ended meanwhile)."""
    return why_not_all(session, [(table_id, kind)]).get((table_id, kind))


def why_not_all(
    session: Session, pairs: Sequence[tuple[int, str]]
) -> dict[tuple[int, str], KindHold | Task]:
    """`why_not` for many (table id, kind) pairs in two queries; a pair absent from the
    answer has neither (its open task ended meanwhile)."""
    wanted = sorted(set(pairs))
    if not wanted:
        return {}
    out: dict[tuple[int, str], KindHold | Task] = {}
    for task in session.scalars(
        select(Task).where(
            tuple_(Task.table_id, Task.kind).in_(wanted), Task.state.in_(OPEN_TASK_STATES)
        )
    ):
        out[(task.table_id, task.kind)] = task
    for hold in session.scalars(
        select(KindHold)
        .where(tuple_(KindHold.table_id, KindHold.kind).in_(wanted))
        .execution_options(populate_existing=True)
    ):
        out[(hold.table_id, hold.kind)] = hold  # a hold is the first reason
    return out
