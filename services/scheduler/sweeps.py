"""The leader's periodic sweep: time-based kinds (TTL, clean) get a task once their
interval has passed since the table's last task of that kind. Idempotent: a second
sweep (or a second leader for a moment) finds the open task and creates nothing.
A table the sweep fails on (a stored policy that no longer validates, say) is skipped
and alerted (`lakewarden.isolation`): the others still get their tasks."""

from __future__ import annotations

import logging
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from lakewarden.db.models import ManagedTable, Task
from lakewarden.db.session import transaction
from lakewarden.isolation import PerTable
from lakewarden.kinds import REGISTRY
from lakewarden.kinds.base import Kind
from lakewarden.leader import Fence, check_fence
from lakewarden.policy import SweptPolicy, is_due
from lakewarden.runtime import Runtime
from lakewarden.tables import LIVE, effective_policy_for
from lakewarden.tasks.repo import create_task

log = logging.getLogger(__name__)


def sweep_due_tasks(rt: Runtime, fence: Fence, now: datetime) -> list[int]:
    """Create the tasks that are due; returns their ids. A table the sweep fails on is
    skipped (its partial work rolled back to a savepoint) and alerted; the rest go on."""
    swept = [k for k in REGISTRY.values() if k.swept]
    if not swept:
        return []
    created: list[int] = []
    isolated = PerTable("sweep")
    with transaction(rt.engine) as s:
        check_fence(s, fence)
        last = {
            (table_id, kind): at
            for table_id, kind, at in s.execute(
                select(Task.table_id, Task.kind, func.max(Task.created_at))
                .where(Task.kind.in_([k.name for k in swept]))
                .group_by(Task.table_id, Task.kind)
            )
        }
        rows = s.scalars(
            select(ManagedTable).where(ManagedTable.catalog == rt.settings.catalog_name, LIVE)
        ).all()
        for row in rows:
            with isolated.table(f"{row.namespace}.{row.name}", s):
                created += _sweep_table(s, fence, row, swept, last, now)
        isolated.record(s)
    if created:
        log.info("sweep created %d task(s): %s", len(created), created)
    return created


def _sweep_table(
    s: Session,
    fence: Fence,
    row: ManagedTable,
    swept: list[Kind],
    last: dict[tuple[int, str], datetime],
    now: datetime,
) -> list[int]:
    created: list[int] = []
    policy = effective_policy_for(s, row)
    for kind in swept:
        section = kind.section(policy)
        if not section.enabled or not isinstance(section, SweptPolicy):
            continue
        due, why = is_due(section, last.get((row.id, kind.name)), now, kind=kind.name)
        if not due:
            continue
        reason = f"{kind.name} sweep: {why}"
        task_id = create_task(
            s,
            table_id=row.id,
            kind=kind.name,
            actor=fence.holder,
            priority=section.priority,
            max_attempts=section.max_attempts,
            pool=section.pool,
            trigger={
                "source": "sweep",
                "reason": reason,
                "leader_epoch": fence.epoch,
                "policy_version": row.policy_version,
            },
        )
        if task_id is not None:
            created.append(task_id)
    return created
