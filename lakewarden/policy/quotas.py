"""Hard quotas: the Spark minutes a table's jobs (policy `quota.spark_minutes_per_hour`) or a
pool's (settings `pool_quotas`) may use in any trailing hour. Past it, dispatch skips their
tasks until the hour's oldest usage has slid out of the window; the task list's `on_hold`
and explain say so, as they say a pause or freeze.

Usage is measured from `job_runs`: each run's time inside the last hour (database clock),
a running one counted up to now. Fair share (dispatch's order) is soft; a quota is hard.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import pairwise
from typing import Any

from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from lakewarden.db.models import ManagedTable
from lakewarden.policy.model import effective_policy
from lakewarden.settings import Settings
from lakewarden.states import RunState
from lakewarden.tables import namespaces_defaults

WINDOW = timedelta(hours=1)
Span = tuple[datetime, datetime]

# Every run's time inside the trailing hour, by table and pool (one scan of the recent runs).
_SPANS = text(
    """
    SELECT k.table_id, k.pool,
           greatest(r.started_at, now() - interval '1 hour') AS start_at,
           least(coalesce(r.finished_at, now()), now()) AS end_at
    FROM job_runs r JOIN tasks k ON k.id = r.task_id
    WHERE (r.finished_at > now() - interval '1 hour' OR
           (r.finished_at IS NULL AND r.state = :running))
      AND r.started_at < now()
    """
).bindparams(running=RunState.RUNNING.value)


# Does any live table's policy, or any namespace's defaults, set a quota?
_ANY_TABLE_QUOTA = text(
    """
    SELECT EXISTS (SELECT 1 FROM managed_tables
                   WHERE retired_at IS NULL AND policy ? 'quota')
        OR EXISTS (SELECT 1 FROM namespace_policies WHERE policy ? 'quota')
    """
)


@dataclass(frozen=True)
class Usage:
    """What a table or pool used in the trailing hour, against its quota."""

    scope: str  # "table" | "pool"
    name: str
    quota_minutes: float
    used_minutes: float
    next_slot: datetime | None  # when usage falls below the quota if nothing more runs

    @property
    def over(self) -> bool:
        return self.used_minutes >= self.quota_minutes

    def describe(self) -> str:
        """ "waiting: table used 12.3 of 10 Spark minutes in the last hour; next slot ~HH:MM"."""
        slot = (
            f"; next slot ~{self.next_slot.strftime('%H:%M')} UTC"
            if self.next_slot is not None
            else ""
        )
        return (
            f"waiting: {self.scope} {self.name} used {self.used_minutes:.1f} of "
            f"{self.quota_minutes:g} Spark minutes in the last hour{slot}"
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "spark_minutes_per_hour": self.quota_minutes,
            "used_minutes": round(self.used_minutes, 2),
            "over": self.over,
            "next_slot": self.next_slot,
            "waiting": self.describe() if self.over else None,
        }


@dataclass(frozen=True)
class QuotaHolds:
    """The tables and pools over their quota now, and what any quota has used."""

    tables: dict[int, Usage] = field(default_factory=dict)  # only those over
    pools: dict[str, Usage] = field(default_factory=dict)  # only those over

    def reason(self, table_id: int, pool: str) -> str | None:
        """Why a task of `table_id` in `pool` waits (None: no quota holds it)."""
        held = [u for u in (self.tables.get(table_id), self.pools.get(pool)) if u is not None]
        return "; ".join(u.describe() for u in held) or None


def minutes(spans: Iterable[Span]) -> float:
    return sum((end - start).total_seconds() for start, end in spans) / 60


def next_slot(spans: list[Span], quota_minutes: float, now: datetime) -> datetime | None:
    """When the trailing hour's usage falls below `quota_minutes` if nothing more runs: the
    window's start sweeps the oldest usage out first (spans may overlap: concurrent jobs of a
    pool). None when already below. Pure; unit-tested."""
    excess = (minutes(spans) - quota_minutes) * 60  # seconds that must slide out
    if excess < 0:
        return None
    points = sorted({t for span in spans for t in span})
    swept = 0.0  # seconds of usage before the window's start, as it moves point to point
    for left, right in pairwise(points):
        active = sum(1 for s, e in spans if s <= left and e >= right)
        gained = active * (right - left).total_seconds()
        if active and swept + gained > excess:
            return left + timedelta(seconds=(excess - swept) / active) + WINDOW
        swept += gained
    return (points[-1] if points else now) + WINDOW


def quota_holds(
    session: Session, settings: Settings, table_ids: Iterable[int] | None = None
) -> QuotaHolds:
    """The tables (of `table_ids`, or any) and pools over their quota now."""
    if not settings.pool_quotas and not session.execute(_ANY_TABLE_QUOTA).scalar_one():
        return QuotaHolds({}, {})  # no quota anywhere: dispatch asks often, skip the hour
    rows = session.execute(_SPANS).all()
    now = session.scalar(select(func.now()))
    assert now is not None
    by_table: dict[int, list[Span]] = defaultdict(list)
    by_pool: dict[str, list[Span]] = defaultdict(list)
    for table_id, pool, start, end in rows:
        by_table[table_id].append((start, end))
        by_pool[pool].append((start, end))
    pools = {
        pool: usage
        for pool, quota in settings.pool_quotas.items()
        if (usage := _usage("pool", pool, quota, by_pool.get(pool, []), now)).over
    }
    wanted = set(by_table) if table_ids is None else set(by_table) & set(table_ids)
    rows_used = list(session.scalars(select(ManagedTable).where(ManagedTable.id.in_(wanted))))
    defaults = namespaces_defaults(session, rows_used)
    tables: dict[int, Usage] = {}
    for row in rows_used:
        ns = defaults.get((row.catalog, row.namespace))
        if "quota" not in (row.policy or {}) and "quota" not in (ns or {}):
            continue  # no quota set: no policy to parse (dispatch asks this often)
        quota = effective_policy(row.policy, ns).quota.spark_minutes_per_hour
        if quota is not None:
            usage = _usage("table", f"{row.namespace}.{row.name}", quota, by_table[row.id], now)
            if usage.over:
                tables[row.id] = usage
    return QuotaHolds(tables, pools)


def usage_of(
    session: Session, settings: Settings, row: ManagedTable, quota: float | None, pools: set[str]
) -> dict[str, Any]:
    """Explain's entry: the table's quota (its policy's `quota`) and the quotas of `pools`
    (its kinds' pools), each with what it used in the trailing hour and whether it waits."""
    rows = session.execute(_SPANS).all()
    now = session.scalar(select(func.now()))
    assert now is not None
    spans: dict[str, list[Span]] = defaultdict(list)
    for table_id, pool, start, end in rows:
        if table_id == row.id:
            spans["table"].append((start, end))
        spans[f"pool {pool}"].append((start, end))
    table = f"{row.namespace}.{row.name}"
    return {
        "table": None
        if quota is None
        else _usage("table", table, quota, spans["table"], now).as_json(),
        "pools": {
            pool: _usage("pool", pool, q, spans[f"pool {pool}"], now).as_json()
            for pool, q in sorted(settings.pool_quotas.items())
            if pool in pools
        },
    }


def _usage(scope: str, name: str, quota: float, spans: list[Span], now: datetime) -> Usage:
    return Usage(scope, name, quota, minutes(spans), next_slot(spans, quota, now))
