"""Tasks: list, inspect (with history and runs), trigger by hand, cancel, retry."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query
from pydantic import ValidationError

from lakewarden import capacity, holds, tables
from lakewarden.auth.grants import Role
from lakewarden.catalogs.catalog import TableRef
from lakewarden.db.models import KindHold, ManagedTable, Task
from lakewarden.kinds import REGISTRY
from lakewarden.policy import gate as policy_gate
from lakewarden.policy.model import KINDS
from lakewarden.policy.quotas import quota_holds
from lakewarden.settings import Settings
from lakewarden.states import OPEN_TASK_STATES, TaskState
from lakewarden.tasks import birth, repo
from lakewarden.tasks.machine import ALL_STATES
from services.api import errors
from services.api.access import Access, AccessDep, TableDep
from services.api.deps import Id, RuntimeDep, SessionDep, managed
from services.api.paging import PageDep
from services.api.policies import invalid_stored_policy
from services.api.schemas import (
    TABLE_PATTERN,
    TaskDetail,
    TaskIn,
    TaskOut,
    TaskPage,
    documented_pattern,
)

router = APIRouter(prefix="/api/v1", tags=["tasks"])

# Kinds that delete rows or files: running one the policy disables needs admin.
DESTRUCTIVE_KINDS = frozenset({"ttl", "clean"})


def _need_on_task(session: SessionDep, access: Access, role: Role, task_id: int) -> None:
    """`role` on the task's table; a missing task, or one the caller may not see, is the
    same 404 (after authentication)."""
    scope = repo.scope_of_task(session, task_id)
    missing = f"task {task_id} does not exist"
    if scope is None:
        raise HTTPException(404, missing)
    access.need_visible(role, *scope, target=f"task {task_id}", missing=missing)


def _on_hold(session: SessionDep, settings: Settings, tasks: Iterable[Task]) -> dict[int, str]:
    """For each task not yet running, what keeps it from starting (as dispatch judges it):
    the freeze, its table's pause, writers' blockers, its kind held on its table
    (lakewarden.holds), its table's or pool's hard quota (lakewarden.policy.quotas), its
    elastic pool's slots all taken (lakewarden.capacity). Absent when nothing does."""
    waiting = [t for t in tasks if t.state in OPEN_TASK_STATES and t.state != TaskState.RUNNING]
    blockers = tables.holds_on(session, {t.table_id for t in waiting})
    kind_holds = holds.holds_of(session, {t.table_id for t in waiting})
    quota = quota_holds(session, settings, {t.table_id for t in waiting}) if waiting else None
    full_pools = capacity.pool_waits(session, settings, {t.pool for t in waiting})
    said = {
        t.id: [tables.describe_hold(h) for h in blockers[t.table_id]]
        + [
            holds.describe(session, _table_of(session, t), h)
            for h in kind_holds.get(t.table_id, [])
            if h.kind == t.kind
        ]
        + ([reason] if quota and (reason := quota.reason(t.table_id, t.pool)) else [])
        + ([full_pools[t.pool]] if t.pool in full_pools and t.state == TaskState.PLANNED else [])
        for t in waiting
    }
    return {task_id: "; ".join(reasons) for task_id, reasons in said.items() if reasons}


def _table_of(session: SessionDep, task: Task) -> ManagedTable:
    row = session.get(ManagedTable, task.table_id)
    assert row is not None  # a task's table row outlives it (retired, never deleted)
    return row


def _detail(session: SessionDep, settings: Settings, record: repo.TaskRecord) -> TaskDetail:
    held = _on_hold(session, settings, [record.task])
    return TaskDetail.of_record(record, held.get(record.task.id))


@router.get(
    "/tasks",
    response_model=TaskPage,
    responses=errors.documented(notes={404: "the `table` is not managed by lakewarden"}),
)
def list_tasks(
    rt: RuntimeDep,
    session: SessionDep,
    access: AccessDep,
    page: PageDep,
    table: Annotated[
        str | None,
        Query(
            max_length=384,
            description="namespace.name (a namespace may have several levels: a.b.name)",
            json_schema_extra=documented_pattern(TABLE_PATTERN),  # enforced by TableRef
        ),
    ] = None,
    catalog_name: Annotated[
        str | None,
        Query(
            alias="catalog",
            max_length=128,
            description="the catalog of `table` (default: the default catalog)",
        ),
    ] = None,
    state: Annotated[Literal[ALL_STATES] | None, Query()] = None,  # type: ignore[valid-type]
    kind: Annotated[Literal[KINDS] | None, Query()] = None,  # type: ignore[valid-type]
) -> TaskPage:
    """Tasks, newest first."""
    visible = access.scope(Role.viewer, ManagedTable.catalog, ManagedTable.namespace)
    table_id = None
    if table is not None:
        ref = TableRef.parse(table)
        catalog = rt.catalogs.entry(catalog_name or rt.settings.catalog_name).name
        access.need(Role.viewer, catalog, ref.namespace, target=ref.dotted)
        table_id = managed(session, catalog, ref).id
    found = repo.list_tasks(session, page, table_id=table_id, state=state, kind=kind, where=visible)
    held = _on_hold(session, rt.settings, (task for task, _ in found.items))
    return TaskPage.of(found, lambda row: TaskOut.of(*row, on_hold=held.get(row[0].id)))


@router.get(
    "/tasks/{task_id}",
    response_model=TaskDetail,
    responses=errors.documented(notes={404: "no such task"}),
)
def get_task(task_id: Id, rt: RuntimeDep, session: SessionDep, access: AccessDep) -> TaskDetail:
    """A task with why it exists, its plan, result, every transition and every run."""
    _need_on_task(session, access, Role.viewer, task_id)
    record = repo.get_task(session, task_id)
    if record is None:
        raise HTTPException(404, f"task {task_id} does not exist")
    return _detail(session, rt.settings, record)


TRIGGER_ERRORS = {
    **errors.ON_TABLE,
    409: "a task of the kind is open, the policy disables the kind (see `override_disabled`), "
    "the stored policy is invalid, or a concurrent change won",
}


@router.post(
    "/catalogs/{catalog}/tables/{namespace}/{name}/tasks",
    status_code=201,
    response_model=TaskDetail,
    responses=errors.documented(body=True, notes=TRIGGER_ERRORS),
)
def trigger_task(
    body: TaskIn, row: TableDep, rt: RuntimeDep, session: SessionDep, access: AccessDep
) -> TaskDetail:
    """Ask for a task now, whatever the thresholds say; the worker still plans it.
    Operator; overriding a disabled destructive kind (ttl, clean) needs admin."""
    access.need(Role.operator, row.catalog, row.namespace)
    if body.kind not in REGISTRY:
        raise HTTPException(422, f"task kind {body.kind!r} is not available yet")
    return _ask_for(
        session,
        rt.settings,
        access,
        row,
        body.kind,
        {"source": "manual", "reason": "requested through the API"},
        override_disabled=body.override_disabled,
        how_to_override='pass "override_disabled": true to run it once anyway',
    )


def _ask_for(
    session: SessionDep,
    settings: Settings,
    access: Access,
    row: ManagedTable,
    kind: str,
    trigger: dict[str, Any],
    *,
    override_disabled: bool,
    how_to_override: str,
) -> TaskDetail:
    """A task of `kind` on the table, asked for by hand (trigger, retry): the policy gate,
    then `birth.open_task` (a 409 if the table has one open already, or the kind is held)."""
    try:
        policy, stamp = policy_gate.current(session, row, kind)
    except ValidationError as exc:
        raise HTTPException(409, invalid_stored_policy(row, exc)) from exc
    if not policy.enabled and not override_disabled:
        raise HTTPException(
            409,
            f"{kind} is disabled by the policy of {row.namespace}.{row.name} "
            f"({stamp.describe()}); enable it in the policy, or {how_to_override}",
        )
    if not policy.enabled and kind in DESTRUCTIVE_KINDS:
        access.need(Role.admin, row.catalog, row.namespace)
    actor = access.actor
    trigger = {**trigger, "policy": stamp.as_json()}
    if not policy.enabled:
        trigger["reason"] += f", overriding the disabled {kind}"
        trigger[policy_gate.OVERRIDE_KEY] = {"by": actor}
    task_id = birth.open_task(
        session,
        table_id=row.id,
        policy_version=row.policy_version,
        kind=kind,
        section=policy,
        actor=actor,
        trigger=trigger,
    )
    if task_id is None:
        refused = birth.why_not(session, row.id, kind)
        if isinstance(refused, KindHold):
            raise HTTPException(
                409, f"{row.namespace}.{row.name}: {holds.describe(session, row, refused)}"
            )
        raise HTTPException(
            409,
            f"table {row.namespace}.{row.name} already has an open {kind} task"
            + (f" ({refused.id}, {refused.state})" if refused else ""),
        )
    record = repo.get_task(session, task_id)
    assert record is not None
    return _detail(session, settings, record)


@router.post(
    "/tasks/{task_id}/cancel",
    response_model=TaskDetail,
    responses=errors.documented(
        notes={404: "no such task", 409: "the task already ended, or a concurrent change won"}
    ),
)
def cancel_task(task_id: Id, rt: RuntimeDep, session: SessionDep, access: AccessDep) -> TaskDetail:
    """Cancel a task in any open state; a running Spark job is cancelled by the scheduler."""
    _need_on_task(session, access, Role.operator, task_id)
    task = repo.transition(
        session,
        task_id,
        TaskState.CANCELLED,
        actor=access.actor,
        reason="cancelled through the API",
    )
    return _detail(session, rt.settings, repo.record(session, task))


# Retry makes a new task rather than re-opening the old one: a terminal state stays terminal
# (the state machine has no way out of one, and alerts, metrics and the runs' attempt
# numbers rely on it), the old task's history stays as it ended, and the new one says
# where it comes from (`trigger.retry_of`, and its first transition's reason). It takes
# the same path as a trigger (policy gate, the one-open-task-per-kind index), so a retry
# cannot run what a trigger could not, nor twice.
RETRYABLE = (TaskState.FAILED, TaskState.CANCELLED, TaskState.SKIPPED)


@router.post(
    "/tasks/{task_id}/retry",
    response_model=TaskDetail,
    responses=errors.documented(
        notes={
            404: "no such task",
            409: "the task is open or succeeded, a later task of its kind exists on its "
            "table, the table is no longer managed, or the policy disables the kind",
        }
    ),
)
def retry_task(task_id: Id, rt: RuntimeDep, session: SessionDep, access: AccessDep) -> TaskDetail:
    """Run a failed, cancelled or skipped task again: a new task of the same kind on the
    same table (`trigger.retry_of` names the old one), planned afresh under the current
    policy. Only the latest task of its kind on its table can be retried. Operator."""
    _need_on_task(session, access, Role.operator, task_id)
    found = repo.task_with_table(session, task_id)
    if found is None:
        raise HTTPException(404, f"task {task_id} does not exist")
    old, row = found
    if old.state not in RETRYABLE:
        raise HTTPException(
            409,
            f"task {task_id} is {old.state}: only a failed, cancelled or skipped task can be "
            "retried"
            + (
                "; cancel it first, or let it end"
                if old.state in OPEN_TASK_STATES
                else f"; trigger {old.kind} to run it again"
            ),
        )
    if row.retired_at is not None:
        raise HTTPException(
            409, f"table {row.namespace}.{row.name} is no longer managed: register it again first"
        )
    later = repo.latest_task(session, old.table_id, old.kind)
    if later is not None and later.id != old.id:
        raise HTTPException(
            409,
            f"task {task_id} is not the latest {old.kind} task of {row.namespace}.{row.name}: "
            f"task {later.id} ({later.state}) came after it; retry that one instead",
        )
    return _ask_for(
        session,
        rt.settings,
        access,
        row,
        old.kind,
        {
            "source": "retry",
            "reason": f"retry of task {task_id} by {access.actor}",
            "retry_of": task_id,
        },
        # The same request again: an override the old task ran under is asked for again
        # (and, for a destructive kind, needs admin again).
        override_disabled=policy_gate.OVERRIDE_KEY in (old.trigger or {}),
        how_to_override="trigger it with override_disabled to run it once anyway",
    )
