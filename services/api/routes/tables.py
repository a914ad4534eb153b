"""Managed tables: register, list, read, change policy, unregister, list commit events."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Response

from lakewarden import policy_gate, tables
from lakewarden.catalog import TableRef, find_table, load_table
from lakewarden.events.ingest import list_events
from lakewarden.events.refresh import ingest_commits
from lakewarden.policy import Policy
from services.api import errors
from services.api.deps import RuntimeDep, SessionDep, TableDep
from services.api.paging import PageDep
from services.api.policies import check_policy, table_out
from services.api.schemas import EventPage, TableIn, TableOut, TablePage

router = APIRouter(prefix="/api/v1/tables", tags=["tables"])


REGISTER_ERRORS = {
    404: "the catalog has no such table",
    409: "the table is already managed, or a concurrent change won",
}


@router.post(
    "",
    status_code=201,
    response_model=TableOut,
    responses=errors.documented(body=True, notes=REGISTER_ERRORS),
)
def register_table(body: TableIn, rt: RuntimeDep, session: SessionDep) -> TableOut:
    """Start managing an existing Iceberg table with a policy (defaults fill the gaps)."""
    ref = TableRef(body.namespace, body.name)
    catalog = rt.settings.catalog_name
    # Checked against the namespace's defaults: no change to them until this commits.
    tables.lock_namespace(session, catalog, ref.namespace, exclusive=False)
    if tables.get_table(session, catalog, ref) is not None:
        raise HTTPException(409, f"table {ref.dotted} is already managed")
    table = load_table(rt.catalog, ref)
    overrides = body.policy.model_dump(exclude_unset=True)
    check_policy(session, catalog, ref.namespace, overrides, table)
    try:
        row = tables.add_table(session, catalog, ref, overrides)
    except tables.AlreadyManaged as exc:  # a concurrent registration won
        raise HTTPException(409, str(exc)) from exc
    # The current snapshot is the baseline, evaluated at once: the table may already need work.
    ingest_commits(session, rt, row, table, source="register", max_walk=1)
    return table_out(session, row)


@router.get("", response_model=TablePage)
def list_tables(session: SessionDep, page: PageDep) -> TablePage:
    """Managed tables, in the order they were registered."""
    return TablePage.of(tables.list_tables(session, page), lambda row: table_out(session, row))


@router.get(
    "/{namespace}/{name}",
    response_model=TableOut,
    responses=errors.documented(notes=errors.ON_TABLE),
)
def get_table(row: TableDep, session: SessionDep) -> TableOut:
    return table_out(session, row)


@router.put(
    "/{namespace}/{name}/policy",
    response_model=TableOut,
    responses=errors.documented(409, body=True, notes=errors.ON_TABLE),
)
def put_table_policy(
    policy: Policy, row: TableDep, rt: RuntimeDep, session: SessionDep
) -> TableOut:
    """Replace the table's own policy settings; the previous ones are kept as a version."""
    # Concurrent changes of this table, or of its namespace's defaults, wait for this one:
    # the check below sees the current state, and each change gets the next version.
    tables.lock_namespace(session, row.catalog, row.namespace, exclusive=False)
    if tables.lock_table(session, row) is None:
        raise HTTPException(404, f"table {row.namespace}.{row.name} is no longer managed")
    overrides = policy.model_dump(exclude_unset=True)
    table = find_table(rt.catalog, tables.ref_of(row))
    check_policy(session, row.catalog, row.namespace, overrides, table)
    try:
        row = tables.set_policy(session, row, overrides)
    except tables.TableGone as exc:
        raise HTTPException(404, str(exc)) from exc
    # Open tasks the new policy forbids are cancelled, changed ones re-planned, at once.
    policy_gate.apply_policy_change(session, [row], actor=f"api:{rt.process_id}")
    return table_out(session, row)


@router.delete(
    "/{namespace}/{name}", status_code=204, responses=errors.documented(409, notes=errors.ON_TABLE)
)
def unregister_table(row: TableDep, session: SessionDep) -> Response:
    """Stop managing the table (its tasks and events go with it; the table is untouched)."""
    if not tables.remove_table(session, row):  # a concurrent unregistration won
        raise HTTPException(404, f"table {row.namespace}.{row.name} is not managed by lakewarden")
    return Response(status_code=204)


@router.get(
    "/{namespace}/{name}/events",
    response_model=EventPage,
    responses=errors.documented(notes=errors.ON_TABLE),
)
def list_table_events(row: TableDep, session: SessionDep, page: PageDep) -> EventPage:
    """The table's commits, newest first, each with what policy evaluation decided."""
    return EventPage.of(list_events(session, row.id, page))
