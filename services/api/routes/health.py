"""Operator views of one table: its measured health (`lakewarden.health`), and what would
run on it now and why (`lakewarden.explain`).

Both only read. Their transaction is made READ ONLY before anything else happens, so
Postgres itself refuses any write; no Iceberg commit is made either.
"""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import APIRouter, HTTPException
from pyiceberg.table import Table
from sqlalchemy import text
from sqlalchemy.orm import Session

from lakewarden import explain
from lakewarden.catalog import find_table
from lakewarden.db.models import ManagedTable
from lakewarden.health import measure
from lakewarden.runtime import Runtime
from lakewarden.tables import ref_of
from services.api import errors
from services.api.access import TableDep
from services.api.deps import RuntimeDep, SessionDep
from services.api.policies import current_policy
from services.api.schemas import ExplainOut, HealthOut

router = APIRouter(prefix="/api/v1/catalogs/{catalog}/tables", tags=["health"])

GONE = {
    **errors.ON_TABLE,
    409: "the table is gone from the catalog, or its stored policy is no longer valid",
}


def _read_only(session: Session) -> None:
    # Allowed after the table lookup: Postgres only refuses a switch to read-write late.
    session.execute(text("SET TRANSACTION READ ONLY"))


def _load(rt: Runtime, row: ManagedTable) -> Table:
    table = find_table(rt.catalogs.load(row.catalog), ref_of(row))
    if table is None:  # a 409, not the 404 of a table the catalog never had
        raise HTTPException(
            409,
            f"table {row.namespace}.{row.name} is managed but gone from the catalog; "
            "unregister it with DELETE /api/v1/tables/{namespace}/{name}",
        )
    return table


@router.get(
    "/{namespace}/{name}/health", response_model=HealthOut, responses=errors.documented(notes=GONE)
)
def get_table_health(row: TableDep, rt: RuntimeDep, session: SessionDep) -> HealthOut:
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
def explain_table(row: TableDep, rt: RuntimeDep, session: SessionDep) -> ExplainOut:
    """For every kind: enabled or not, its open task, whether the next commit or sweep would
    create a task, and the plan its planner would make now (with the expected gain) or why
    it would skip. Live blockers are listed. Nothing is run or written."""
    _read_only(session)
    table = _load(rt, row)
    policy = current_policy(session, row)
    return ExplainOut.model_validate(
        explain.explain_table(session, row, table, policy, datetime.now(UTC))
    )
