"""The leader measures each table's health now and then, for the SLO alert and the
operator's table list. One table failing to load never stops the others."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from sqlalchemy import or_, select

from lakewarden.db.models import ManagedTable
from lakewarden.db.session import transaction
from lakewarden.health import measure
from lakewarden.runtime import Runtime
from lakewarden.tables import effective_policy_for

log = logging.getLogger(__name__)


def measure_due_tables(rt: Runtime, now: datetime, limit: int = 50) -> int:
    """Measure up to `limit` tables not measured for `health_interval_s`; returns how many."""
    stale = now - timedelta(seconds=rt.settings.health_interval_s)
    with transaction(rt.engine) as s:
        ids = list(
            s.scalars(
                select(ManagedTable.id)
                .where(
                    or_(
                        ManagedTable.health_measured_at.is_(None),
                        ManagedTable.health_measured_at < stale,
                    )
                )
                .order_by(ManagedTable.health_measured_at.nulls_first())
                .limit(limit)
            )
        )
    measured = 0
    for table_id in ids:
        try:
            with transaction(rt.engine) as s:
                row = s.get(ManagedTable, table_id)
                if row is None:
                    continue
                policy = effective_policy_for(s, row)
                table = rt.catalog.load_table((row.namespace, row.name))
                health = measure(table, policy, now)
                row.health_score = health.score
                row.health_measured_at = now
                if health.score < policy.slo.min_score:
                    row.unhealthy_since = row.unhealthy_since or now
                else:
                    row.unhealthy_since = None
            measured += 1
        except Exception:
            log.exception("could not measure the health of table %d", table_id)
    return measured
