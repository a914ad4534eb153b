"""Task repository: creation, the one guarded `transition()`, claims and reads.

Functions take a session and never commit: the caller owns the transaction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    String,
    Table,
    Text,
    TextClause,
    and_,
    bindparam,
    column,
    exists,
    func,
    insert,
    literal,
    null,
    select,
    text,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import Session, aliased
from sqlalchemy.sql.elements import ClauseElement
from sqlalchemy.sql.selectable import Select

from lakewarden.catalogs.regions import in_region_sql, task_in_region
from lakewarden.db.models import JobRun, ManagedTable, TableLastSuccess, Task, TaskTransition
from lakewarden.db.paging import Page, PageRequest, keyset_page
from lakewarden.leader import Fence, FencedOut, check_fence
from lakewarden.states import OPEN_TASK_STATES, TaskState, sql_in
from lakewarden.tasks.machine import can_transition, sources_of
from lakewarden.tasks.wakeup import CHANNEL, announce


class TransitionRejected(RuntimeError):
    """The task was not in a state the transition may start from (someone else moved it).
    `state` is the state it was found in; None when there is no such task."""

    def __init__(self, message: str, *, task_id: int, state: str | None) -> None:
        super().__init__(message)
        self.task_id = task_id
        self.state = state


@dataclass(frozen=True)
class TaskRecord:
    """A task as it is shown: with its table's namespace.name, every transition and run."""

    task: Task
    table: str
    history: list[TaskTransition]
    runs: list[JobRun]


# Open tasks hold a (table, kind) slot; the inference clause names the partial unique
# index's predicate as literals, which is how Postgres matches it to the index. No task of
# a kind held on the table (lakewarden.holds) is made, whichever path asks. One statement
# for any number of tasks (the arrays are the columns), and one for their first transitions.
_CREATE = text(
    f"""
    WITH created AS (
        INSERT INTO tasks (table_id, kind, state, priority, trigger, max_attempts, pool)
        SELECT u.table_id, u.kind, :pending, u.priority, u.trigger::jsonb, u.max_attempts,
               u.pool
        FROM unnest(CAST(:table_ids AS bigint[]), CAST(:kinds AS varchar[]),
                    CAST(:priorities AS integer[]), CAST(:triggers AS text[]),
                    CAST(:max_attempts AS integer[]), CAST(:pools AS varchar[]))
             WITH ORDINALITY AS u(table_id, kind, priority, trigger, max_attempts, pool, n)
        WHERE NOT EXISTS (SELECT 1 FROM kind_holds h
                          WHERE h.table_id = u.table_id AND h.kind = u.kind)
        ORDER BY u.n
        ON CONFLICT (table_id, kind) WHERE {sql_in("state", OPEN_TASK_STATES)}
        DO NOTHING
        RETURNING id, table_id, kind, trigger->>'reason' AS reason
    ), history AS (
        INSERT INTO task_transitions (task_id, from_state, to_state, actor, reason)
        SELECT id, NULL, :pending, :actor, reason FROM created
    )
    SELECT id, table_id, kind FROM created
    """
).bindparams(pending=TaskState.PENDING.value)


@dataclass(frozen=True)
class NewTask:
    """A task `create_tasks` is asked to open."""

    table_id: int
    kind: str
    trigger: dict[str, Any]
    priority: int = 0
    max_attempts: int = 3
    pool: str = "default"


def create_tasks(session: Session, tasks: Sequence[NewTask], *, actor: str) -> dict[int, int]:
    """Open every task of `tasks` whose (table, kind) has no open task yet and whose kind is
    not held on the table, each with its first transition, in one statement (a batch of
    commits' tasks costs one round trip). Returns {index in `tasks`: new id} for those
    opened. Two of `tasks` for one (table, kind): the first is opened."""
    if not tasks:
        return {}
    created = session.execute(
        _CREATE,
        {
            "actor": actor,
            "table_ids": [t.table_id for t in tasks],
            "kinds": [t.kind for t in tasks],
            "priorities": [t.priority for t in tasks],
            "triggers": [_json(t.trigger) for t in tasks],
            "max_attempts": [t.max_attempts for t in tasks],
            "pools": [t.pool for t in tasks],
        },
    ).all()
    if not created:
        return {}
    index = {(t.table_id, t.kind): i for i, t in reversed(list(enumerate(tasks)))}
    announce(session, TaskState.PENDING)  # a worker waiting for work wakes at commit
    return {index[(table_id, kind)]: task_id for task_id, table_id, kind in created}


def create_task(
    session: Session,
    *,
    table_id: int,
    kind: str,
    trigger: dict[str, Any],
    actor: str,
    priority: int = 0,
    max_attempts: int = 3,
    pool: str = "default",
) -> int | None:
    """Create an open task unless (table, kind) already has one or the kind is held on the
    table (`lakewarden.holds.hold_of` says which). Returns the new id or None."""
    new = NewTask(table_id, kind, trigger, priority, max_attempts, pool)
    return create_tasks(session, [new], actor=actor).get(0)


def find_open_task(session: Session, table_id: int, kind: str) -> Task | None:
    """The open task of `kind` on the table, if any (one at most: the partial unique index)."""
    return session.scalars(
        select(Task).where(
            Task.table_id == table_id,
            Task.kind == kind,
            Task.state.in_(OPEN_TASK_STATES),
        )
    ).one_or_none()


def task_with_table(session: Session, task_id: int) -> tuple[Task, ManagedTable] | None:
    """The task and its table's row, in one query; None if there is no such task."""
    found = session.execute(
        select(Task, ManagedTable)
        .join(ManagedTable, ManagedTable.id == Task.table_id)
        .where(Task.id == task_id)
    ).one_or_none()
    return None if found is None else (found[0], found[1])


def latest_task(session: Session, table_id: int, kind: str) -> Task | None:
    """The table's newest task of `kind`, in whatever state."""
    return session.scalars(
        select(Task)
        .where(Task.table_id == table_id, Task.kind == kind)
        .order_by(Task.id.desc())
        .limit(1)
    ).one_or_none()


def last_success_by_kind(
    session: Session, table_ids: Sequence[int]
) -> dict[int, dict[str, datetime]]:
    """When each of these tables last had a task of each kind succeed: {table id: {kind: at}}
    (the dashboard's overview and the per-table /metrics series). A kind that never
    succeeded on a table is absent."""
    out: dict[int, dict[str, datetime]] = {}
    if not table_ids:
        return out
    # Kept as tasks succeed (table_last_success, migration 0024): never the task history.
    rows = session.execute(
        select(TableLastSuccess.table_id, TableLastSuccess.kind, TableLastSuccess.at).where(
            TableLastSuccess.table_id.in_(table_ids)
        )
    )
    for table_id, kind, at in rows:
        out.setdefault(table_id, {})[kind] = at
    return out


def transition(
    session: Session,
    task_id: int,
    to: str,
    *,
    actor: str,
    expected: tuple[str, ...] | None = None,
    reason: str | None = None,
    fence: Fence | None = None,
    held_by: str | None = None,
    **fields: Any,
) -> Task:
    """Move a task to `to`, only from `expected` states (default: every allowed source).

    Guarded in SQL: the row is locked, its state checked against the allowed
    transitions, `held_by` (when given) must still hold it, and a leader's
    `fence` must still be current. Appends the transition to the history.
    """
    return _move(session, task_id, to, actor, expected, reason, fence, held_by, False, fields)


def hand_over(
    session: Session,
    task_id: int,
    state: str,
    *,
    from_holder: str,
    to_holder: str,
    actor: str,
    reason: str,
    fence: Fence | None = None,
) -> Task:
    """`transition`'s guards for a task that stays in `state` and changes hands (a new
    leader takes over a running job): recorded as state -> state; the task keeps its reason
    (the history has this one)."""
    fields = {"holder": to_holder, "heartbeat_at": func.now()}
    return _move(session, task_id, state, actor, (state,), reason, fence, from_holder, True, fields)


def _move(
    session: Session,
    task_id: int,
    to: str,
    actor: str,
    expected: tuple[str, ...] | None,
    reason: str | None,
    fence: Fence | None,
    held_by: str | None,
    hand_over: bool,
    fields: dict[str, Any],
) -> Task:
    return _moves(
        session, {task_id: reason}, to, actor, expected, fence, held_by, hand_over, fields
    )[0]


def transition_each(
    session: Session,
    reasons: Mapping[int, str | None],
    to: str,
    *,
    actor: str,
    expected: tuple[str, ...] | None = None,
    fence: Fence | None = None,
    held_by: str | None = None,
    **fields: Any,
) -> list[Task]:
    """`transition` for several tasks at once, each with its own reason (the scheduler's
    dispatch of a batch, a worker's release of its claimed batch): one statement, all
    guarded as one. Raises TransitionRejected,
    naming the first task that may not move (the caller's transaction then rolls back:
    none moved); FencedOut as `transition`. `fields` may be column expressions
    (`Task.attempt + 1`)."""
    if not reasons:
        return []
    return _moves(session, reasons, to, actor, expected, fence, held_by, False, fields)


def _moves(
    session: Session,
    reasons: Mapping[int, str | None],
    to: str,
    actor: str,
    expected: tuple[str, ...] | None,
    fence: Fence | None,
    held_by: str | None,
    hand_over: bool,
    fields: dict[str, Any],
) -> list[Task]:
    """The guarded move of `transition`, `hand_over` and `transition_each`, in ONE
    statement: the fence checked (the lease row key-shared, as `check_fence`), the rows
    locked in id order, each state (and holder) checked, the rows updated, the history
    appended with the state each row had when locked, the NOTIFY sent. The old state is
    the locked row's own (never the statement's snapshot, which a concurrent move can have
    passed). The update does not compare the row's state again: the row it scans is the
    snapshot's, which a move that committed while we waited for the lock left behind
    (Postgres re-reads the newest version only for a row that passed the WHERE); the
    locked row, ours until commit, is the one judged."""
    allowed = tuple(
        s for s in (expected or sources_of(to)) if can_transition(s, to) or (hand_over and s == to)
    )
    region = fence.region if fence is not None else None
    params: dict[str, Any] = {
        "ids": list(reasons),
        "reasons": list(reasons.values()),
        "actor": actor,
        "held_by": held_by,
        "epoch": fence.epoch if fence else None,
        "lease": fence.lease if fence else None,
        "lease_holder": fence.holder if fence else None,
    }
    # Building the statement costs more CPU than running it (B35): it is built once per
    # shape and kept; every value is bound. A field given as a SQL expression
    # (`Task.attempt + 1`) is part of the shape, by its cache key and bound values.
    # None is SQL NULL, as `.values(plan=None)` makes it (a bound None would be JSON null).
    fields = {k: null() if v is None else v for k, v in fields.items()}
    shape: list[tuple[str, Any]] = []
    for name, value in sorted(fields.items()):
        if isinstance(value, ClauseElement):
            shape.append((name, _expression_key(value)))
        else:
            shape.append((name, None))
            params[f"set_{name}"] = value
    key = (
        to,
        allowed,
        held_by is not None,
        fence is not None,
        region,
        hand_over,
        tuple(shape),
    )
    stmt = _STATEMENTS.get(key)
    if stmt is None:
        stmt = _move_statement(*key, expressions=fields)
        shared = all(k is None or k[0] is not _UNSHARED for _, k in shape)
        if shared and len(_STATEMENTS) < 512:
            _STATEMENTS[key] = stmt
    found = session.execute(stmt, params, execution_options={"populate_existing": True}).all()
    if fence is not None and not found:
        check_fence(session, fence)  # no such task: say so, unless we are fenced out
    elif fence is not None and not found[0].fence_ok:
        raise FencedOut(f"{fence.holder} no longer holds lease {fence.lease!r} epoch {fence.epoch}")
    by_id = {f.locked_id: f for f in found}
    for task_id in reasons:
        f = by_id.get(task_id)
        if f is None:
            elsewhere = region is not None and session.get(Task, task_id) is not None
            raise TransitionRejected(
                f"task {task_id} is not in region {region!r}, which {fence and fence.holder} leads"
                if elsewhere
                else f"task {task_id} does not exist",
                task_id=task_id,
                state=None,
            )
        if f[-1] is not None:
            continue
        if f.locked_state not in allowed:
            raise TransitionRejected(
                f"task {task_id} is {f.locked_state}, cannot move to {to}",
                task_id=task_id,
                state=f.locked_state,
            )
        raise TransitionRejected(
            f"task {task_id} is held by {f.locked_holder}, not {held_by}",
            task_id=task_id,
            state=f.locked_state,
        )
    return [by_id[task_id][-1] for task_id in reasons]


def _expression_key(value: ClauseElement) -> tuple[Any, ...]:
    """A field's SQL expression as part of a statement's shape: its structure and the
    values bound in it; its identity (never shared: built each time) when they cannot be
    a key."""
    ck = value._generate_cache_key()
    try:
        bound = tuple(b.effective_value for b in ck.bindparams) if ck is not None else None
        hash(bound)
    except TypeError:
        bound = None
    if ck is None or bound is None:
        return (_UNSHARED, id(value))
    return (ck.key, bound)


# Each shape's statement, built once (`_moves`); a bound on their number, not an eviction:
# the shapes are the call sites' (to, guards, fields), a few dozen.
_STATEMENTS: dict[tuple[Any, ...], Select[Any]] = {}
_UNSHARED = object()  # a shape's mark: its expression cannot be a key, nor its statement kept


def _move_statement(
    to: str,
    allowed: tuple[str, ...],
    holder_guard: bool,
    fenced_by_lease: bool,
    region: str | None,
    hand_over: bool,
    shape: tuple[tuple[str, Any], ...],
    *,
    expressions: Mapping[str, Any],
) -> Select[Any]:
    t = cast(Table, Task.__table__)
    # The ids and reasons as bound arrays (zipped by two unnests).
    wanted = select(
        func.unnest(bindparam("ids", type_=ARRAY(BigInteger))).label("id"),
        func.unnest(bindparam("reasons", type_=ARRAY(Text))).label("reason"),
    ).cte("wanted")
    in_scope = select(t.c.id, t.c.state, t.c.holder).where(
        t.c.id == func.any(bindparam("ids", type_=ARRAY(BigInteger)))
    )
    if region is not None:  # a region's leader moves only its region's tasks
        in_scope = in_scope.where(task_in_region(region))
    locked = in_scope.order_by(t.c.id).with_for_update().cte("locked")
    guards: list[ColumnElement[bool]] = [
        t.c.id == locked.c.id,
        wanted.c.id == locked.c.id,
        locked.c.state.in_(allowed),
    ]
    if holder_guard:
        guards.append(locked.c.holder == bindparam("held_by", type_=String))
    fenced = None
    if fenced_by_lease:
        fenced = (
            select(literal(1).label("ok"))
            .select_from(text("leader_lease"))
            .where(
                column("name") == bindparam("lease", type_=String),
                column("holder") == bindparam("lease_holder", type_=String),
                column("epoch") == bindparam("epoch", type_=BigInteger),
                column("expires_at") > func.now(),
            )
            .with_for_update(key_share=True)
            .cte("fenced")
        )
        guards.append(exists(select(fenced.c.ok)))
    sets: dict[str, Any] = {"state": to, "updated_at": func.now()}
    for name, expression_key in shape:
        sets[name] = (
            expressions[name]
            if expression_key is not None
            else bindparam(f"set_{name}", type_=t.c[name].type)
        )
    if not hand_over:
        # The task keeps the latest reason (why it was skipped, failed, retried...); the
        # history keeps them all.
        sets["reason"] = func.coalesce(wanted.c.reason, t.c.reason)
    moved = (
        update(t)
        .where(*guards)
        .values(sets)
        .returning(*t.c, locked.c.state.label("from_state"), wanted.c.reason.label("why"))
        .cte("moved")
    )
    history = (
        insert(cast(Table, TaskTransition.__table__))
        .from_select(
            ["task_id", "from_state", "to_state", "actor", "reason", "leader_epoch"],
            select(
                moved.c.id,
                moved.c.from_state,
                literal(to, String),
                bindparam("actor", type_=String),
                moved.c.why,
                bindparam("epoch", type_=BigInteger),
            ),
        )
        .cte("history")
    )
    checks: list[Any] = [
        locked.c.id.label("locked_id"),
        locked.c.state.label("locked_state"),
        locked.c.holder.label("locked_holder"),
    ]
    if fenced is not None:
        checks.append(exists(select(fenced.c.ok)).label("fence_ok"))
    if to in (TaskState.PENDING, TaskState.PLANNED):
        # the worker (pending) or scheduler (planned) wakes at commit (`wakeup.announce`)
        notified = (
            select(func.pg_notify(CHANNEL, str(to)).label("n")).select_from(moved).cte("notified")
        )
        checks.append(select(func.count()).select_from(notified).scalar_subquery().label("notes"))
    row = aliased(Task, moved)
    stmt = (
        select(*checks, row)
        .select_from(locked)
        .outerjoin(moved, moved.c.id == locked.c.id)
        .add_cte(history)
        .order_by(locked.c.id)
    )
    return stmt


def transition_all(
    session: Session,
    where: ColumnElement[bool],
    to: str,
    *,
    actor: str,
    expected: tuple[str, ...] | None = None,
    reason: str | None = None,
    fence: Fence | None = None,
    **fields: Any,
) -> list[int]:
    """`transition` for every task matching `where` that may move to `to` (from `expected`,
    default every allowed source), in a few statements: the rows locked in id order (two
    callers never deadlock), moved together, each move appended to its task's history.
    A task in another state is left as it is. Returns the ids moved, in order."""
    if fence is not None:
        check_fence(session, fence)
        if fence.region is not None:  # a region's leader moves only its region's tasks
            where = and_(where, task_in_region(fence.region))
    sources = [s for s in (expected or sources_of(to)) if can_transition(s, to)]
    found = session.execute(
        select(Task.id, Task.state)
        .where(where, Task.state.in_(sources))
        .order_by(Task.id)
        .with_for_update()
    ).all()
    if not found:
        return []
    ids = [task_id for task_id, _ in found]
    session.execute(
        update(Task)
        .where(Task.id.in_(ids))
        .values(state=to, updated_at=func.now(), **({"reason": reason} if reason else {}), **fields)
    )
    session.add_all(
        TaskTransition(
            task_id=task_id,
            from_state=src,
            to_state=to,
            actor=actor,
            reason=reason,
            leader_epoch=fence.epoch if fence else None,
        )
        for task_id, src in found
    )
    if to in (TaskState.PENDING, TaskState.PLANNED):
        announce(session, to)
    session.flush()
    return ids


# The state tests are literals, so the planner can use the claimable rows' partial index.
def _claim(region_sql: str) -> TextClause:
    return text(
        f"""
    WITH next AS (
        SELECT id, state FROM tasks
        WHERE {sql_in("state", TaskState.PENDING)} AND not_before <= now() AND {region_sql}
        ORDER BY priority DESC, id
        FOR UPDATE SKIP LOCKED
        LIMIT :limit
    ), claimed AS (
        UPDATE tasks t SET state = :planning, holder = :me, heartbeat_at = now(),
                           updated_at = now()
        FROM next WHERE t.id = next.id
        RETURNING t.*
    ), history AS (
        INSERT INTO task_transitions (task_id, from_state, to_state, actor, reason)
        SELECT id, :pending, :planning, :me, 'claimed for planning' FROM claimed
    )
    SELECT * FROM claimed
    """
    ).bindparams(pending=TaskState.PENDING.value, planning=TaskState.PLANNING.value)


# Any region's task, or only one region's (the SQL twin of `task_in_region`): two
# statements rather than a `:region IS NULL OR …`, so an unpinned worker's claim has no
# per-row region lookup at all.
_CLAIM = _claim("true")
_CLAIM_IN_REGION = _claim(in_region_sql("table_id"))


def claim_for_planning(session: Session, worker_id: str, region: str | None = None) -> Task | None:
    """Claim the most urgent pending task in one statement (FOR UPDATE SKIP LOCKED), which
    returns the claimed row too. `region`: only a task of that region's tables (a worker
    pinned to its data center, `Settings.pinned_region`); None: any region's."""
    claimed = claim_batch_for_planning(session, worker_id, region, 1)
    return claimed[0] if claimed else None


def claim_batch_for_planning(
    session: Session, worker_id: str, region: str | None = None, limit: int = 1
) -> list[Task]:
    """`claim_for_planning` for up to `limit` tasks in the one statement, most urgent
    first: a worker's round trips per task when a backlog waits (B35)."""
    stmt, params = _CLAIM, {"me": worker_id, "limit": limit}
    if region is not None:
        stmt, params = _CLAIM_IN_REGION, {**params, "region": region}
    claimed = session.scalars(
        select(Task).from_statement(stmt),
        params,
        execution_options={"populate_existing": True},
    ).all()
    return sorted(claimed, key=lambda t: (-t.priority, t.id))


def _next_pending_due(region_sql: str) -> TextClause:
    return text(
        f"""
    SELECT extract(epoch FROM min(not_before) - now()) FROM tasks
    WHERE {sql_in("state", TaskState.PENDING)} AND not_before > now() AND {region_sql}
    """
    )


_NEXT_PENDING_DUE = _next_pending_due("true")
_NEXT_PENDING_DUE_IN_REGION = _next_pending_due(in_region_sql("table_id"))


def next_pending_due_in(session: Session, region: str | None = None) -> float | None:
    """Seconds until the earliest pending task waiting out a backoff becomes claimable (of
    `region`'s tables only, as `claim_for_planning`)."""
    if region is None:
        due = session.execute(_NEXT_PENDING_DUE).scalar()
    else:
        due = session.execute(_NEXT_PENDING_DUE_IN_REGION, {"region": region}).scalar()
    return None if due is None else float(due)


def history(session: Session, task_id: int) -> list[TaskTransition]:
    return list(
        session.scalars(
            select(TaskTransition)
            .where(TaskTransition.task_id == task_id)
            .order_by(TaskTransition.id)
        )
    )


# A task's table, as namespace.name.
_TABLE_NAME = (ManagedTable.namespace + "." + ManagedTable.name).label("table")


def list_tasks(
    session: Session,
    page: PageRequest,
    *,
    table_id: int | None = None,
    state: str | None = None,
    kind: str | None = None,
    where: ColumnElement[bool] | None = None,
) -> Page[tuple[Task, str]]:
    """Tasks, newest first, each with its table's namespace.name; optionally only those of
    one table, in one state, of one kind, matching `where` (on Task or ManagedTable)."""
    q = select(Task, _TABLE_NAME).join(ManagedTable, ManagedTable.id == Task.table_id)
    if where is not None:
        q = q.where(where)
    if table_id is not None:
        q = q.where(Task.table_id == table_id)
    if state is not None:
        q = q.where(Task.state == state)
    if kind is not None:
        q = q.where(Task.kind == kind)
    return keyset_page(session, q, Task.id, page)


def get_task(session: Session, task_id: int) -> TaskRecord | None:
    """The task with its table's name, history and runs; None if there is no such task."""
    task = session.get(Task, task_id)
    return None if task is None else record(session, task)


def record(session: Session, task: Task) -> TaskRecord:
    table = session.scalars(select(_TABLE_NAME).where(ManagedTable.id == task.table_id)).one()
    runs = session.scalars(select(JobRun).where(JobRun.task_id == task.id).order_by(JobRun.attempt))
    return TaskRecord(task=task, table=table, history=history(session, task.id), runs=list(runs))


def _json(value: dict[str, Any]) -> str:
    import json

    return json.dumps(value, default=str)


def scope_of_task(session: Session, task_id: int) -> tuple[str, str] | None:
    """The (catalog, namespace) of the task's table; None if there is no such task."""
    row = session.execute(
        select(ManagedTable.catalog, ManagedTable.namespace)
        .join(Task, Task.table_id == ManagedTable.id)
        .where(Task.id == task_id)
    ).one_or_none()
    return None if row is None else (row[0], row[1])
