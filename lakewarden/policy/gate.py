"""The policy is law: every step that moves a task on asks the current policy first.

A task is stamped with the policy it was planned under (a digest of its kind's effective
section, and the table and namespace versions for people). Trigger, planning, dispatch,
the job right before it commits, and every policy change all ask `judge`:

- the table was unregistered                                         → cancel;
- the kind is disabled (and the task carries no explicit override)   → cancel;
- the stored policy no longer validates                              → cancel;
- the kind's effective settings changed since the task was planned   → re-plan;
- otherwise                                                          → go.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import ValidationError
from sqlalchemy import select, tuple_
from sqlalchemy.orm import Session

from lakewarden.db.models import ManagedTable, NamespacePolicy, Task
from lakewarden.policy.model import KindPolicy, Policy, effective_policy, first_problem
from lakewarden.states import OPEN_TASK_STATES, TaskState
from lakewarden.tables import namespace_defaults
from lakewarden.tasks import repo

# The trigger key a manual request sets to run a kind its policy disables, once.
OVERRIDE_KEY = "override_disabled"


@dataclass(frozen=True)
class Stamp:
    """Which policy a task was planned under."""

    digest: str  # of the kind's effective section: changes iff its settings change
    table_version: int
    namespace_version: int

    def as_json(self) -> dict[str, Any]:
        return {
            "digest": self.digest,
            "table_version": self.table_version,
            "namespace_version": self.namespace_version,
        }

    def describe(self) -> str:
        return f"table policy v{self.table_version}, namespace defaults v{self.namespace_version}"


@dataclass(frozen=True)
class Verdict:
    action: Literal["go", "replan", "cancel"]
    reason: str
    stamp: Stamp | None
    section: KindPolicy | None
    # The table's whole effective policy as judged: a dispatch builds its Job from it
    # (`execute.Job.of`) instead of merging it again.
    policy: Policy | None = None

    @property
    def go(self) -> bool:
        return self.action == "go"


def digest(section: KindPolicy) -> str:
    body = json.dumps(section.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(body.encode()).hexdigest()[:16]


def current(session: Session, row: ManagedTable, kind: str) -> tuple[KindPolicy, Stamp]:
    """The kind's section of the table's effective policy now, and its stamp.
    Raises pydantic's ValidationError when the stored policy no longer validates."""
    section, stamp, _ = _current(session, row, kind, _UNREAD)
    return section, stamp


class _Unread:
    """The namespace defaults were not read yet (None: read, and there are none)."""


_UNREAD = _Unread()


def _current(
    session: Session, row: ManagedTable, kind: str, ns: NamespacePolicy | _Unread | None
) -> tuple[KindPolicy, Stamp, Policy]:
    """`ns`: the row's namespace defaults when the caller read them (`judge_all`)."""
    if isinstance(ns, _Unread):
        ns = namespace_defaults(session, row.catalog, row.namespace)
    policy = effective_policy(row.policy, ns.policy if ns else None)
    section = policy.for_kind(kind)
    return section, Stamp(digest(section), row.policy_version, ns.version if ns else 0), policy


def overridden(trigger: dict[str, Any] | None) -> bool:
    return bool((trigger or {}).get(OVERRIDE_KEY))


def judge_all(session: Session, pairs: Sequence[tuple[ManagedTable, Task]]) -> list[Verdict]:
    """`judge` for each (row, task), the namespaces' defaults read in one query for all (a
    dispatch or claim of a batch)."""
    keys = sorted({(row.catalog, row.namespace) for row, _ in pairs})
    found = (
        {
            (ns.catalog, ns.namespace): ns
            for ns in session.scalars(
                select(NamespacePolicy).where(
                    tuple_(NamespacePolicy.catalog, NamespacePolicy.namespace).in_(keys)
                )
            )
        }
        if keys
        else {}
    )
    return [
        judge(session, row, task, found.get((row.catalog, row.namespace))) for row, task in pairs
    ]


def judge(
    session: Session, row: ManagedTable, task: Task, ns: NamespacePolicy | _Unread | None = _UNREAD
) -> Verdict:
    """May `task` go on under the current policy? (Read-only.) `ns`: as `_current`."""
    if row.retired_at is not None:
        return Verdict(
            "cancel",
            f"{row.namespace}.{row.name} was unregistered: it is no longer managed",
            None,
            None,
        )
    try:
        section, stamp, policy = _current(session, row, task.kind, ns)
    except ValidationError as exc:
        return Verdict(
            "cancel",
            f"the stored policy of {row.namespace}.{row.name} is no longer valid "
            f"({first_problem(exc)}): nothing runs until it is fixed",
            None,
            None,
        )
    if not section.enabled and not overridden(task.trigger):
        return Verdict(
            "cancel",
            f"{task.kind} is disabled by the current policy ({stamp.describe()}): "
            "a disabled kind never runs",
            stamp,
            section,
            policy,
        )
    planned = ((task.plan or {}).get("policy") or {}).get("digest")
    if planned is not None and planned != stamp.digest:
        return Verdict(
            "replan",
            f"the {task.kind} policy changed since this task was planned (now "
            f"{stamp.describe()}): re-planning under the current one",
            stamp,
            section,
            policy,
        )
    return Verdict(
        "go", f"allowed by the current policy ({stamp.describe()})", stamp, section, policy
    )


def apply_policy_change(session: Session, rows: list[ManagedTable], actor: str) -> list[int]:
    """After a policy change: cancel the open tasks the new policy forbids and send planned
    ones whose settings changed back to planning. Running tasks are cancelled when their
    kind is now disabled (the scheduler then cancels the Spark job); a running job whose
    settings merely changed is stopped by the check right before it commits. Returns the
    ids of the tasks moved."""
    moved: list[int] = []
    for row in rows:
        tasks = session.scalars(
            select(Task)
            .where(Task.table_id == row.id, Task.state.in_(OPEN_TASK_STATES))
            .order_by(Task.id)
        ).all()
        for task in tasks:
            verdict = judge(session, row, task)
            expected: tuple[str, ...]
            if verdict.action == "cancel":
                to, expected = TaskState.CANCELLED, OPEN_TASK_STATES
            elif verdict.action == "replan" and task.state == TaskState.PLANNED:
                to, expected = TaskState.PENDING, (TaskState.PLANNED,)
            else:
                continue
            try:
                repo.transition(
                    session,
                    task.id,
                    to,
                    actor=actor,
                    expected=expected,
                    reason=f"policy changed: {verdict.reason}",
                    **({"plan": None, "holder": None} if to == TaskState.PENDING else {}),
                )
            except repo.TransitionRejected:
                continue  # moved on meanwhile; the next step judges it again
            moved.append(task.id)
    return moved
