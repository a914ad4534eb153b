"""Operator views of one table: its measured health, and what would run now and why."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, HTTPException
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.table import Table
from sqlalchemy import func, select

from lakewarden.db.models import ManagedTable, TableBlocker
from lakewarden.health import measure
from lakewarden.kinds import REGISTRY
from lakewarden.runtime import Runtime
from lakewarden.tables import effective_policy_for
from lakewarden.tasks.repo import open_task
from services.api.deps import RuntimeDep, SessionDep, TableDep

router = APIRouter(prefix="/api/v1/tables", tags=["health"])


def _load(rt: Runtime, row: ManagedTable) -> Table:
    try:
        return rt.catalog.load_table((row.namespace, row.name))
    except NoSuchTableError as exc:
        raise HTTPException(
            409,
            f"table {row.namespace}.{row.name} is managed but gone from the catalog; "
            "unregister it with DELETE",
        ) from exc


@router.get("/{namespace}/{name}/health")
def table_health(row: TableDep, rt: RuntimeDep, session: SessionDep) -> dict[str, Any]:
    """File sizes, delete files, snapshots, manifests, layout and TTL state (overall and
    per partition), a 0-100 score, and every threshold that fires."""
    health = measure(_load(rt, row), effective_policy_for(session, row))
    return {"table": f"{row.namespace}.{row.name}", **health.to_dict()}


@router.get("/{namespace}/{name}/explain")
def explain(row: TableDep, rt: RuntimeDep, session: SessionDep) -> dict[str, Any]:
    """What would run on this table now, and why, for every kind; nothing is run or written."""
    table = _load(rt, row)
    policy = effective_policy_for(session, row)
    now = datetime.now(UTC)
    blockers = list(
        session.scalars(
            select(TableBlocker).where(
                TableBlocker.table_id == row.id, TableBlocker.expires_at > func.now()
            )
        )
    )
    kinds: dict[str, Any] = {}
    for kind in REGISTRY.values():
        section = kind.section(policy)
        entry: dict[str, Any] = {
            "enabled": section.enabled,
            "trigger": "commits" if kind.event_verdict else "sweep",
        }
        task = open_task(session, row.id, kind.name)
        if task is not None:
            entry["open_task"] = {"id": task.id, "state": task.state}
        if not section.enabled:
            entry.update(would_run=False, reason=f"{kind.name} is disabled by policy")
        else:
            outcome = kind.plan(section, table, now)
            entry.update(
                would_run=outcome.plan is not None, reason=outcome.reason, plan=outcome.plan
            )
        kinds[kind.name] = entry
    return {
        "table": f"{row.namespace}.{row.name}",
        "at": now.isoformat(),
        "blocked_by": [
            {"holder": b.holder, "reason": b.reason, "until": b.expires_at} for b in blockers
        ],
        "kinds": kinds,
    }
