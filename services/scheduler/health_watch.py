"""The leader measures each table's health now and then, for the SLO alert and the
operator's table list. One table failing to load never stops the others: it is
alerted (`lakewarden.isolation`) and the rest are measured.

Cost: a round measures the due tables in batches of `health_batch_size` for at most
`health_budget_s`, so a large fleet is covered over several rounds, never in one long
loop. Tables whose metadata pointer moved since they were last measured come first (their
health may have changed; an unchanged table's has not, but for its snapshots' age), then
the longest unmeasured. Each batch is read in its own short transaction; measuring does
its catalog I/O with none open."""

from __future__ import annotations

import time
from dataclasses import asdict
from datetime import datetime, timedelta

from sqlalchemy import func, or_, select, update

from lakewarden.catalogs.catalog import load_table
from lakewarden.catalogs.regions import in_region
from lakewarden.db.models import ManagedTable
from lakewarden.db.session import transaction
from lakewarden.health.measure import measure
from lakewarden.isolation import PerTable
from lakewarden.runtime import Runtime
from lakewarden.tables import ICEBERG, LIVE, effective_policy_for, ref_of


def measure_due_tables(
    rt: Runtime,
    now: datetime,
    limit: int | None = None,
    budget_s: float | None = None,
    region: str | None = None,
) -> int:
    """Measure the tables not measured for `health_interval_s`, a batch at a time, until
    none is left, `limit` tables were tried or `budget_s` (default `health_budget_s`) has
    passed; returns how many were measured.

    A table that fails (unreadable metadata, a policy that no longer validates) is
    alerted and its score cleared; it is tried again after `health_interval_s` like the
    others, so failing tables cannot keep the due list to themselves. A region's leader
    measures its `region`'s tables only (None: every table)."""
    stale = now - timedelta(seconds=rt.settings.health_interval_s)
    deadline = time.monotonic() + (rt.settings.health_budget_s if budget_s is None else budget_s)
    isolated = PerTable("health watch")
    tried: set[int] = set()  # a table whose result was not stored is not tried twice
    measured = 0
    while limit is None or len(tried) < limit:
        size = rt.settings.health_batch_size
        if limit is not None:
            size = min(size, limit - len(tried))
        due = _due_batch(rt, stale, size, tried, region)
        failed: list[int] = []
        for table_id, namespace, name in due:
            if time.monotonic() >= deadline:
                break
            tried.add(table_id)
            key = f"{namespace}.{name}"
            with isolated.table(key):
                measured += _measure(rt, table_id, now)
            if key in isolated.failed:
                failed.append(table_id)
        if failed:
            with transaction(rt.engine) as s:
                s.execute(
                    update(ManagedTable)
                    .where(ManagedTable.id.in_(failed), LIVE)
                    .values(health_score=None, health_signals=None, health_measured_at=now)
                )
        if len(due) < size or time.monotonic() >= deadline:
            break
    with transaction(rt.engine) as s:
        isolated.record(s)
    return measured


def _due_batch(
    rt: Runtime, stale: datetime, size: int, tried: set[int], region: str | None
) -> list[tuple[int, str, str]]:
    """The next `size` due tables: moved pointers first, then the longest unmeasured."""
    query = (
        select(ManagedTable.id, ManagedTable.namespace, ManagedTable.name)
        .where(
            LIVE,
            ICEBERG,
            in_region(region),
            or_(
                ManagedTable.health_measured_at.is_(None),
                ManagedTable.health_measured_at < stale,
            ),
        )
        .order_by(
            ManagedTable.metadata_location.is_distinct_from(
                ManagedTable.health_metadata_location
            ).desc(),
            ManagedTable.health_measured_at.nulls_first(),
            ManagedTable.id,
        )
        .limit(size)
    )
    if tried:
        query = query.where(ManagedTable.id.not_in(tried))
    with transaction(rt.engine) as s:
        return [(r.id, r.namespace, r.name) for r in s.execute(query)]


def _measure(rt: Runtime, table_id: int, now: datetime) -> int:
    """Read what measuring needs, measure with no transaction open (the catalog and the
    table's files), then store the result only if the row is as it was read: unregistered,
    its policy changed or measured by another leader meanwhile, the result is dropped."""
    with transaction(rt.engine) as s:
        row = s.get(ManagedTable, table_id)
        if row is None or row.retired_at is not None:
            return 0
        policy = effective_policy_for(s, row)
        ref, version, measured_at = ref_of(row), row.policy_version, row.health_measured_at
        catalog = row.catalog
        # The pointer this measurement stands for (it may move on while we measure: then
        # the table counts as moved and comes first next time, which is right).
        pointer = row.metadata_location
    health = measure(load_table(rt.catalogs.load(catalog), ref), policy, now)
    unhealthy = health.score < policy.slo.min_score
    with transaction(rt.engine) as s:
        stored = s.execute(
            update(ManagedTable)
            .where(
                ManagedTable.id == table_id,
                LIVE,
                ManagedTable.policy_version == version,
                ManagedTable.health_measured_at.is_not_distinct_from(measured_at),
            )
            .values(
                health_score=health.score,
                health_signals=[asdict(signal) for signal in health.signals],
                health_measured_at=now,
                health_metadata_location=pointer,
                unhealthy_since=func.coalesce(ManagedTable.unhealthy_since, now)
                if unhealthy
                else None,
            )
            .execution_options(synchronize_session=False)
        )
    return int(stored.rowcount)  # type: ignore[attr-defined]
