"""Managed tables: register, list, read, change policy, unregister, list commit events."""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, HTTPException, Query, Response
from pydantic import BaseModel
from pyiceberg.exceptions import NoSuchTableError
from sqlalchemy import select

from lakewarden import policy_gate
from lakewarden.catalog import InvalidIdentifier, TableRef
from lakewarden.db.models import ManagedTable, TimelineEvent
from lakewarden.events.refresh import ingest_commits
from lakewarden.policy import Policy
from lakewarden.tables import (
    AlreadyManaged,
    TableGone,
    add_table,
    get_table,
    lock_namespace,
    lock_table,
    remove_table,
    set_policy,
)
from services.api import errors
from services.api.deps import Cursor, RuntimeDep, SessionDep, TableDep
from services.api.policies import check_policy, table_out
from services.api.schemas import EventOut, Page, TableIn, TableOut

router = APIRouter(prefix="/api/v1/tables", tags=["tables"])
M = TypeVar("M", bound=BaseModel)

Limit = Annotated[int, Query(ge=1, le=500, description="page size")]


@router.post(
    "",
    status_code=201,
    response_model=TableOut,
    responses=errors.documented(
        body=True,
        notes={
            404: "the catalog has no such table",
            409: "the table is already managed, or a concurrent change won",
        },
    ),
)
def register_table(body: TableIn, rt: RuntimeDep, session: SessionDep) -> TableOut:
    """Start managing an existing Iceberg table with a policy (defaults fill the gaps)."""
    try:
        ref = TableRef(body.namespace, body.name)
    except InvalidIdentifier as exc:
        raise HTTPException(422, str(exc)) from exc
    catalog = rt.settings.catalog_name
    # Checked against the namespace's defaults: no change to them until this commits.
    lock_namespace(session, catalog, ref.namespace, exclusive=False)
    if get_table(session, catalog, ref) is not None:
        raise HTTPException(409, f"table {ref.dotted} is already managed")
    try:
        table = rt.catalog.load_table((ref.namespace, ref.name))
    except NoSuchTableError as exc:
        raise HTTPException(
            404, f"catalog {rt.settings.catalog_name!r} has no table {ref.dotted}"
        ) from exc
    overrides = body.policy.model_dump(exclude_unset=True)
    check_policy(session, catalog, ref.namespace, overrides, table)
    try:
        row = add_table(session, catalog, ref, overrides)
    except AlreadyManaged as exc:  # a concurrent registration won
        raise HTTPException(409, str(exc)) from exc
    # The current snapshot is the baseline, evaluated at once: the table may already need work.
    ingest_commits(session, rt, row, table, source="register", max_walk=1)
    return table_out(session, row)


@router.get("", response_model=Page[TableOut])
def list_tables(session: SessionDep, limit: Limit = 50, cursor: Cursor = None) -> Page[TableOut]:
    q = select(ManagedTable).order_by(ManagedTable.id).limit(limit + 1)
    if cursor is not None:
        q = q.where(ManagedTable.id > cursor)
    rows = list(session.scalars(q))
    more = len(rows) > limit
    rows = rows[:limit]
    return Page(
        items=[table_out(session, r) for r in rows], next_cursor=rows[-1].id if more else None
    )


@router.get(
    "/{namespace}/{name}",
    response_model=TableOut,
    responses=errors.documented(notes=errors.ON_TABLE),
)
def read_table(row: TableDep, session: SessionDep) -> TableOut:
    return table_out(session, row)


@router.put(
    "/{namespace}/{name}/policy",
    response_model=TableOut,
    responses=errors.documented(409, body=True, notes=errors.ON_TABLE),
)
def replace_policy(policy: Policy, row: TableDep, rt: RuntimeDep, session: SessionDep) -> TableOut:
    """Replace the table's own policy settings; the previous ones are kept as a version."""
    # Concurrent changes of this table, or of its namespace's defaults, wait for this one:
    # the check below sees the current state, and each change gets the next version.
    lock_namespace(session, row.catalog, row.namespace, exclusive=False)
    if lock_table(session, row) is None:
        raise HTTPException(404, f"table {row.namespace}.{row.name} is no longer managed")
    overrides = policy.model_dump(exclude_unset=True)
    try:
        table = rt.catalog.load_table((row.namespace, row.name))
    except NoSuchTableError:
        table = None
    check_policy(session, row.catalog, row.namespace, overrides, table)
    try:
        row = set_policy(session, row, overrides)
    except TableGone as exc:
        raise HTTPException(404, str(exc)) from exc
    # Open tasks the new policy forbids are cancelled, changed ones re-planned, at once.
    policy_gate.apply_policy_change(session, [row], actor=f"api:{rt.process_id}")
    return table_out(session, row)


@router.delete(
    "/{namespace}/{name}", status_code=204, responses=errors.documented(409, notes=errors.ON_TABLE)
)
def unregister_table(row: TableDep, session: SessionDep) -> Response:
    """Stop managing the table (its tasks and events go with it; the table is untouched)."""
    if not remove_table(session, row):  # a concurrent unregistration won
        raise HTTPException(404, f"table {row.namespace}.{row.name} is not managed by lakewarden")
    return Response(status_code=204)


@router.get(
    "/{namespace}/{name}/events",
    response_model=Page[EventOut],
    responses=errors.documented(notes=errors.ON_TABLE),
)
def list_events(
    row: TableDep, session: SessionDep, limit: Limit = 50, cursor: Cursor = None
) -> Page[EventOut]:
    """The table's commits, newest first, each with what policy evaluation decided."""
    q = (
        select(TimelineEvent)
        .where(TimelineEvent.table_id == row.id)
        .order_by(TimelineEvent.id.desc())
        .limit(limit + 1)
    )
    if cursor is not None:
        q = q.where(TimelineEvent.id < cursor)
    return _page(list(session.scalars(q)), limit, EventOut)


def _page(rows: list[Any], limit: int, model: type[M]) -> Page[M]:
    """One page of `limit` rows (one extra was fetched to know whether more follow)."""
    more = len(rows) > limit
    rows = rows[:limit]
    items = [model.model_validate(r, from_attributes=True) for r in rows]
    return Page[M](items=items, next_cursor=rows[-1].id if more else None)
