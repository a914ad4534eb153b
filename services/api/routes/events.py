"""Commit notifications pushed by engines and catalogs (the webhook road).

A Hudi or Delta table (a path catalog's) is pushed by catalog/namespace/name with an
optional `commit` (an instant, a version), or by Hudi's own write-commit callback
(`POST /api/v1/events/hudi`, the table found by its base path): its log is read from the
table's cursor at once (`events.path_tables.push_path_table`, as a poll reads it), the new
commits recorded and judged in the request's transaction. What follows is Iceberg's road.

A notification that brings nothing new is answered from lakewarden's database alone: when
it names the metadata file the table's row already holds, or a snapshot already recorded,
the catalog is not read. Otherwise the table is read from the catalog once and every
commit not seen yet is recorded (refresh.ingest_commits: the row locked, one event per
snapshot, `INSERT ... ON CONFLICT DO NOTHING`), so concurrent reports of one commit record
it once.

The batch form coalesces the notifications of one table into one catalog read and one
ingest. The batch is the request's one transaction (as every route's: a 2xx means it is
committed), with each table ingested in a savepoint of its own: one table's failure (gone
from the catalog, a conflict, a bad snapshot id) rolls back that table's work alone and is
reported on its items; the other tables commit. Per-table transactions were the
alternative, but a request would then hold two pooled connections at once (its own, for
the caller's credential and the audit row, and the table's), and enough concurrent batches
would exhaust the pool waiting for each other. The price: the rows of a batch's tables stay
locked until it commits, so they are locked in table id order (concurrent batches cannot
deadlock) and each wave of tables is read from the catalog before any of them is locked.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from typing import NamedTuple

from fastapi import APIRouter, HTTPException
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from lakewarden.auth.grants import Role
from lakewarden.catalogs.catalog import (
    CatalogEntry,
    InvalidIdentifier,
    TableRef,
    UnknownCatalog,
    find_table,
    find_tables,
    load_table,
)
from lakewarden.catalogs.metadata_view import TableRead, has_snapshot
from lakewarden.db.models import ManagedTable, TimelineEvent
from lakewarden.events.ingest import Ingested, event_for
from lakewarden.events.path_tables import (
    LOG_MISSING,
    LOG_UNREADABLE,
    commit_event,
    push_path_table,
)
from lakewarden.events.refresh import ingest_batch, ingest_commits, lock_rows
from lakewarden.formats.warehouse import table_at
from lakewarden.runtime import Runtime
from lakewarden.states import PATH_CATALOGS, TableFormatName
from lakewarden.tables import TableGone, get_tables
from services.api import errors
from services.api.access import AccessDep
from services.api.deps import BatchTurn, RuntimeDep, SessionDep, managed
from services.api.schemas import (
    EventAccepted,
    EventBatchAccepted,
    EventBatchIn,
    EventIn,
    EventOut,
    EventResult,
    HudiCommitIn,
)

log = logging.getLogger(__name__)

# A batch reads this many of its tables from the catalog before ingesting them.
READ_WAVE = 100

router = APIRouter(prefix="/api/v1", tags=["events"])


def _known_event(session: Session, row: ManagedTable, body: EventIn) -> TimelineEvent | None:
    """The recorded event that makes `body` a duplicate, found without the catalog: the
    event of its snapshot (or of the table's current one when it names no snapshot, but
    names the metadata file the row holds). None: the catalog must be read."""
    same_pointer = body.metadata_location is not None and (
        body.metadata_location == row.metadata_location
    )
    if body.snapshot_id is not None:
        return event_for(session, row.id, body.snapshot_id)
    if same_pointer and row.current_snapshot_id is not None:
        return event_for(session, row.id, row.current_snapshot_id)
    return None


def _is_duplicate(seen: str | None, body: EventIn, known: TimelineEvent | _Recorded | None) -> bool:
    """Whether `body` brings nothing new, `seen` being the pointer the table's row holds and
    `known` the event of the snapshot `body` names (or stands for)."""
    if body.snapshot_id is not None:
        return known is not None  # that commit is recorded
    # No snapshot named: the pointer the row holds (a table without snapshots has no event)
    return body.metadata_location is not None and body.metadata_location == seen


def _unknown_snapshot(table: TableRead, ref: TableRef, wanted: int | None) -> str | None:
    """Why `wanted` cannot be reported for `table` (None: it can)."""
    if wanted is None or has_snapshot(table, wanted):
        return None
    current = table.current_snapshot()
    return (
        f"snapshot {wanted} is not in the metadata of {ref.dotted} "
        f"(current snapshot: {current.snapshot_id if current else None})"
    )


def _ingest(
    session: Session,
    rt: Runtime,
    row: ManagedTable,
    seen: str | None,
    ref: TableRef,
    table: TableRead,
) -> tuple[TableRead, Ingested]:
    """Ingest `table`, read from the catalog without a lock, into `row`, locked (FOR NO
    KEY UPDATE) and read again after `seen` was its pointer. If another ingest recorded
    a different pointer meanwhile, the read may be older than what the row holds: the
    table is read again under the lock (it then is the newest), so the row never goes back
    to an older state of the table. Returns the table ingested and what it recorded."""
    if row.metadata_location not in (seen, table.metadata_location):
        again = find_table(rt.catalogs.load(row.catalog), ref)
        if again is None:
            raise TableGone(f"table {ref.dotted} is gone from the catalog")
        table = again
    return table, ingest_commits(session, rt, row, table, source="webhook")


@router.post(
    "/events",
    status_code=202,
    response_model=EventAccepted,
    responses=errors.documented(
        409,
        body=True,
        notes={
            404: "the table is not managed by lakewarden, or the catalog no longer has it",
            409: "a concurrent change won (a commit on a table whose stored policy no "
            "longer validates is recorded, with decision policy-invalid: a 202)",
        },
    ),
)
def post_event(
    body: EventIn, rt: RuntimeDep, session: SessionDep, access: AccessDep
) -> EventAccepted:
    """Report a commit. Idempotent: repeating it records nothing new.

    lakewarden reads the commit from the catalog itself and records every
    commit of the table it has not seen yet (one event per snapshot). A notification
    of a commit already recorded (its `snapshot_id`), or naming the metadata file
    lakewarden already holds for the table (`metadata_location`), is answered without
    reading the catalog.

    A Hudi or Delta table is named the same way, with its commit (if known) in `commit`:
    its log is read from the newest commit lakewarden recorded, and every commit after
    it recorded and judged before the answer (a commit already recorded is answered from
    the database alone).
    """
    ref = TableRef(body.namespace, body.name)
    catalog = rt.catalogs.entry(body.catalog or rt.settings.catalog_name).name
    # An engine reporting its commits needs operator on the table's namespace.
    access.need(Role.operator, catalog, ref.namespace, target=ref.dotted)
    row = managed(session, catalog, ref)
    _check_commit_fields(row, body)
    if row.format != TableFormatName.ICEBERG:
        new_events, event = _push_path(session, rt, row, body.commit)
        return EventAccepted(
            table=ref.dotted,
            new_events=new_events,
            current_snapshot_id=None,
            event=EventOut.model_validate(event) if event else None,
        )
    known = _known_event(session, row, body)
    if _is_duplicate(row.metadata_location, body, known):
        return EventAccepted(
            table=ref.dotted,
            new_events=0,
            current_snapshot_id=row.current_snapshot_id,
            event=EventOut.model_validate(known) if known else None,
        )
    table: TableRead = load_table(rt.catalogs.load(catalog), ref)
    problem = _unknown_snapshot(table, ref, body.snapshot_id)
    if problem:
        raise HTTPException(422, problem)
    seen = row.metadata_location
    session.refresh(row, with_for_update={"key_share": True})
    table, ingested = _ingest(session, rt, row, seen, ref, table)
    snapshot_id = body.snapshot_id if body.snapshot_id is not None else ingested.current_snapshot_id
    event = event_for(session, row.id, snapshot_id)
    return EventAccepted(
        table=ref.dotted,
        new_events=len(ingested.new_event_ids),
        current_snapshot_id=ingested.current_snapshot_id,
        event=EventOut.model_validate(event) if event else None,
    )


# --- Hudi and Delta tables -----------------------------------------------------------------


def _check_commit_fields(row: ManagedTable, body: EventIn) -> None:
    """422 if `body` names the commit in the fields of another format than the table's."""
    problem = _commit_fields_problem(row, body)
    if problem:
        raise HTTPException(422, problem)


def _commit_fields_problem(row: ManagedTable, body: EventIn) -> str | None:
    if row.format == TableFormatName.ICEBERG:
        if body.commit is not None:
            return (
                f"{row.namespace}.{row.name} is an Iceberg table: name its commit with "
                "snapshot_id (and metadata_location), not commit"
            )
        return None
    if body.snapshot_id is not None or body.metadata_location is not None:
        return (
            f"{row.namespace}.{row.name} is a {row.format.capitalize()} table: name its "
            "commit with commit (an instant or version); snapshot_id and metadata_location "
            "are an Iceberg table's"
        )
    return None


def _push_path(
    session: Session, rt: Runtime, row: ManagedTable, commit: str | None
) -> tuple[int, TimelineEvent | None]:
    """A commit pushed for a Hudi or Delta table: (the commits recorded, the event of
    `commit`, else of the newest commit). A commit already recorded is answered from the
    database alone; otherwise the log is read from the cursor now (404: the table's log is
    gone; 422: lakewarden cannot read it, or `commit` is not in it)."""
    if commit is not None and row.format == TableFormatName.DELTA:
        commit = str(int(commit))  # a version: 007 is 7
    known = commit_event(session, row.id, commit) if commit is not None else None
    if known is not None:
        return 0, known
    entry = rt.catalogs.entry(row.catalog)
    try:
        ingested = push_path_table(session, entry, row, f"webhook:{rt.process_id}")
    except LOG_MISSING as exc:
        raise HTTPException(404, str(exc)) from exc
    except LOG_UNREADABLE as exc:
        raise HTTPException(422, str(exc)) from exc
    wanted = commit if commit is not None else ingested.head
    event = commit_event(session, row.id, wanted) if wanted is not None else None
    if commit is not None and event is None:
        raise HTTPException(
            422,
            f"commit {commit} is not in the log of {row.namespace}.{row.name} after the "
            f"newest commit lakewarden recorded ({ingested.head}); nothing was recorded",
        )
    return len(ingested.new_event_ids), event


@router.post(
    "/events/hudi",
    status_code=202,
    response_model=EventAccepted,
    responses=errors.documented(
        409,
        body=True,
        notes={
            404: "no managed Hudi table has that base path (no `hudi` catalog's warehouse "
            "holds it, or its table is not managed), or its timeline is gone",
            409: "a concurrent change won",
            413: "the message is over 64 MiB (a commit of ~50,000 files; 1 MiB without "
            "credentials): the poll records the commit",
            422: "the message is not Hudi's, the path is a Delta catalog's table, the "
            "table's version is one lakewarden does not read, or the instant is not on its "
            "timeline",
        },
    ),
)
def post_hudi_commit(
    body: HudiCommitIn, rt: RuntimeDep, session: SessionDep, access: AccessDep
) -> EventAccepted:
    """Hudi's write-commit callback: a Hudi writer posts each commit here.

    Set on the writer `hoodie.write.commit.callback.on=true`,
    `hoodie.write.commit.callback.http.url=<lakewarden>/api/v1/events/hudi` and
    `hoodie.write.commit.callback.http.custom.headers=Authorization:Bearer <token>` (a
    token with the operator role on the table's namespace). The table is found by the
    message's `basePath` under a `hudi` catalog's warehouse; its timeline is read from the
    newest instant lakewarden recorded, as `POST /api/v1/events` does with `commit` set to
    the message's `commitTime`. Idempotent: a repeated or late callback records nothing.
    """
    access.need_somewhere(Role.operator)
    catalog, ref = _table_by_path(rt, body.basePath)
    access.need(Role.operator, catalog.name, ref.namespace, target=ref.dotted)
    if catalog.type != TableFormatName.HUDI:
        raise HTTPException(
            422,
            f"{body.basePath} is table {ref.dotted} of {catalog.type} catalog "
            f"{catalog.name!r}, not a Hudi table's; report its commits with POST /api/v1/events",
        )
    row = managed(session, catalog.name, ref)
    new_events, event = _push_path(session, rt, row, body.commitTime)
    access.change = {"commit": body.commitTime, "new_events": new_events}
    return EventAccepted(
        table=ref.dotted,
        new_events=new_events,
        current_snapshot_id=None,
        event=EventOut.model_validate(event) if event else None,
    )


def _table_by_path(rt: Runtime, path: str) -> tuple[CatalogEntry, TableRef]:
    """The path catalog (`hudi`, `delta`) whose warehouse holds `path`, and the table's
    name there; 404 if none does, 422 if the path's last parts are no table name."""
    for attempt in range(2):
        if attempt:  # registered a moment ago, perhaps on another replica
            rt.catalogs.forget()
        for entry in rt.catalogs.entries():
            found = table_at(entry, path) if entry.type in PATH_CATALOGS else None
            if found is not None:  # a name lakewarden cannot manage: the handler's 422
                return entry, TableRef(*found)
    raise HTTPException(
        404,
        f"no managed Hudi table has the base path {path}: no hudi catalog's warehouse holds "
        "it (a table's base path is <warehouse>/<namespace>/<name>; see GET /api/v1/catalogs)",
    )


# --- the batch ----------------------------------------------------------------------------


@dataclass
class _Group:
    """The notifications of one table in a batch, and its row as first read."""

    catalog: str
    ref: TableRef
    indexes: list[int] = field(default_factory=list)
    row: ManagedTable | None = None
    table_id: int = 0
    seen: str | None = None  # the row's pointer before the catalog was read
    current_snapshot_id: int | None = None


class _Recorded(NamedTuple):
    """What a batch's answer says of a recorded event: its id and decision."""

    id: int
    decision: str | None


_RECORDED = text(
    """
    SELECT e.table_id, e.snapshot_id, e.id, e.decision FROM timeline_events e
    JOIN unnest(CAST(:t AS bigint[]), CAST(:s AS bigint[])) AS u(t, s)
      ON e.table_id = u.t AND e.snapshot_id = u.s
    """
)


def _events_of(session: Session, pairs: set[tuple[int, int]]) -> dict[tuple[int, int], _Recorded]:
    """The recorded events of (table id, snapshot id) pairs, in one query (an index lookup
    per pair on the (table_id, snapshot_id) key), as the answer needs them: id and decision
    (not the whole row: its summary and decision detail are most of its bytes)."""
    if not pairs:
        return {}
    ordered = sorted(pairs)
    found = session.execute(_RECORDED, {"t": [t for t, _ in ordered], "s": [s for _, s in ordered]})
    return {(t, s): _Recorded(id_, decision) for t, s, id_, decision in found}


class _Batch:
    """The results of one batch, filled in item by item."""

    def __init__(self, events: list[EventIn]) -> None:
        self.events = events
        self.results: list[EventResult | None] = [None] * len(events)

    def fail(self, index: int, status: int, error: str) -> None:
        ev = self.events[index]
        self.results[index] = EventResult(
            index=index,
            table=f"{ev.namespace}.{ev.name}",
            accepted=False,
            status=status,
            new_events=0,
            error=error,
        )

    def accept(
        self,
        index: int,
        *,
        new_events: int,
        current_snapshot_id: int | None,
        event: TimelineEvent | _Recorded | None,
    ) -> None:
        ev = self.events[index]
        self.results[index] = EventResult(
            index=index,
            table=f"{ev.namespace}.{ev.name}",
            accepted=True,
            status=202,
            new_events=new_events,
            current_snapshot_id=current_snapshot_id,
            event_id=event.id if event else None,
            decision=event.decision if event else None,
        )

    def answer(self) -> EventBatchAccepted:
        results = [r for r in self.results if r is not None]
        assert len(results) == len(self.events), "every notification gets a result"
        accepted = sum(r.accepted for r in results)
        return EventBatchAccepted(
            accepted=accepted,
            failed=len(results) - accepted,
            new_events=sum(r.new_events for r in results),
            results=results,
        )


def _read_wave(
    rt: Runtime, batch: _Batch, todo: list[tuple[_Group, list[int]]]
) -> list[tuple[_Group, list[int], TableRead]]:
    """The wave's tables read from the catalog (no lock held by this request's reads yet
    for them): each catalog's at once (`find_tables`), one by one if that fails. Each
    group with those of its pending notifications the table can answer; the others are
    failed, and a group with none left is dropped."""
    read: dict[tuple[str, TableRef], TableRead | Exception | None] = {}
    for catalog in sorted({g.catalog for g, _ in todo}):
        refs = [g.ref for g, _ in todo if g.catalog == catalog]
        try:
            found = find_tables(rt.catalogs.load(catalog), refs)
            read.update({(catalog, ref): table for ref, table in found.items()})
        except Exception:
            for ref in refs:
                try:
                    read[(catalog, ref)] = find_table(rt.catalogs.load(catalog), ref)
                except Exception as exc:
                    read[(catalog, ref)] = exc
    out: list[tuple[_Group, list[int], TableRead]] = []
    for group, pending in todo:
        ref, table = group.ref, read[(group.catalog, group.ref)]
        if isinstance(table, Exception):
            _fail_unexpected(batch, pending, ref, table)
            continue
        if table is None:
            _fail_all(batch, pending, 404, f"catalog {group.catalog!r} has no table {ref.dotted}")
            continue
        valid: list[int] = []
        for i in pending:
            problem = _unknown_snapshot(table, ref, batch.events[i].snapshot_id)
            if problem:
                batch.fail(i, 422, problem)
            else:
                valid.append(i)
        if valid:
            out.append((group, valid, table))
    return out


def _ingest_wave(
    session: Session, rt: Runtime, batch: _Batch, wave: list[tuple[_Group, list[int], TableRead]]
) -> None:
    """Ingest the wave's tables set-based (refresh.ingest_batch: a few statements for all
    of them), in one savepoint. Should it fail, each table is ingested again alone in a
    savepoint of its own, so one table's failure is reported on its notifications alone."""
    if not wave:
        return
    try:
        with session.begin_nested():
            _ingest_tables(session, rt, batch, wave)
        return
    except Exception:  # the tables one by one find which failed, and why
        log.info("an event batch's wave of %d tables failed; ingesting them one by one", len(wave))
    for one in wave:
        group, valid, _ = one
        try:
            with session.begin_nested():
                _ingest_tables(session, rt, batch, [one])
        except TableGone as exc:
            _fail_all(batch, valid, 404, str(exc))
        except DBAPIError as exc:
            if not errors.is_conflict(exc):
                _fail_unexpected(batch, valid, group.ref)
            else:
                _fail_all(
                    batch,
                    valid,
                    409,
                    "collided with a concurrent change; nothing was written: retry",
                )
        except Exception:
            _fail_unexpected(batch, valid, group.ref)


def _ingest_tables(
    session: Session, rt: Runtime, batch: _Batch, wave: list[tuple[_Group, list[int], TableRead]]
) -> None:
    """Lock the wave's rows, read again from the catalog a table whose row another ingest
    moved meanwhile (`_ingest`'s rule), ingest them all and accept their notifications."""
    locked = lock_rows(session, [g.table_id for g, _, _ in wave])
    reads: list[tuple[int, TableRead]] = []
    for group, _valid, table in wave:
        row = locked.get(group.table_id)
        if row is None:
            raise TableGone(f"table {group.ref.dotted} is no longer managed")
        if row.metadata_location not in (group.seen, table.metadata_location):
            again = find_table(rt.catalogs.load(row.catalog), group.ref)
            if again is None:
                raise TableGone(f"table {group.ref.dotted} is gone from the catalog")
            table = again
        reads.append((group.table_id, table))
    ingested = ingest_batch(session, rt, reads, source="webhook")
    wanted: set[tuple[int, int]] = set()
    for group, valid, _ in wave:
        if group.table_id not in ingested:
            raise TableGone(f"table {group.ref.dotted} is no longer managed")
        current = ingested[group.table_id].current_snapshot_id
        for i in valid:
            snapshot_id = batch.events[i].snapshot_id
            snapshot_id = current if snapshot_id is None else snapshot_id
            if snapshot_id is not None:
                wanted.add((group.table_id, snapshot_id))
    events = _events_of(session, wanted)
    for group, valid, _ in wave:
        got = ingested[group.table_id]
        for n, i in enumerate(valid):
            snapshot_id = batch.events[i].snapshot_id
            if snapshot_id is None:
                snapshot_id = got.current_snapshot_id
            batch.accept(
                i,
                new_events=len(got.new_event_ids) if n == 0 else 0,
                current_snapshot_id=got.current_snapshot_id,
                event=events.get((group.table_id, snapshot_id)) if snapshot_id else None,
            )


def _fail_all(batch: _Batch, indexes: list[int], status: int, error: str) -> None:
    """Fail every notification of `indexes` that has no result yet (or was accepted in the
    transaction that has just rolled back)."""
    for i in indexes:
        result = batch.results[i]
        if result is None or result.accepted:
            batch.fail(i, status, error)


def _fail_unexpected(
    batch: _Batch, indexes: list[int], ref: TableRef, exc: BaseException | None = None
) -> None:
    """Fail `indexes` with a 500 whose id the server log has with the traceback (of `exc`,
    else of the exception being handled)."""
    error_id = uuid.uuid4().hex[:12]
    log.error(
        "unexpected error %s ingesting %s in an event batch",
        error_id,
        ref.dotted,
        exc_info=exc or True,
    )
    _fail_all(batch, indexes, 500, f"internal error; the server log has it under {error_id}")


@router.post(
    "/events/batch",
    status_code=202,
    response_model=EventBatchAccepted,
    responses=errors.documented(
        409,
        body=True,
        notes={
            422: "the body is not a batch (not a list of 1 to 1000 notifications of the "
            "right types): nothing was ingested. A notification that is well-formed but "
            "refused (an invalid table name, a snapshot not in the table, a table not "
            "managed, no operator role on its namespace) is reported on its own item",
            503: "ingest is at capacity (a burst of batches): nothing of this batch was "
            "ingested; retry after `Retry-After` seconds",
        },
    ),
)
def post_events_batch(
    body: EventBatchIn, _turn: BatchTurn, rt: RuntimeDep, session: SessionDep, access: AccessDep
) -> EventBatchAccepted:
    """Report many commits, of any tables, in one call (a catalog or engine forwarding
    its commit stream). Idempotent, like POST /api/v1/events, item by item.

    The notifications of one table are coalesced: one catalog read and one ingest per
    table, none at all when every notification of the table is already recorded. Every
    item gets a result, in order: accepted, or refused with the status POST /api/v1/events
    would have answered and why; a refused item does not affect the others. Each table
    is ingested in a savepoint of its own, and what the answer says was recorded is
    committed when it arrives. Each item needs the operator role on its table's
    namespace; the call needs it somewhere. A batch counts as one call against the
    rate limit. A replica ingests a few batches at once; one that finds no turn within
    seconds is answered 503 with Retry-After, nothing of it ingested.
    """
    access.need_somewhere(Role.operator)
    batch = _Batch(body.events)
    groups: dict[tuple[str, TableRef], _Group] = {}
    for i, ev in enumerate(body.events):
        ref = _table_of(ev)
        if isinstance(ref, str):
            batch.fail(i, 422, ref)
            continue
        try:
            catalog = rt.catalogs.entry(ev.catalog or rt.settings.catalog_name).name
        except UnknownCatalog as exc:
            batch.fail(i, 404, str(exc))
            continue
        if not access.caller.may(Role.operator, catalog, ref.namespace):
            batch.fail(
                i,
                403,
                f"this needs the {Role.operator} role on {catalog}/{ref.namespace}; "
                f"{access.caller.subject} has {access.caller.grants_text()}",
            )
            continue
        groups.setdefault((catalog, ref), _Group(catalog, ref)).indexes.append(i)
    rows = {
        (name, ref): row
        for name in {c for c, _ in groups}
        for ref, row in get_tables(session, name, [r for c, r in groups if c == name]).items()
    }
    for (catalog, ref), group in groups.items():
        group.row = rows.get((catalog, ref))
        if group.row is not None:
            group.table_id = group.row.id
            group.seen = group.row.metadata_location
            group.current_snapshot_id = group.row.current_snapshot_id
        else:
            for i in group.indexes:
                batch.fail(
                    i,
                    404,
                    f"table {ref.dotted} of catalog {catalog!r} is not managed by lakewarden; "
                    f"register it with POST /api/v1/catalogs/{catalog}/tables",
                )
    # In table id order: concurrent batches lock the rows they share in one order (the
    # Iceberg tables' first, then the path tables').
    live = sorted((g for g in groups.values() if g.row is not None), key=lambda g: g.table_id)
    for group in live:
        assert group.row is not None
        for i in group.indexes:
            problem = _commit_fields_problem(group.row, batch.events[i])
            if problem:
                batch.fail(i, 422, problem)
        group.indexes = [i for i in group.indexes if batch.results[i] is None]
    paths = [g for g in live if g.row is not None and g.row.format != TableFormatName.ICEBERG]
    live = [g for g in live if g.indexes and all(g is not p for p in paths)]
    # What the database alone can answer: notifications of recorded commits or pointers.
    known = _events_of(session, {(g.table_id, s) for g in live for s in _named_snapshots(batch, g)})
    todo: list[tuple[_Group, list[int]]] = []
    for group in live:
        pending = []
        for i in group.indexes:
            ev = batch.events[i]
            snapshot_id = ev.snapshot_id
            if snapshot_id is None and ev.metadata_location == group.seen:
                snapshot_id = group.current_snapshot_id
            event = known.get((group.table_id, snapshot_id)) if snapshot_id is not None else None
            if _is_duplicate(group.seen, ev, event):
                batch.accept(
                    i, new_events=0, current_snapshot_id=group.current_snapshot_id, event=event
                )
            else:
                pending.append(i)
        if pending:
            todo.append((group, pending))
    # The catalog is read for a wave of tables before their rows are locked, so no lock is
    # held while a table is read, but those of earlier waves (bounded memory: a wave's
    # tables are held at once).
    for start in range(0, len(todo), READ_WAVE):
        _ingest_wave(session, rt, batch, _read_wave(rt, batch, todo[start : start + READ_WAVE]))
    for group in paths:
        _push_group(session, rt, batch, group)
    answer = batch.answer()
    catalogs = {g.catalog for g in groups.values()}
    access.catalog = catalogs.pop() if len(catalogs) == 1 else None
    namespaces = {g.ref.namespace for g in groups.values()}
    access.namespace = namespaces.pop() if len(namespaces) == 1 else None
    access.target = f"{len(body.events)} events"
    access.change = {
        "accepted": answer.accepted,
        "failed": answer.failed,
        "new_events": answer.new_events,
        "tables": len(groups),
    }
    return answer


def _push_group(session: Session, rt: Runtime, batch: _Batch, group: _Group) -> None:
    """The notifications of one Hudi or Delta table, each pushed as POST /api/v1/events
    would (`_push_path`: the first reads the log, the others find their commits recorded),
    each in a savepoint of its own: a refusal rolls back that notification's work alone."""
    assert group.row is not None
    for i in group.indexes:
        try:
            with session.begin_nested():
                new_events, event = _push_path(session, rt, group.row, batch.events[i].commit)
            batch.accept(i, new_events=new_events, current_snapshot_id=None, event=event)
        except HTTPException as exc:
            batch.fail(i, exc.status_code, str(exc.detail))
        except DBAPIError as exc:
            if not errors.is_conflict(exc):
                _fail_unexpected(batch, [i], group.ref)
            else:
                batch.fail(i, 409, "collided with a concurrent change; nothing was written: retry")
        except Exception:
            _fail_unexpected(batch, [i], group.ref)


def _table_of(ev: EventIn) -> TableRef | str:
    """The notification's table, or why its name is none lakewarden can manage (answered on
    the item: the handler's 422 would refuse the whole batch)."""
    try:
        return TableRef(ev.namespace, ev.name)
    except InvalidIdentifier as exc:
        return str(exc)


def _named_snapshots(batch: _Batch, group: _Group) -> set[int]:
    """The snapshots the group's notifications name, or that their pointer stands for."""
    out: set[int] = set()
    for i in group.indexes:
        ev = batch.events[i]
        if ev.snapshot_id is not None:
            out.add(ev.snapshot_id)
        elif ev.metadata_location == group.seen and group.current_snapshot_id is not None:
            out.add(group.current_snapshot_id)
    return out
