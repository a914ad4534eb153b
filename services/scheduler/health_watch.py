"""The leader measures each table's health now and then, for the SLO alert and the
operator's table list. One table failing to load never stops the others: it is
alerted (`lakewarden.isolation`) and the rest are measured."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import func, or_, select, update

from lakewarden.catalog import load_table
from lakewarden.db.models import ManagedTable
from lakewarden.db.session import transaction
from lakewarden.health import measure
from lakewarden.isolation import PerTable
from lakewarden.runtime import Runtime
from lakewarden.tables import LIVE, effective_policy_for, ref_of


def measure_due_tables(rt: Runtime, now: datetime, limit: int = 50) -> int:
    """Measure up to `limit` tables not measured for `health_interval_s`; returns how many.

    A table that fails (unreadable metadata, a policy that no longer validates) is
    alerted and its score cleared; it is tried again after `health_interval_s` like the
    others, so failing tables cannot keep the due list to themselves."""
    stale = now - timedelta(seconds=rt.settings.health_interval_s)
    with transaction(rt.engine) as s:
        due = s.execute(
            select(ManagedTable.id, ManagedTable.namespace, ManagedTable.name)
            .where(
                LIVE,
                or_(
                    ManagedTable.health_measured_at.is_(None),
                    ManagedTable.health_measured_at < stale,
                ),
            )
            .order_by(ManagedTable.health_measured_at.nulls_first())
            .limit(limit)
        ).all()
    isolated = PerTable("health watch")
    measured = 0
    failed: list[int] = []
    for table_id, namespace, name in due:
        key = f"{namespace}.{name}"
        with isolated.table(key):
            measured += _measure(rt, table_id, now)
        if key in isolated.failed:
            failed.append(table_id)
    with transaction(rt.engine) as s:
        if failed:
            s.execute(
                update(ManagedTable)
                .where(ManagedTable.id.in_(failed), LIVE)
                .values(health_score=None, health_measured_at=now)
            )
        isolated.record(s)
    return measured


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
    health = measure(load_table(rt.catalog, ref), policy, now)
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
                health_measured_at=now,
                unhealthy_since=func.coalesce(ManagedTable.unhealthy_since, now)
                if unhealthy
                else None,
            )
            .execution_options(synchronize_session=False)
        )
    return int(stored.rowcount)  # type: ignore[attr-defined]
