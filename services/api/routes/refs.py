"""A table's branches and tags (GET …/refs, viewer), and rolling main back to a snapshot
or a tag (POST …/rollback, admin, audited). Both through pyiceberg in the API process (no
JVM): `lakewarden.refs`; a Delta table is restored to a version by delta-rs
(`formats.delta.restore`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

from fastapi import APIRouter, HTTPException
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table
from sqlalchemy import select
from sqlalchemy.orm import Session

from lakewarden import refs, repair, tables
from lakewarden.auth.grants import Role
from lakewarden.db.models import ManagedTable, PublishAudit, Task
from lakewarden.db.session import transaction
from lakewarden.formats.delta import catalog as delta_catalog
from lakewarden.formats.delta.restore import RestoreConflict, RestoreRefused, restore_to
from lakewarden.formats.delta.timeline import NotADeltaTable, UnsupportedProtocol
from lakewarden.runtime import Runtime
from lakewarden.states import TableFormatName, TaskState
from lakewarden.tables import ref_of
from services.api import errors
from services.api.access import Access, AccessDep, TableDep
from services.api.deps import RuntimeDep, SessionDep
from services.api.policies import current_policy
from services.api.routes.health import GONE, load_live_table
from services.api.schemas import (
    CherryPickIn,
    DryRunIn,
    PublishAuditOut,
    PublishOut,
    RefOut,
    RefsOut,
    RepairIn,
    RepairOut,
    RevertIn,
    RollbackIn,
    RollbackOut,
)

# How long the rollback's blocker holds if the API dies before lifting it.
HOLD_S = 300.0
DISPATCHABLE = (TaskState.PLANNED, TaskState.RUNNING)

router = APIRouter(prefix="/api/v1/catalogs/{catalog}/tables", tags=["refs"])

ROLLBACK_ERRORS = {
    404: "the table is not managed, or has no such snapshot or tag",
    409: "a task of the table is running, main moved during the rollback (a writer "
    "committed), or the table is gone from the catalog",
    422: "not exactly one of to_snapshot and to_tag; the tag is a branch; or the snapshot "
    "is not an ancestor of main's current snapshot; a Delta table: a tag, or a version "
    "it cannot return to",
}


@router.get(
    "/{namespace}/{name}/refs",
    response_model=RefsOut,
    responses=errors.documented(notes=GONE),
)
def list_table_refs(row: TableDep, rt: RuntimeDep) -> RefsOut:
    """Every branch and tag: its snapshot and that snapshot's commit time and age, its
    retention (max-ref-age, min-snapshots-to-keep, max-snapshot-age) and when the next
    snapshot expiry drops it."""
    table = load_live_table(rt, row)
    now = datetime.now(UTC)
    current = table.current_snapshot()
    return RefsOut(
        table=f"{row.namespace}.{row.name}",
        at=now,
        current_snapshot_id=current.snapshot_id if current else None,
        refs=[RefOut.model_validate(r) for r in refs.list_refs(table, now)],
    )


@router.post(
    "/{namespace}/{name}/rollback",
    response_model=RollbackOut,
    responses=errors.documented(409, 422, body=True, notes=ROLLBACK_ERRORS),
)
def rollback_table(
    body: RollbackIn, row: TableDep, rt: RuntimeDep, session: SessionDep, access: AccessDep
) -> RollbackOut:
    """Point main back at a snapshot in its history, named by id or by a tag (admin).
    Refused (409) while any task of the table runs: a rewrite's commit, a TTL delete's
    count and check, a clean's expiry all assume the main they started from. A snapshot off
    main's history is refused (422): a rollback only returns main to a state it had."""
    access.need(Role.admin, row.catalog, row.namespace, target=f"{row.namespace}.{row.name}")
    with main_held(rt, session, row, f"rollback by {access.actor}", "rolling main back"):
        return _rollback(body, row, rt, access)


@contextmanager
def main_held(
    rt: Runtime, session: Session, row: ManagedTable, holder: str, reason: str
) -> Iterator[None]:
    """Main may move by hand: no job starts on the table meanwhile (a blocker, committed
    first: dispatch sees only committed blockers; lifted at the end), the table's row is
    locked (a concurrent move waits), and a job already running is a 409."""
    with transaction(rt.engine) as s:
        hold = tables.add_blocker(s, row, holder=holder, reason=reason, ttl_s=HOLD_S).id
    try:
        _no_job_running(session, row, reason)
        yield
    finally:
        with transaction(rt.engine) as s:
            tables.remove_blocker(s, row, hold)


def _no_job_running(session: Session, row: ManagedTable, doing: str) -> None:
    # Held until the response: a concurrent rollback of this table waits for this one.
    if tables.lock_table(session, row) is None:
        raise HTTPException(404, f"table {row.namespace}.{row.name} is no longer managed")
    # Locking the table's planned and running tasks waits for a dispatch still in flight
    # (it holds its task's row until it commits the task as running), so a job that started
    # just before the blocker is seen here.
    running = next(
        (
            t
            for t in session.scalars(
                select(Task)
                .where(Task.table_id == row.id, Task.state.in_(DISPATCHABLE))
                .with_for_update()
                .execution_options(populate_existing=True)
            )
            if t.state == TaskState.RUNNING
        ),
        None,
    )
    if running is not None:
        raise HTTPException(
            409,
            f"task {running.id} ({running.kind}) is running on the table: {doing} now "
            "would move main under its commit; retry once it has ended "
            f"(GET /api/v1/tasks/{running.id})",
        )


def _rollback(body: RollbackIn, row: ManagedTable, rt: Runtime, access: Access) -> RollbackOut:
    if row.format == TableFormatName.DELTA:
        return _restore_delta(body, row, rt, access)
    table = load_live_table(rt, row)
    snapshot, tag = body.to_snapshot, body.to_tag
    try:
        target = refs.resolve_target(table, snapshot, tag)
        done = refs.rollback_main(table, target)
    except refs.UnknownTarget as exc:
        raise HTTPException(404, str(exc)) from exc
    except refs.RollbackRefused as exc:
        raise HTTPException(422, str(exc)) from exc
    except CommitFailedException as exc:
        raise HTTPException(
            409,
            "main moved while rolling back (a writer committed): nothing changed; "
            "look at GET …/refs and retry",
        ) from exc
    access.change = {
        "main": [done["from_snapshot_id"], done["to_snapshot_id"]],
        "to_tag": tag,
        "rolled_back": done["rolled_back"],
    }
    return RollbackOut(table=f"{row.namespace}.{row.name}", to_tag=tag, **done)


@router.get(
    "/{namespace}/{name}/publish",
    response_model=PublishOut,
    responses=errors.documented(),
)
def list_publish_audits(row: TableDep, session: SessionDep) -> PublishOut:
    """Write-audit-publish: the table's publish policy and its audit branch's audits, the
    newest first: each check's verdict and whether main was fast-forwarded."""
    policy = current_policy(session, row).publish
    audits = session.scalars(
        select(PublishAudit)
        .where(PublishAudit.table_id == row.id)
        .order_by(PublishAudit.id.desc())
        .limit(50)
    ).all()
    return PublishOut(
        table=f"{row.namespace}.{row.name}",
        enabled=policy.enabled,
        branch=policy.branch,
        audits=[PublishAuditOut.model_validate(a) for a in audits],
    )


REPAIR_ERRORS = {
    404: "the table is not managed, or has no such snapshot",
    409: "a task of the table is running, main moved since the dry run or during the commit, "
    "or the table is gone from the catalog",
    422: "the snapshot is not in main's history, the partition does not name the spec's "
    "fields, or the change cannot be exact (delete files involved, a file to put back is "
    "gone from storage, a file the range added was rewritten since)",
}


@router.post(
    "/{namespace}/{name}/repair",
    response_model=RepairOut,
    responses=errors.documented(409, 422, body=True, notes=REPAIR_ERRORS),
)
def repair_partition(
    body: RepairIn, row: TableDep, rt: RuntimeDep, session: SessionDep, access: AccessDep
) -> RepairOut:
    """One partition back to what it held at an earlier snapshot of main, later changes to
    other partitions kept (admin, audited). A dry run (the default) says which files and
    rows would go and come back; the commit is checked like a rewrite (main's live files are
    exactly the planned set, else main is rolled back)."""
    access.need(Role.admin, row.catalog, row.namespace, target=f"{row.namespace}.{row.name}")
    return _by_hand(
        body,
        row,
        rt,
        session,
        access,
        ("repair", "repairing a partition"),
        lambda table: repair.plan_partition_repair(table, body.partition, body.to_snapshot),
    )


@router.post(
    "/{namespace}/{name}/revert",
    response_model=RepairOut,
    responses=errors.documented(409, 422, body=True, notes=REPAIR_ERRORS),
)
def revert_range(
    body: RevertIn, row: TableDep, rt: RuntimeDep, session: SessionDep, access: AccessDep
) -> RepairOut:
    """Undo the changes of main's commits after `from_snapshot` up to and including
    `to_snapshot` (the files they added taken out, those they removed put back), the later
    commits kept (admin, audited). A dry run (the default) says what would change."""
    access.need(Role.admin, row.catalog, row.namespace, target=f"{row.namespace}.{row.name}")
    return _by_hand(
        body,
        row,
        rt,
        session,
        access,
        ("revert", "reverting commits"),
        lambda table: repair.plan_range_revert(table, body.from_snapshot, body.to_snapshot),
    )


@router.post(
    "/{namespace}/{name}/cherry-pick",
    response_model=RepairOut,
    responses=errors.documented(409, 422, body=True, notes=REPAIR_ERRORS),
)
def cherry_pick(
    body: CherryPickIn, row: TableDep, rt: RuntimeDep, session: SessionDep, access: AccessDep
) -> RepairOut:
    """Apply to main an append committed outside its history (an audit branch's commit,
    say): its data files appended as they are (admin, audited). A dry run (the default)
    says which files and rows would come."""
    access.need(Role.admin, row.catalog, row.namespace, target=f"{row.namespace}.{row.name}")
    return _by_hand(
        body,
        row,
        rt,
        session,
        access,
        ("cherry-pick", "cherry-picking"),
        lambda table: repair.plan_cherry_pick(table, body.snapshot),
    )


def _by_hand(
    body: DryRunIn,
    row: ManagedTable,
    rt: Runtime,
    session: Session,
    access: Access,
    what: tuple[str, str],
    make: Callable[[Table], repair.Plan],
) -> RepairOut:
    """A repair, revert or cherry-pick (`what`: its name, and what it is doing): under
    main's hold, planned on the live table, then a dry run or the commit."""
    name, doing = what
    with main_held(rt, session, row, f"{name} by {access.actor}", doing):
        table = load_live_table(rt, row)
        try:
            plan = make(table)
        except LookupError as exc:
            raise HTTPException(404, str(exc)) from exc
        except repair.RepairRefused as exc:
            raise HTTPException(422, str(exc)) from exc
        return _carried_out(plan, body.dry_run, body.main_snapshot_id, table, row, access)


def _carried_out(
    plan: repair.Plan,
    dry_run: bool,
    seen_main: int | None,
    table: Table,
    row: ManagedTable,
    access: Access,
) -> RepairOut:
    name = f"{row.namespace}.{row.name}"
    if seen_main is not None and seen_main != plan.from_snapshot_id:
        raise HTTPException(
            409,
            f"main moved since your dry run (it was {seen_main}, now {plan.from_snapshot_id}): "
            "dry-run again and check what would change",
        )
    if dry_run:
        return RepairOut(table=name, dry_run=True, **plan.summary())
    try:
        done = repair.apply(table, plan, by=access.actor)
    except repair.MainMoved as exc:
        raise HTTPException(409, str(exc)) from exc
    except CommitFailedException as exc:
        raise HTTPException(
            409, "main moved while committing (a writer committed): nothing changed; retry"
        ) from exc
    except repair.RepairRefused as exc:
        raise HTTPException(422, str(exc)) from exc
    access.change = {
        "action": plan.action,
        "main": [plan.from_snapshot_id, done["committed_snapshot_id"]],
        **{k: v for k, v in plan.scope.items()},
        "rows_removed": done["rows_removed"],
        "rows_restored": done["rows_restored"],
    }
    return RepairOut(table=name, dry_run=False, **done)


def _restore_delta(body: RollbackIn, row: ManagedTable, rt: Runtime, access: Access) -> RollbackOut:
    """A Delta table back to a version (`to_snapshot`): a RESTORE commit (delta-rs)."""
    name = f"{row.namespace}.{row.name}"
    if body.to_snapshot is None:
        raise HTTPException(422, f"{name} is a Delta table: it has no tags; send to_snapshot")
    timeline = delta_catalog.open_timeline(rt.catalogs.entry(row.catalog), ref_of(row))
    try:
        done = restore_to(timeline, body.to_snapshot)
    except RestoreRefused as exc:
        raise HTTPException(422, str(exc)) from exc
    except RestoreConflict as exc:
        raise HTTPException(409, f"{exc}: nothing changed; retry") from exc
    except (NotADeltaTable, UnsupportedProtocol) as exc:
        raise HTTPException(409, str(exc)) from exc
    access.change = {
        "version": [done["from_snapshot_id"], done["to_snapshot_id"]],
        "rolled_back": done["rolled_back"],
        "restore_version": done["restore_version"],
    }
    return RollbackOut(table=name, to_tag=None, **done)
