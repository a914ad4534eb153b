"""Managed tables: register, list, read, change policy, unregister, list commit events."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, Query, Response
from sqlalchemy.orm import Session

from lakewarden import readiness, tables
from lakewarden.auth.grants import Role
from lakewarden.catalogs.catalog import CatalogEntry, TableRef, find_table, load_table
from lakewarden.catalogs.foreign import detect_table
from lakewarden.db.models import ManagedTable
from lakewarden.evaluate import evaluate_events
from lakewarden.events.ingest import list_events
from lakewarden.events.path_tables import sync_path_table
from lakewarden.events.refresh import ingest_commits
from lakewarden.formats.delta import catalog as delta_catalog
from lakewarden.formats.delta.timeline import NotADeltaTable, UnsupportedProtocol
from lakewarden.formats.hudi.catalog import open_timeline
from lakewarden.formats.hudi.timeline import NotAHudiTable, UnsupportedTableVersion
from lakewarden.formats.locations import hive_format
from lakewarden.policy import gate as policy_gate
from lakewarden.policy.model import Policy
from lakewarden.readiness_logs import path_log
from services.api import errors
from services.api.access import Access, AccessDep, TableDep
from services.api.deps import CatalogDep, RuntimeDep, SessionDep
from services.api.paging import PageDep, read_sorted_cursor, sorted_cursor
from services.api.policies import (
    authorize_policy_change,
    check_policy,
    policy_or_none,
    record_policy_change,
    table_out,
    tables_out,
)
from services.api.schemas import (
    EventPage,
    PolicyVersionOut,
    TableIn,
    TableListQuery,
    TableOut,
    TablePage,
)

router = APIRouter(prefix="/api/v1/catalogs/{catalog}/tables", tags=["tables"])
# The fleet: the tables of every catalog (`?catalog=` narrows it).
fleet = APIRouter(prefix="/api/v1/tables", tags=["tables"])


REGISTER_ERRORS = {
    404: "the catalog has no such table",
    422: "pyiceberg cannot read the table's metadata (an Iceberg v3 variant column): not managed",
    409: "the table is already managed, another optimizer maintains it (see `force`), or "
    "a concurrent change won",
}


@router.post(
    "",
    status_code=201,
    response_model=TableOut,
    responses=errors.documented(body=True, notes=REGISTER_ERRORS),
)
def register_table(
    catalog: CatalogDep, body: TableIn, rt: RuntimeDep, session: SessionDep, access: AccessDep
) -> TableOut:
    """Start managing an existing Iceberg table with a policy (defaults fill the gaps).
    Operator; admin if the policy enables something destructive (TTL, orphan removal)."""
    ref = TableRef(body.namespace, body.name)
    access.need(Role.operator, catalog, ref.namespace, target=ref.dotted)
    # Checked against the namespace's defaults: no change to them until this commits.
    tables.lock_namespace(session, catalog, ref.namespace, exclusive=False)
    if tables.get_table(session, catalog, ref) is not None:
        raise HTTPException(409, f"table {ref.dotted} is already managed")
    entry = rt.catalogs.entry(catalog)
    # A Hive catalog's metastore holds Hudi and Delta tables too (formats.locations).
    fmt = hive_format(entry, ref) if entry.type == "hive" else entry.type
    if fmt == "hudi":
        return _register_hudi_table(entry, ref, body, session, access)
    if fmt == "delta":
        return _register_delta_table(entry, ref, body, session, access)
    table = load_table(rt.catalogs.load(catalog), ref)
    foreign = detect_table(table)
    if foreign is not None and not body.force:
        raise HTTPException(
            409,
            f"table {ref.dotted} is maintained by {foreign.who} ({foreign.evidence}); "
            'lakewarden would fight it. Register it with "force": true to manage it anyway',
        )
    overrides = body.policy.model_dump(exclude_unset=True)
    policy = check_policy(session, catalog, ref.namespace, overrides, table)
    inherited = check_policy(session, catalog, ref.namespace, {}, None)
    authorize_policy_change(access, catalog, ref.namespace, inherited, policy, "the policy")
    record_policy_change(access, inherited, policy)
    try:
        row = tables.add_table(session, catalog, ref, overrides, author=access.actor)
    except tables.AlreadyManaged as exc:  # a concurrent registration won
        raise HTTPException(409, str(exc)) from exc
    # The current snapshot is the baseline, evaluated at once: the table may already need work.
    ingest_commits(session, rt, row, table, source="register", max_walk=1)
    return table_out(session, row)


def _register_hudi_table(
    entry: CatalogEntry, ref: TableRef, body: TableIn, session: Session, access: Access
) -> TableOut:
    """A Hudi table of a `hudi` catalog (or of a `hive` one), found by its base path (404:
    no Hudi table there; 422: a table version lakewarden does not read). Its newest
    completed instant is the baseline event, judged at once by the kinds that run on Hudi
    tables (compaction)."""
    try:
        timeline = open_timeline(entry, ref)
    except NotAHudiTable as exc:
        raise HTTPException(404, str(exc)) from exc
    except UnsupportedTableVersion as exc:
        raise HTTPException(422, str(exc)) from exc
    row = _add_path_table(entry, ref, body, session, access, format="hudi")
    ingested = sync_path_table(session, row, timeline, source="register", baseline=True)
    # The baseline is judged at once, as Iceberg's is: the table may already need work.
    evaluate_events(session, row, ingested.new_event_ids, f"register:{access.actor}", timeline)
    return table_out(session, row)


def _register_delta_table(
    entry: CatalogEntry, ref: TableRef, body: TableIn, session: Session, access: Access
) -> TableOut:
    """A Delta table of a `delta` catalog (or of a `hive` one), found by its path (404: no
    `_delta_log` with a commit there; 422: a reader version or feature lakewarden does not
    read). Its newest version is the baseline event, judged at once by the kinds that run
    on Delta tables (compaction, Z-order)."""
    try:
        timeline = delta_catalog.open_timeline(entry, ref)
        timeline.open_table()  # the protocol: refused here, not at the first health read
    except NotADeltaTable as exc:
        raise HTTPException(404, str(exc)) from exc
    except UnsupportedProtocol as exc:
        raise HTTPException(422, str(exc)) from exc
    row = _add_path_table(entry, ref, body, session, access, format="delta")
    ingested = sync_path_table(session, row, timeline, source="register", baseline=True)
    evaluate_events(session, row, ingested.new_event_ids, f"register:{access.actor}", timeline)
    return table_out(session, row)


def _add_path_table(
    entry: CatalogEntry, ref: TableRef, body: TableIn, session: Session, access: Access, format: str
) -> ManagedTable:
    """The row of a path catalog's table (`hudi`, `delta`), its policy checked without the
    table (the Iceberg-only checks against it do not apply) and authorized."""
    overrides = body.policy.model_dump(exclude_unset=True)
    policy = check_policy(session, entry.name, ref.namespace, overrides, None)
    inherited = check_policy(session, entry.name, ref.namespace, {}, None)
    authorize_policy_change(access, entry.name, ref.namespace, inherited, policy, "the policy")
    record_policy_change(access, inherited, policy)
    try:
        return tables.add_table(
            session, entry.name, ref, overrides, author=access.actor, format=format
        )
    except tables.AlreadyManaged as exc:
        raise HTTPException(409, str(exc)) from exc


@fleet.post(
    "",
    status_code=201,
    response_model=TableOut,
    responses=errors.documented(body=True, notes=REGISTER_ERRORS),
)
def register_default_catalog_table(
    body: TableIn, rt: RuntimeDep, session: SessionDep, access: AccessDep
) -> TableOut:
    """Register a table of the default catalog: POST /api/v1/catalogs/{default}/tables."""
    return register_table(rt.settings.catalog_name, body, rt, session, access)


@fleet.get("", response_model=TablePage)
def list_tables(
    query: Annotated[TableListQuery, Query()], session: SessionDep, access: AccessDep
) -> TablePage:
    """Managed tables the caller may see, filtered, in the order they were registered or
    worst health first, with how many match in all."""
    visible = access.scope(Role.viewer, ManagedTable.catalog, ManagedTable.namespace)
    keys = tables.SORT_KEYS[query.sort]
    after = read_sorted_cursor(query.cursor, query.sort, keys, tables.TABLE_SORTS)
    wanted = tables.TableQuery(
        limit=query.limit,
        sort=query.sort,
        after=after,
        catalog=query.catalog,
        namespace_glob=query.namespace,
        health_below=query.health_below,
        has_open_tasks=query.has_open_tasks,
        has_failed_tasks=query.has_failed_tasks,
        kind_enabled=query.kind_enabled,
    )
    found = tables.list_tables(session, wanted, where=visible)
    return TablePage(
        items=tables_out(session, found.items),
        next_cursor=sorted_cursor(query.sort, found.next_key, tables.TABLE_SORTS),
        total=found.total,
    )


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
    policy: Policy, row: TableDep, rt: RuntimeDep, session: SessionDep, access: AccessDep
) -> TableOut:
    """Replace the table's own policy settings; the previous ones are kept as a version.
    Operator; admin for a change that can delete data (docs/security.md)."""
    # Concurrent changes of this table, or of its namespace's defaults, wait for this one:
    # the check below sees the current state, and each change gets the next version.
    tables.lock_namespace(session, row.catalog, row.namespace, exclusive=False)
    if tables.lock_table(session, row) is None:
        raise HTTPException(404, f"table {row.namespace}.{row.name} is no longer managed")
    return replace_policy(row, policy.model_dump(exclude_unset=True), rt, session, access)


def replace_policy(
    row: ManagedTable,
    overrides: dict[str, object],
    rt: RuntimeDep,
    session: SessionDep,
    access: AccessDep,
    what: str = "the new policy",
) -> TableOut:
    """Set the table's own settings (a PUT, or a restored version): checked, authorized,
    versioned with its author, and obeyed by the open tasks at once."""
    # A Hudi (or Delta) table has no Iceberg schema to check column names against: its
    # policy is validated as a policy (and over its namespace's defaults) only.
    table = (
        find_table(rt.catalogs.load(row.catalog), tables.ref_of(row))
        if row.format == "iceberg"
        else None
    )
    after = check_policy(session, row.catalog, row.namespace, overrides, table)
    if table is None and after.readiness.enabled:  # a Hudi or Delta table: its log says
        log = path_log(row.format, rt.catalogs.entry(row.catalog), tables.ref_of(row))
        problem = readiness.policy_problem(log, after.readiness)
        if problem is not None:
            raise HTTPException(422, problem)
    before = policy_or_none(session, row)
    authorize_policy_change(access, row.catalog, row.namespace, before, after, what)
    record_policy_change(access, before, after)
    try:
        row = tables.set_policy(session, row, overrides, author=access.actor)
    except tables.TableGone as exc:
        raise HTTPException(404, str(exc)) from exc
    # Open tasks the new policy forbids are cancelled, changed ones re-planned, at once.
    policy_gate.apply_policy_change(session, [row], actor=access.actor)
    return table_out(session, row)


@router.delete(
    "/{namespace}/{name}", status_code=204, responses=errors.documented(409, notes=errors.ON_TABLE)
)
def unregister_table(row: TableDep, session: SessionDep, access: AccessDep) -> Response:
    """Stop managing the table (admin). Its history is kept, and registering it again
    continues it; open tasks are cancelled; the Iceberg table is untouched."""
    access.need(Role.admin, row.catalog, row.namespace)
    if not tables.remove_table(session, row, by=access.actor):  # a concurrent one won
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


@router.get(
    "/{namespace}/{name}/policy/versions",
    response_model=list[PolicyVersionOut],
    responses=errors.documented(notes=errors.ON_TABLE),
)
def list_policy_versions(row: TableDep, session: SessionDep) -> list[PolicyVersionOut]:
    """Every policy the table has had, newest first, with who set it."""
    return [
        PolicyVersionOut(
            version=v.version,
            policy=v.policy,
            author=v.author,
            created_at=v.created_at,
            current=v.version == row.policy_version,
        )
        for v in tables.policy_versions(session, row)
    ]


@router.post(
    "/{namespace}/{name}/policy/versions/{version}/restore",
    response_model=TableOut,
    responses=errors.documented(
        409, notes={**errors.ON_TABLE, 404: "the table is not managed, or has no such version"}
    ),
)
def restore_policy_version(
    version: Annotated[int, Path(ge=1, le=2**31 - 1)],
    row: TableDep,
    rt: RuntimeDep,
    session: SessionDep,
    access: AccessDep,
) -> TableOut:
    """Make an earlier version's settings the table's policy again, as a new version (the
    same checks and grants as a PUT: restoring a destructive setting needs admin)."""
    tables.lock_namespace(session, row.catalog, row.namespace, exclusive=False)
    if tables.lock_table(session, row) is None:
        raise HTTPException(404, f"table {row.namespace}.{row.name} is no longer managed")
    old = tables.policy_version(session, row, version)
    if old is None:
        raise HTTPException(
            404,
            f"table {row.namespace}.{row.name} has no policy version {version} (it is at "
            f"version {row.policy_version})",
        )
    what = f"restoring version {version}"
    return replace_policy(row, old.policy, rt, session, access, what=what)
