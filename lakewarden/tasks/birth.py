"""A task's birth: the one way a task is opened, whoever asks (commit evaluation, a manual
trigger or retry, the leader's sweep, the readiness round).

It copies what the kind's policy section says of running the task (priority, attempts,
pool) and stamps the table's policy version on the trigger, so every task says which
policy it was born under. `repo.create_task` then refuses a second open task of the kind
on the table, and a task of a kind held on the table (`lakewarden.holds`)."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from lakewarden.db.models import KindHold, Task
from lakewarden.holds import hold_of
from lakewarden.policy.model import KindPolicy
from lakewarden.tasks import repo


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
    return repo.create_task(
        session,
        table_id=table_id,
        kind=kind,
        actor=actor,
        priority=section.priority,
        max_attempts=section.max_attempts,
        pool=section.pool,
        trigger={**trigger, "policy_version": policy_version},
    )


def why_not(session: Session, table_id: int, kind: str) -> KindHold | Task | None:
    """Why `open_task` opened nothing: the kind's hold on the table, else the open task
    that already covers it (None: that task ended meanwhile)."""
    return hold_of(session, table_id, kind) or repo.find_open_task(session, table_id, kind)
