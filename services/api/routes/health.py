"""Operator views of one table: its measured health (`lakewarden.health.measure`), and what would
run on it now and why (`lakewarden.health.explain`).

Both only read. Their transaction is made READ ONLY before anything else happens, so
Postgres itself refuses any write; no Iceberg commit is made either.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query
from pyiceberg.table import Table
from sqlalchemy import text
from sqlalchemy.orm import Session

from lakewarden.catalogs.catalog import find_table
from lakewarden.db.models import ManagedTable
from lakewarden.formats.delta import catalog as delta_catalog
from lakewarden.formats.delta.facts import read_facts as read_delta_facts
from lakewarden.formats.delta.timeline import NotADeltaTable, UnsupportedProtocol
from lakewarden.formats.hudi import column_stats
from lakewarden.formats.hudi import lock as hudi_lock
from lakewarden.formats.hudi.catalog import open_timeline
from lakewarden.formats.hudi.facts import read_facts
from lakewarden.formats.hudi.timeline import NotAHudiTable, UnsupportedTableVersion
from lakewarden.health import explain
from lakewarden.health.delta import delta_health
from lakewarden.health.hudi import hudi_health
from lakewarden.health.measure import add_storage, measure
from lakewarden.kinds import hudi as hudi_kinds
from lakewarden.runtime import Runtime
from lakewarden.storage import DEFAULT_MAX_FILES, LIMIT_MAX_FILES
from lakewarden.tables import ref_of
from services.api import errors
from services.api.access import TableDep
from services.api.deps import RuntimeDep, SessionDep
from services.api.policies import current_policy
from services.api.schemas import DeltaHealthOut, ErrorOut, ExplainOut, HealthOut, HudiHealthOut

router = APIRouter(prefix="/api/v1/catalogs/{catalog}/tables", tags=["health"])

GONE = {
    **errors.ON_TABLE,
    409: "the table is gone from the catalog, or its stored policy is no longer valid",
}


def _read_only(session: Session) -> None:
    # Allowed after the table lookup: Postgres only refuses a switch to read-write late.
    session.execute(text("SET TRANSACTION READ ONLY"))


# What a non-Iceberg table's own health route shows, named by the 409 of Iceberg's.
_OWN_HEALTH = {
    "hudi": "its file groups, log files and table services",
    "delta": "its files, deletion vectors, log and checkpoint, and Delta's commands",
}


def _iceberg_only(row: ManagedTable) -> None:
    if row.format != "iceberg":
        raise HTTPException(
            409,
            f"table {row.namespace}.{row.name} is a {row.format} table: GET "
            f"/api/v1/catalogs/{row.catalog}/tables/{row.namespace}/{row.name}/{row.format} "
            f"shows {_OWN_HEALTH.get(row.format, 'its health')}",
        )


def load_live_table(rt: Runtime, row: ManagedTable) -> Table:
    """The managed table from its catalog; 409 if it is gone from it."""
    table = find_table(rt.catalogs.load(row.catalog), ref_of(row))
    if table is None:  # a 409, not the 404 of a table the catalog never had
        raise HTTPException(
            409,
            f"table {row.namespace}.{row.name} is managed but gone from the catalog; "
            "unregister it with DELETE /api/v1/tables/{namespace}/{name}",
        )
    return table


STORAGE_FAILED = "with storage=true: listing the table's storage failed (the detail says why)"


@router.get(
    "/{namespace}/{name}/health",
    response_model=HealthOut,
    responses={
        **errors.documented(notes=GONE),
        502: {"model": ErrorOut, "description": STORAGE_FAILED},
    },
)
def get_table_health(
    row: TableDep,
    rt: RuntimeDep,
    session: SessionDep,
    storage: Annotated[
        bool,
        Query(
            description="also list the table's location: bytes no snapshot references and "
            "bytes only old snapshots hold, metadata.json sizes (slow on large tables)"
        ),
    ] = False,
    max_files: Annotated[
        int,
        Query(ge=1, le=LIMIT_MAX_FILES, description="with storage: list at most this many files"),
    ] = DEFAULT_MAX_FILES,
) -> HealthOut:
    """File sizes (with a size histogram), delete files, snapshots, commit rate, manifests,
    metadata files, layout, partition skew and TTL state (overall and per partition), a
    0-100 score with what each factor cost, and every threshold that fires."""
    _read_only(session)
    _iceberg_only(row)
    policy = current_policy(session, row)
    table = load_live_table(rt, row)
    now = datetime.now(UTC)
    health = measure(table, policy, now)
    if storage:
        # The listing may take long: no transaction stays open meanwhile (one read-only
        # transaction holds no row lock, but would hold off a migration's DDL).
        session.commit()
        try:
            add_storage(health, table, policy, now, max_files)
        except OSError as exc:  # e.g. a role that may read objects but not list them
            raise HTTPException(502, f"listing the table's storage failed: {exc}") from exc
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
    _iceberg_only(row)
    table = load_live_table(rt, row)
    policy = current_policy(session, row)
    return ExplainOut.model_validate(
        explain.explain_table(session, row, table, policy, datetime.now(UTC), settings=rt.settings)
    )


@router.get(
    "/{namespace}/{name}/hudi",
    response_model=HudiHealthOut,
    responses=errors.documented(
        notes={**errors.ON_TABLE, 409: "the table is not a Hudi table, or its path no longer is"}
    ),
)
def hudi_table_health(row: TableDep, rt: RuntimeDep, session: SessionDep) -> HudiHealthOut:
    """A Hudi table's health and explain: file groups, base-file sizes (a histogram), log
    files per file slice and their bytes, pending compactions and clustering, timeline
    length; and per table service whether there is work and who does it."""
    _read_only(session)
    if row.format != "hudi":
        raise HTTPException(409, f"table {row.namespace}.{row.name} is not a Hudi table")
    policy = current_policy(session, row)
    ctx = hudi_kinds.context(session, row.id)
    session.commit()  # hudi-rs lists the table's files: no transaction open meanwhile
    try:
        timeline = open_timeline(rt.catalogs.entry(row.catalog), ref_of(row))
    except (NotAHudiTable, UnsupportedTableVersion) as exc:
        raise HTTPException(409, str(exc)) from exc
    facts = read_facts(timeline.base_path, timeline)
    return HudiHealthOut.model_validate(
        {
            "table": f"{row.namespace}.{row.name}",
            **hudi_health(facts, hudi_kinds.verdicts(policy, timeline, ctx)),
            "column_stats_index": column_stats.read_state(timeline).summary(),
            "lock": hudi_lock.describe(
                timeline.base_path,
                hudi_lock.for_table(
                    rt.catalogs.entry(row.catalog).resolved, row.namespace, row.name
                ),
            ),
        }
    )


@router.get(
    "/{namespace}/{name}/delta",
    response_model=DeltaHealthOut,
    responses=errors.documented(
        notes={**errors.ON_TABLE, 409: "the table is not a Delta table, or its path no longer is"}
    ),
)
def delta_table_health(row: TableDep, rt: RuntimeDep, session: SessionDep) -> DeltaHealthOut:
    """A Delta table's health and explain: files and bytes (a histogram against the target
    size, small files per partition), deletion vectors, versions, commit files in the log
    and the last checkpoint's age; and per Delta command whether there is work."""
    _read_only(session)
    if row.format != "delta":
        raise HTTPException(409, f"table {row.namespace}.{row.name} is not a Delta table")
    policy = current_policy(session, row)
    compaction = policy.compaction
    session.commit()  # delta-rs reads the log and lists the files: no transaction open meanwhile
    try:
        timeline = delta_catalog.open_timeline(rt.catalogs.entry(row.catalog), ref_of(row))
        facts = read_delta_facts(
            timeline,
            target_file_size=compaction.target_file_size_bytes,
            small_file_ratio=compaction.small_file_ratio,
        )
    except (NotADeltaTable, UnsupportedProtocol) as exc:
        raise HTTPException(409, str(exc)) from exc
    now_ms = int(datetime.now(UTC).timestamp() * 1000)
    return DeltaHealthOut.model_validate(
        {"table": f"{row.namespace}.{row.name}", **delta_health(facts, now_ms, policy)}
    )
