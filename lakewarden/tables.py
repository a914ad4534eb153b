"""Managed tables and namespace defaults: register, look up, list, change policy,
unregister; and what keeps jobs off them (table_blockers): a writer's blocker (one table,
for a while), an operator's pause (one table, until resumed) and the global freeze (every
table, until unfrozen). Dispatch starts no job on a table any of them holds (the
scheduler's `_NEXT_PLANNED` says the same in SQL); a job already running finishes, and
tasks are still created and planned, so explain and the task list show what would run.

Unregistering retires the row (`retired_at`) and keeps its history: events, tasks,
policy versions, blockers; `retire_tables` is the one way, whoever retires (an operator,
a rule removed, an opt-out, a table dropped from its catalog). Lookups and every
background loop see live rows only; registering the table again revives the row and
continues that history.

A table stores only the policy settings given for it; the effective policy layers
them over its namespace's defaults over the built-in defaults.

Concurrency: every write here is safe against a concurrent one. Registration is an
INSERT … ON CONFLICT DO NOTHING, else an UPDATE that revives a retired row (the loser of
either gets `AlreadyManaged`); unregistration is an UPDATE guarded on `retired_at`; a
policy version is bumped by the database in the UPDATE / upsert that stores the policy,
so versions are unique and gapless per table and per namespace. Because a table's
effective policy depends on its namespace's defaults, a change to the defaults and a
change to one of the namespace's tables must not be checked against each other's old
state: callers take `lock_namespace` (exclusive to change the defaults, shared to change
or register a table) before they read what they validate.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import (
    ColumnElement,
    Select,
    and_,
    delete,
    exists,
    func,
    literal,
    or_,
    select,
    true,
    tuple_,
    update,
)
from sqlalchemy.dialects.postgresql import JSONB, insert
from sqlalchemy.orm import Session, aliased

from lakewarden.auth.grants import glob_to_like
from lakewarden.catalogs.catalog import TableRef
from lakewarden.catalogs.regions import in_region
from lakewarden.db.locks import DBLocks, xact_lock
from lakewarden.db.models import (
    ManagedTable,
    NamespacePolicy,
    PolicyVersion,
    TableBlocker,
    Task,
)
from lakewarden.db.paging import DEFAULT_LIMIT, keyset_page_by
from lakewarden.policy.model import Policy, effective_policy
from lakewarden.states import FINISHED_TASK_STATES, OPEN_TASK_STATES, TaskState
from lakewarden.tasks.repo import transition_all
from lakewarden.tasks.wakeup import announce


class AlreadyManaged(Exception):
    """The table is managed already (possibly registered a moment ago by someone else)."""


class TableGone(LookupError):
    """The table was unregistered while the request was working on it."""


# A row that is managed now (not retired by an unregistration).
LIVE = ManagedTable.retired_at.is_(None)
# The tables the Iceberg-only loops take (health measurement and publish; the sweep and
# readiness take every format: kinds.formats.runs_on, readiness_logs): a Hudi or Delta
# table's health is its own (`GET …/hudi`, `…/delta`).
ICEBERG = ManagedTable.format == "iceberg"


def naming_section(
    session: Session, section: str, *, every_format: bool = False, region: str | None = None
) -> list[tuple[int, str]]:
    """(id, namespace.name) of the live Iceberg tables (`every_format`: of any format)
    whose own settings, or whose namespace's defaults, name a policy `section` (readiness,
    publish): the leader's rounds for a section off by default read only these (a region's
    leader: its `region`'s only)."""
    named = ManagedTable.policy.has_key(section)
    by_namespace = exists().where(
        NamespacePolicy.catalog == ManagedTable.catalog,
        NamespacePolicy.namespace == ManagedTable.namespace,
        NamespacePolicy.policy.has_key(section),
    )
    rows = session.execute(
        select(ManagedTable.id, ManagedTable.namespace, ManagedTable.name)
        .where(LIVE, or_(named, by_namespace), in_region(region))
        .where(true() if every_format else ICEBERG)
        .order_by(ManagedTable.id)
    ).all()
    return [(r.id, f"{r.namespace}.{r.name}") for r in rows]


def lock_namespace(session: Session, catalog: str, namespace: str, *, exclusive: bool) -> None:
    """Serialize policy changes of a namespace against those of its tables, until the
    transaction ends: exclusive to change the namespace's defaults, shared to change or
    register one of its tables (those do not wait for each other)."""
    xact_lock(session, DBLocks.NAMESPACE_POLICY, f"{catalog}.{namespace}", shared=not exclusive)


def get_table(
    session: Session, catalog: str, ref: TableRef, *, include_retired: bool = False
) -> ManagedTable | None:
    """The managed table; with `include_retired`, also an unregistered one (its history)."""
    query = select(ManagedTable).where(
        ManagedTable.catalog == catalog,
        ManagedTable.namespace == ref.namespace,
        ManagedTable.name == ref.name,
    )
    return session.scalars(query if include_retired else query.where(LIVE)).one_or_none()


def get_tables(
    session: Session, catalog: str, refs: Iterable[TableRef]
) -> dict[TableRef, ManagedTable]:
    """The managed (live) tables of `refs` in the catalog, in one query; those not managed
    are absent."""
    wanted = [(ref.namespace, ref.name) for ref in refs]
    if not wanted:
        return {}
    rows = session.scalars(
        select(ManagedTable).where(
            ManagedTable.catalog == catalog,
            LIVE,
            tuple_(ManagedTable.namespace, ManagedTable.name).in_(wanted),
        )
    )
    return {TableRef(r.namespace, r.name): r for r in rows}


TableSort = Literal["registered", "health"]
TABLE_SORTS: tuple[TableSort, ...] = ("registered", "health")
# The keys a page's `next_key` holds per sort: (id,), and (health_score or None, id).
SORT_KEYS: dict[TableSort, int] = {"registered": 1, "health": 2}


@dataclass(frozen=True)
class TableQuery:
    """One page of managed tables: which (every filter given must hold), in which order.

    - `registered`: in the order they were registered (by id); `health`: worst first, by
      health score ascending, the never measured last, then by id (ORDER BY health_score
      NULLS LAST, id: the index ix_managed_tables_live_health serves it).
    - `after`: the previous page's `next_key`, of the same sort.
    - `namespace_glob`: `*` matches any run of characters (dots too), `?` one character.
    - `health_below`: a measured score below it (never measured tables do not match).
    - `has_failed_tasks`: for some kind, the table's latest finished task (succeeded,
      skipped or failed; cancelled and open ones do not count) failed, i.e. a failure that
      no later task of that kind has yet run past.
    - `kind_enabled`: the effective policy enables the kind, read from the stored JSON
      like `effective_policy` (the table's setting, else its namespace's, else the
      built-in default); a stored policy that no longer validates is judged the same way.
    """

    limit: int = DEFAULT_LIMIT
    sort: TableSort = "registered"
    after: tuple[int | None, ...] | None = None
    catalog: str | None = None
    namespace_glob: str | None = None
    health_below: int | None = None
    has_open_tasks: bool | None = None
    has_failed_tasks: bool | None = None
    kind_enabled: str | None = None


@dataclass(frozen=True)
class TableListing:
    items: list[ManagedTable]
    next_key: tuple[int | None, ...] | None  # pass as `after` (same sort) for the next page
    total: int  # the tables matching, on every page


def _json(value: bool) -> ColumnElement[Any]:
    return literal(value, JSONB)


def kind_enabled(kind: str) -> ColumnElement[bool]:
    """SQL: the table's effective policy enables `kind` (see `TableQuery`): its own
    `enabled` if set, else its namespace's, else the built-in default. The namespaces are
    read as uncorrelated IN lists (hashed once per query), not looked up row by row."""
    default = Policy().for_kind(kind).enabled  # KeyError for an unknown kind
    own = ManagedTable.policy[kind]["enabled"]
    said = NamespacePolicy.policy[kind]["enabled"]
    scope = tuple_(ManagedTable.catalog, ManagedTable.namespace)
    namespaces = select(NamespacePolicy.catalog, NamespacePolicy.namespace)
    if default:  # unless the namespace says something other than true
        inherited = scope.not_in(namespaces.where(said.is_not(None), said != _json(True)))
    else:  # only if the namespace says true
        inherited = scope.in_(namespaces.where(said == _json(True)))
    return or_(own == _json(True), and_(own.is_(None), inherited))


def has_open_tasks() -> ColumnElement[bool]:
    return exists().where(Task.table_id == ManagedTable.id, Task.state.in_(OPEN_TASK_STATES))


def has_failed_tasks() -> ColumnElement[bool]:
    """SQL: some kind's latest finished task of the table failed (see `TableQuery`). Read
    from the failed tasks (ix_tasks_state), each compared with the latest finished task of
    its table and kind (ix_tasks_table_id): no pass over every task."""
    failed, last = aliased(Task), aliased(Task)
    latest_finished = (
        select(func.max(last.id))
        .where(
            last.table_id == failed.table_id,
            last.kind == failed.kind,
            last.state.in_(FINISHED_TASK_STATES),
        )
        .scalar_subquery()
    )
    return exists().where(
        failed.table_id == ManagedTable.id,
        failed.state == TaskState.FAILED,
        failed.id == latest_finished,
    )


def table_conditions(q: TableQuery) -> list[ColumnElement[bool]]:
    """The WHERE of a listing: live, and each filter of `q` that is set."""
    conds: list[ColumnElement[bool]] = [LIVE]
    if q.catalog is not None:
        conds.append(ManagedTable.catalog == q.catalog)
    if q.namespace_glob is not None:
        conds.append(ManagedTable.namespace.like(glob_to_like(q.namespace_glob), escape="\\"))
    if q.health_below is not None:
        conds.append(ManagedTable.health_score < q.health_below)
    for wanted, cond in (
        (q.has_open_tasks, has_open_tasks),
        (q.has_failed_tasks, has_failed_tasks),
    ):
        if wanted is not None:
            conds.append(cond() if wanted else ~cond())
    if q.kind_enabled is not None:
        conds.append(kind_enabled(q.kind_enabled))
    return conds


def list_tables(
    session: Session, q: TableQuery, *, where: ColumnElement[bool] | None = None
) -> TableListing:
    """A page of the managed tables matching `q` (and `where`, e.g. a caller's scope), in
    `q.sort`'s order, keyset-paged, with the count of all that match (one more query,
    with the same WHERE)."""
    conds = table_conditions(q) + ([where] if where is not None else [])
    query = select(ManagedTable).where(*conds)
    if q.sort == "health":
        items, next_key = _worst_first(session, query, q.limit, q.after)
    else:
        after = None if q.after is None else (_id_of(q.after),)
        page = keyset_page_by(session, query, (ManagedTable.id,), q.limit, after)
        items, next_key = page.items, page.next_key
    total = session.scalar(select(func.count()).select_from(ManagedTable).where(*conds))
    return TableListing(items=items, next_key=next_key, total=total or 0)


def _id_of(key: tuple[int | None, ...]) -> int:
    last = key[-1]
    if last is None:
        raise ValueError("a page key ends with the id")
    return last


def _worst_first(
    session: Session, query: Select[ManagedTable], limit: int, after: tuple[int | None, ...] | None
) -> tuple[list[ManagedTable], tuple[int | None, ...] | None]:
    """A page by (health_score, id), the never measured (NULL) last. A row comparison
    cannot pass NULLs, so the measured rows are one keyset range and the unmeasured another
    (by id); a page that crosses from one to the other reads both, each from the index."""
    score = ManagedTable.health_score
    items: list[ManagedTable] = []
    if after is None or after[0] is not None:
        key = None if after is None else (after[0], _id_of(after))
        page = keyset_page_by(
            session, query.where(score.is_not(None)), (score, ManagedTable.id), limit, key
        )
        if page.next_key is not None:
            return page.items, page.next_key
        items, after_id = page.items, None
    else:
        after_id = _id_of(after)
    room = limit - len(items)
    unmeasured = query.where(score.is_(None))
    if room == 0:  # the measured rows filled the page exactly: more only if unmeasured follow
        more = session.scalar(select(unmeasured.exists()))
        last = items[-1]
        return items, (last.health_score, last.id) if more else None
    tail = keyset_page_by(
        session, unmeasured, (ManagedTable.id,), room, None if after_id is None else (after_id,)
    )
    next_key = None if tail.next_key is None else (None, tail.next_key[0])
    return items + tail.items, next_key


def tables_in_namespace(session: Session, catalog: str, namespace: str) -> list[ManagedTable]:
    return list(
        session.scalars(
            select(ManagedTable)
            .where(ManagedTable.catalog == catalog, ManagedTable.namespace == namespace, LIVE)
            .order_by(ManagedTable.id)
        )
    )


def lock_table(session: Session, row: ManagedTable) -> ManagedTable | None:
    """Lock the table's row until the transaction ends (SELECT … FOR UPDATE) and reload it;
    None if it was unregistered meanwhile."""
    return session.scalars(
        select(ManagedTable)
        .where(ManagedTable.id == row.id, LIVE)
        .with_for_update()
        .execution_options(populate_existing=True)
    ).one_or_none()


def add_table(
    session: Session,
    catalog: str,
    ref: TableRef,
    overrides: dict[str, Any],
    *,
    author: str | None = None,
    format: str = "iceberg",
) -> ManagedTable:
    """Register the table with policy version 1, or, if it was unregistered, revive its row
    with the next policy version (its events, tasks and versions continue). Raises
    `AlreadyManaged` if it is managed, also when a concurrent registration won (ON
    CONFLICT, and the revival's UPDATE, wait for it to commit)."""
    new_id = session.execute(
        insert(ManagedTable)
        .values(
            catalog=catalog, namespace=ref.namespace, name=ref.name, policy=overrides, format=format
        )
        .on_conflict_do_nothing(
            index_elements=[ManagedTable.catalog, ManagedTable.namespace, ManagedTable.name]
        )
        .returning(ManagedTable.id, ManagedTable.policy_version)
    ).one_or_none()
    if new_id is None:
        # Rows are never deleted, so the conflicting row is still there: revive it unless
        # it is live (the WHERE is checked again after a concurrent revival commits).
        new_id = session.execute(
            update(ManagedTable)
            .where(
                ManagedTable.catalog == catalog,
                ManagedTable.namespace == ref.namespace,
                ManagedTable.name == ref.name,
                ManagedTable.retired_at.is_not(None),
            )
            .values(
                retired_at=None,
                # registered explicitly now: whatever retired it (a drop, an opt-out,
                # another optimizer) the owner has overruled
                retired_reason=None,
                opt_out=False,
                managed_by="api",
                policy=overrides,
                policy_version=ManagedTable.policy_version + 1,
                # measured under the old policy, before the unmanaged gap: measure again
                health_score=None,
                health_signals=None,
                health_measured_at=None,
                unhealthy_since=None,
                updated_at=func.now(),
            )
            .returning(ManagedTable.id, ManagedTable.policy_version)
            .execution_options(synchronize_session=False)
        ).one_or_none()
    if new_id is None:
        raise AlreadyManaged(f"table {ref.dotted} is already managed")
    table_id, version = new_id
    session.add(PolicyVersion(table_id=table_id, version=version, policy=overrides, author=author))
    session.flush()
    row = session.get(ManagedTable, table_id, populate_existing=True)
    assert row is not None
    return row


def set_policy(
    session: Session,
    row: ManagedTable,
    overrides: dict[str, Any],
    *,
    author: str | None = None,
) -> ManagedTable:
    """Replace the table's own settings, keeping the old ones as a version. The version is
    bumped by the UPDATE itself (which waits for a concurrent one to commit), so two
    changes never get the same number. Raises `TableGone` if the table was unregistered."""
    version = session.execute(
        update(ManagedTable)
        .where(ManagedTable.id == row.id, LIVE)
        .values(
            policy=overrides,
            policy_version=ManagedTable.policy_version + 1,
            updated_at=func.now(),
        )
        .returning(ManagedTable.policy_version)
        .execution_options(synchronize_session=False)
    ).scalar_one_or_none()
    if version is None:
        raise TableGone(f"table {row.namespace}.{row.name} is no longer managed")
    session.add(PolicyVersion(table_id=row.id, version=version, policy=overrides, author=author))
    session.flush()
    session.refresh(row)
    return row


def remove_table(session: Session, row: ManagedTable, *, by: str) -> bool:
    """Unregister the table (`retire_tables`, with no reason: someone asked). False if it
    was unregistered already (a concurrent unregistration won)."""
    retired, _ = retire_tables(
        session, [row.id], reason=None, by=by, tasks_reason=f"table unregistered by {by}"
    )
    if not retired:
        return False
    session.refresh(row)
    return True


def retire_tables(
    session: Session,
    table_ids: Iterable[int],
    *,
    reason: str | None,
    by: str,
    tasks_reason: str | None = None,
) -> tuple[list[int], list[int]]:
    """The one way tables stop being managed: retire those of `table_ids` that are live
    (with `reason`: dropped, opted out, their rule removed...), keeping their events,
    tasks, policy versions and blockers, and cancel their open tasks (`tasks_reason`,
    default "table retired: <reason>"; a running job is then cancelled by the scheduler).
    Returns the ids retired (one retired meanwhile by a concurrent change is left as that
    change left it) and the ids of the tasks cancelled."""
    ids = sorted(set(table_ids))
    if not ids:
        return [], []
    retired = sorted(
        session.execute(
            update(ManagedTable)
            .where(ManagedTable.id.in_(ids), LIVE)
            .values(
                retired_at=func.now(),
                updated_at=func.now(),
                **({"retired_reason": reason} if reason is not None else {}),
            )
            .returning(ManagedTable.id)
            .execution_options(synchronize_session=False)
        ).scalars()
    )
    # The row locks taken above make ingests of the tables wait and then find them retired,
    # so they create no new task; one made by a loop that read a row earlier is cancelled
    # by `policy_gate.judge` when a worker or the scheduler reaches it.
    cancelled = cancel_open_tasks(
        session, retired, by=by, reason=tasks_reason or f"table retired: {reason}"
    )
    return retired, cancelled


def cancel_open_tasks(
    session: Session, table_ids: Iterable[int], *, by: str, reason: str
) -> list[int]:
    """Cancel every open task of the tables (`transition_all`: every open state may move
    to cancelled; a running job is then cancelled by the scheduler). Returns their ids."""
    ids = sorted(set(table_ids))
    if not ids:
        return []
    return transition_all(
        session,
        Task.table_id.in_(ids),
        TaskState.CANCELLED,
        actor=by,
        expected=OPEN_TASK_STATES,
        reason=reason,
    )


def namespace_defaults(session: Session, catalog: str, namespace: str) -> NamespacePolicy | None:
    return session.get(NamespacePolicy, (catalog, namespace))


def namespaces_defaults(
    session: Session, rows: Iterable[ManagedTable]
) -> dict[tuple[str, str], dict[str, Any]]:
    """The defaults of the rows' namespaces in one query: (catalog, namespace) -> policy,
    for those namespaces that have defaults."""
    pairs = {(row.catalog, row.namespace) for row in rows}
    if not pairs:
        return {}
    found = session.execute(
        select(NamespacePolicy.catalog, NamespacePolicy.namespace, NamespacePolicy.policy).where(
            tuple_(NamespacePolicy.catalog, NamespacePolicy.namespace).in_(sorted(pairs))
        )
    )
    return {(catalog, namespace): policy for catalog, namespace, policy in found}


def set_namespace_defaults(
    session: Session, catalog: str, namespace: str, defaults: dict[str, Any]
) -> NamespacePolicy:
    """Create or replace the namespace's defaults in one upsert: version 1 when new, else
    the stored version + 1, so concurrent changes never share a version number."""
    stmt = insert(NamespacePolicy).values(catalog=catalog, namespace=namespace, policy=defaults)
    upsert = stmt.on_conflict_do_update(
        index_elements=[NamespacePolicy.catalog, NamespacePolicy.namespace],
        set_={
            "policy": stmt.excluded.policy,
            "version": NamespacePolicy.version + 1,
            "updated_at": func.now(),
        },
    ).returning(NamespacePolicy)
    return session.scalars(upsert, execution_options={"populate_existing": True}).one()


def effective_policy_for(
    session: Session, row: ManagedTable, overrides: dict[str, Any] | None = None
) -> Policy:
    """The policy in force: the table's settings (or `overrides`) over its namespace's."""
    ns = namespace_defaults(session, row.catalog, row.namespace)
    return effective_policy(
        row.policy if overrides is None else overrides, ns.policy if ns else None
    )


def ref_of(row: ManagedTable) -> TableRef:
    return TableRef(row.namespace, row.name)


def add_blocker(
    session: Session, row: ManagedTable, *, holder: str, reason: str | None, ttl_s: float
) -> TableBlocker:
    """No maintenance job starts on the table for `ttl_s` seconds (database time)."""
    blocker = TableBlocker(
        table_id=row.id,
        holder=holder,
        reason=reason,
        expires_at=func.now() + func.make_interval(0, 0, 0, 0, 0, 0, ttl_s),
    )
    session.add(blocker)
    session.flush()
    session.refresh(blocker)
    return blocker


def live_blockers(session: Session, table_id: int) -> list[TableBlocker]:
    """The table's writer blockers that have not expired, oldest first (a pause or the
    freeze has no expiry: `pause_of`, `freeze_of`)."""
    return list(
        session.scalars(
            select(TableBlocker)
            .where(TableBlocker.table_id == table_id, TableBlocker.expires_at > func.now())
            .order_by(TableBlocker.id)
        )
    )


def remove_blocker(session: Session, row: ManagedTable, blocker_id: int) -> bool:
    """False if the table has no such writer blocker (a pause is lifted by `resume`)."""
    gone = session.execute(
        delete(TableBlocker)
        .where(
            TableBlocker.id == blocker_id,
            TableBlocker.table_id == row.id,
            TableBlocker.expires_at.is_not(None),
        )
        .returning(TableBlocker.id)
    ).scalar_one_or_none()
    return gone is not None


# A hold without an end: a pause (a table) or the freeze (no table).
_UNENDING = TableBlocker.expires_at.is_(None)


def _hold(session: Session, table_id: int | None, *, by: str, reason: str | None) -> TableBlocker:
    """The hold on `table_id` (None: the freeze), made unless one exists: holding twice
    keeps the first, so its `by` and `since` stay true. Race-free: the unique index
    uq_table_blockers_hold makes a concurrent second insert do nothing."""
    session.execute(
        insert(TableBlocker)
        .values(table_id=table_id, holder=by, reason=reason, expires_at=None)
        .on_conflict_do_nothing()
    )
    held = _hold_of(session, table_id)
    assert held is not None  # ours, or the one the conflict found (committed: it waited)
    return held


def _hold_of(session: Session, table_id: int | None) -> TableBlocker | None:
    on = TableBlocker.table_id.is_(None) if table_id is None else TableBlocker.table_id == table_id
    return session.scalars(select(TableBlocker).where(on, _UNENDING)).one_or_none()


def _lift(session: Session, table_id: int | None) -> bool:
    on = TableBlocker.table_id.is_(None) if table_id is None else TableBlocker.table_id == table_id
    lifted = session.execute(delete(TableBlocker).where(on, _UNENDING).returning(TableBlocker.id))
    if lifted.first() is None:
        return False
    # The planned tasks it held may start: wake the leader's dispatch at commit (it would
    # otherwise wait for its poll).
    announce(session, TaskState.PLANNED)
    return True


def pause(session: Session, row: ManagedTable, *, by: str, reason: str | None) -> TableBlocker:
    """No job starts on the table until it is resumed (a running one finishes)."""
    return _hold(session, row.id, by=by, reason=reason)


def resume(session: Session, row: ManagedTable) -> bool:
    """Lift the table's pause; False if it was not paused."""
    return _lift(session, row.id)


def pause_of(session: Session, table_id: int) -> TableBlocker | None:
    return _hold_of(session, table_id)


def pauses_of(session: Session, table_ids: Iterable[int]) -> dict[int, TableBlocker]:
    """The pauses of those of `table_ids` that are paused, in one query."""
    rows = session.scalars(
        select(TableBlocker).where(TableBlocker.table_id.in_(list(table_ids)), _UNENDING)
    )
    return {b.table_id: b for b in rows if b.table_id is not None}


def paused_tables(session: Session, where: ColumnElement[bool] | None = None) -> int:
    """How many managed tables (matching `where`, on ManagedTable) are paused."""
    q = (
        select(func.count())
        .select_from(ManagedTable)
        .join(TableBlocker, TableBlocker.table_id == ManagedTable.id)
        .where(LIVE, _UNENDING)
    )
    return session.scalar(q if where is None else q.where(where)) or 0


def freeze(session: Session, *, by: str, reason: str | None) -> TableBlocker:
    """No job starts on any table until unfrozen (running ones finish). An incident's brake."""
    return _hold(session, None, by=by, reason=reason)


def unfreeze(session: Session) -> bool:
    """Lift the freeze; False if there was none."""
    return _lift(session, None)


def freeze_of(session: Session) -> TableBlocker | None:
    return _hold_of(session, None)


def describe_hold(hold: TableBlocker) -> str:
    """What holds jobs, said the same way in explain, skip reasons and the task list:
    "paused by X since T: reason", "frozen by ...", "blocked by W until T: reason"."""
    if hold.expires_at is not None:
        said = f"blocked by {hold.holder} until {hold.expires_at.isoformat()}"
    else:
        what = "frozen (every table)" if hold.table_id is None else "paused"
        said = f"{what} by {hold.holder} since {hold.created_at.isoformat()}"
    return f"{said}: {hold.reason}" if hold.reason else said


def holds_on(session: Session, table_ids: Iterable[int]) -> dict[int, list[TableBlocker]]:
    """For each of `table_ids`, everything that holds its jobs now: the freeze first, then
    its pause, then its writers' live blockers (one query)."""
    ids = list(table_ids)
    rows = list(
        session.scalars(
            select(TableBlocker)
            .where(
                or_(TableBlocker.table_id.in_(ids), TableBlocker.table_id.is_(None)),
                or_(_UNENDING, TableBlocker.expires_at > func.now()),
            )
            .order_by(
                TableBlocker.table_id.is_not(None),
                TableBlocker.expires_at.is_not(None),
                TableBlocker.id,
            )
        )
    )
    return {i: [b for b in rows if b.table_id in (None, i)] for i in ids}


def policy_versions(session: Session, row: ManagedTable) -> list[PolicyVersion]:
    """Every policy the table has had, newest first."""
    return list(
        session.scalars(
            select(PolicyVersion)
            .where(PolicyVersion.table_id == row.id)
            .order_by(PolicyVersion.version.desc())
        )
    )


def policy_version(session: Session, row: ManagedTable, version: int) -> PolicyVersion | None:
    return session.get(PolicyVersion, (row.id, version))
