"""Operator views of one table: its measured health, and what would run on it now and why.

Both only read. Their transaction is made READ ONLY before anything else happens, so
Postgres itself refuses any write; no Iceberg commit is made either.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi import APIRouter, HTTPException
from pydantic import ValidationError
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
from pyiceberg.table import Table
from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from lakewarden.db.models import ManagedTable, TableBlocker, Task
from lakewarden.evaluate import files_added_since_last_task, last_task_state
from lakewarden.events.ingest import snapshot_fields
from lakewarden.health import measure
from lakewarden.kinds import REGISTRY
from lakewarden.kinds.base import EventFacts, Kind
from lakewarden.policy import KindPolicy, Policy, SweptPolicy
from lakewarden.runtime import Runtime
from lakewarden.tasks.repo import open_task
from services.api import errors
from services.api.deps import RuntimeDep, SessionDep, TableDep
from services.api.health_schemas import ExplainOut, HealthOut
from services.api.policies import current_policy

router = APIRouter(prefix="/api/v1/tables", tags=["health"])
log = logging.getLogger(__name__)

GONE = {
    **errors.ON_TABLE,
    409: "the table is gone from the catalog, or its stored policy is no longer valid",
}

GAIN_PREFIXES = ("expected_", "estimated_")
GAIN_SUFFIXES = ("_before", "_to_rewrite")


def _read_only(session: Session) -> None:
    # Allowed after the table lookup: Postgres only refuses a switch to read-write late.
    session.execute(text("SET TRANSACTION READ ONLY"))


def _load(rt: Runtime, row: ManagedTable) -> Table:
    try:
        return rt.catalog.load_table((row.namespace, row.name))
    except (NoSuchTableError, NoSuchNamespaceError) as exc:
        raise HTTPException(
            409,
            f"table {row.namespace}.{row.name} is managed but gone from the catalog; "
            "unregister it with DELETE /api/v1/tables/{namespace}/{name}",
        ) from exc


@router.get(
    "/{namespace}/{name}/health", response_model=HealthOut, responses=errors.documented(notes=GONE)
)
def table_health(row: TableDep, rt: RuntimeDep, session: SessionDep) -> HealthOut:
    """File sizes, delete files, snapshots, manifests, layout and TTL state (overall and per
    partition), a 0-100 score with what each factor cost, and every threshold that fires."""
    _read_only(session)
    policy = current_policy(session, row)
    health = measure(_load(rt, row), policy, datetime.now(UTC))
    return HealthOut.model_validate(
        {
            "table": f"{row.namespace}.{row.name}",
            "policy_version": row.policy_version,
            **health.to_dict(),
        }
    )


@router.get(
    "/{namespace}/{name}/explain",
    response_model=ExplainOut,
    responses=errors.documented(notes=GONE),
)
def explain(row: TableDep, rt: RuntimeDep, session: SessionDep) -> ExplainOut:
    """For every kind: enabled or not, its open task, whether the next commit or sweep would
    create a task, and the plan its planner would make now (with the expected gain) or why
    it would skip. Live blockers are listed. Nothing is run or written."""
    _read_only(session)
    table = _load(rt, row)
    policy = current_policy(session, row)
    now = datetime.now(UTC)
    current = table.current_snapshot()
    summary = snapshot_fields(current)["summary"] if current else None
    blockers = list(
        session.scalars(
            select(TableBlocker)
            .where(TableBlocker.table_id == row.id, TableBlocker.expires_at > func.now())
            .order_by(TableBlocker.expires_at)
        )
    )
    kinds = {
        kind.name: _explain_kind(session, row, kind, policy, table, now, summary)
        for kind in REGISTRY.values()
    }
    running = [name for name, k in kinds.items() if k["would_run"]]
    overview = f"would run now: {', '.join(running)}" if running else "nothing would run now"
    if blockers:
        last = blockers[-1]
        overview += (
            f"; blocked by {', '.join(sorted({b.holder for b in blockers}))} until "
            f"{last.expires_at.isoformat()}: no job starts before then"
        )
    return ExplainOut.model_validate(
        {
            "table": f"{row.namespace}.{row.name}",
            "at": now,
            "snapshot_id": current.snapshot_id if current else None,
            "policy_version": row.policy_version,
            "summary": overview,
            "blocked_by": [
                {"id": b.id, "holder": b.holder, "reason": b.reason, "until": b.expires_at}
                for b in blockers
            ],
            "kinds": kinds,
        }
    )


def expected_gain(plan: dict[str, Any] | None) -> dict[str, Any] | None:
    """The numbers a plan promises (before/after, estimates), whatever its kind."""
    if plan is None:
        return None
    gain = {
        k: v for k, v in plan.items() if k.startswith(GAIN_PREFIXES) or k.endswith(GAIN_SUFFIXES)
    }
    for action in plan.get("actions") or []:
        if isinstance(action, dict):
            gain.update(
                {
                    f"{action.get('name')}.{k}": v
                    for k, v in action.items()
                    if k.startswith(GAIN_PREFIXES)
                }
            )
    before, after = plan.get("files_before"), plan.get("expected_files_after")
    if isinstance(before, int) and isinstance(after, int):
        gain["data_files_removed"] = before - after
    return gain


def _explain_kind(
    session: Session,
    row: ManagedTable,
    kind: Kind,
    policy: Policy,
    table: Table,
    now: datetime,
    summary: dict[str, Any] | None,
) -> dict[str, Any]:
    section = kind.section(policy)
    task = open_task(session, row.id, kind.name)
    plan: dict[str, Any] | None = None
    incomplete = None if section.enabled else _cannot_enable(section)
    if incomplete is not None:
        planner_reason = f"not planned: the section is incomplete ({incomplete})"
    else:
        try:
            outcome = kind.plan(section, table, now)
            plan, planner_reason = outcome.plan, outcome.reason
        except Exception as exc:  # a planner's failure is part of the answer, not a 500
            log.warning("explain: the %s planner failed on %s", kind.name, row.name, exc_info=True)
            planner_reason = f"the planner failed: {type(exc).__name__}: {exc}"
    if not section.enabled:
        reason = f"{kind.name} is disabled by policy; " + (
            planner_reason if incomplete else f"if enabled, its planner says: {planner_reason}"
        )
    elif plan is not None and task is not None:
        reason = f"open task {task.id} ({task.state}) covers it; planning now: {planner_reason}"
    else:
        reason = planner_reason
    return {
        "enabled": section.enabled,
        "would_run": section.enabled and plan is not None,
        "reason": reason,
        "open_task": None
        if task is None
        else {
            "id": task.id,
            "state": task.state,
            "attempt": task.attempt,
            "created_at": task.created_at,
            "reason": (task.trigger or {}).get("reason"),
        },
        "triggers": _triggers(session, row, kind, section, task, summary, now),
        "planner_reason": planner_reason,
        "plan": plan,
        "expected_gain": expected_gain(plan),
    }


def _cannot_enable(section: KindPolicy) -> str | None:
    """What a disabled section lacks to be enabled as it stands (None: nothing)."""
    try:
        type(section).model_validate({**section.model_dump(), "enabled": True})
    except ValidationError as exc:
        return "; ".join(str(e["msg"]).removeprefix("Value error, ") for e in exc.errors())
    return None


def _triggers(
    session: Session,
    row: ManagedTable,
    kind: Kind,
    section: KindPolicy,
    task: Task | None,
    summary: dict[str, Any] | None,
    now: datetime,
) -> list[dict[str, Any]]:
    """Would the next commit (judged like the current snapshot) or sweep create a task?"""
    out: list[dict[str, Any]] = []
    blocked = (
        f"{kind.name} is disabled by policy"
        if not section.enabled
        else f"open task {task.id} ({task.state}) already covers it"
        if task is not None
        else None
    )
    if kind.event_verdict is not None:
        if summary is None:
            out.append({"source": "commits", "would_create_task": False, "reason": "no commit yet"})
        else:
            facts = EventFacts(
                summary,
                files_added_since_last_task(session, row.id, kind.name),
                last_task_state(session, row.id, kind.name),
            )
            verdict = kind.event_verdict(section, facts)
            reason = (
                verdict.reason
                if blocked is None
                else blocked
                if not section.enabled
                else f"{blocked}; {verdict.reason}"
            )
            out.append(
                {
                    "source": "commits",
                    "would_create_task": blocked is None and verdict.needed,
                    "reason": reason,
                    "metrics": verdict.metrics,
                }
            )
    if kind.swept:
        last = session.scalar(
            select(func.max(Task.created_at)).where(Task.table_id == row.id, Task.kind == kind.name)
        )
        minutes = section.interval_minutes if isinstance(section, SweptPolicy) else 0.0
        due = None if last is None else last + timedelta(minutes=minutes)
        if blocked is not None:
            reason = blocked
        elif due is None:
            reason = f"no {kind.name} task yet: the next sweep creates one"
        elif due <= now:
            reason = f"the interval of {minutes:g} min has passed: the next sweep creates one"
        else:
            reason = f"the next {kind.name} task is due at {due.isoformat()}"
        out.append(
            {
                "source": "sweep",
                "would_create_task": blocked is None and (due is None or due <= now),
                "reason": reason,
            }
        )
    return out
