"""The commits readiness pins ready partitions at (`lakewarden.readiness`), still kept: what
a format's clean must keep readable (a Delta version: `kinds.delta_pins`; a Hudi instant,
savepointed: `kinds.hudi_clean`). A pin is kept `readiness.tag_retention_days` from when
its partition became ready, while the partition stays ready at it (a late commit moves it)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import select

from lakewarden.db.models import ManagedTable, PartitionReadiness
from lakewarden.tables import effective_policy_for

if TYPE_CHECKING:
    from sqlalchemy.orm import Session


def ready_pins(
    session: Session, table_id: int, now: datetime, *, tagged: bool = False
) -> list[dict[str, Any]]:
    """The ready partitions' pins still kept: {partition, commit, until}, oldest commit
    first. `tagged`: only when the policy asks for tags (`readiness.tag`; on Hudi, the
    savepoints that pin them)."""
    row = session.get(ManagedTable, table_id)
    if row is None:
        return []
    policy = effective_policy_for(session, row).readiness
    if not policy.enabled or policy.partition is None or (tagged and not policy.tag):
        return []
    keep = timedelta(days=policy.tag_retention_days)
    rows = session.execute(
        select(
            PartitionReadiness.partition, PartitionReadiness.snapshot_id, PartitionReadiness.since
        )
        .where(
            PartitionReadiness.table_id == table_id,
            PartitionReadiness.column == policy.partition,
            PartitionReadiness.ready.is_(True),
            PartitionReadiness.snapshot_id.is_not(None),
            PartitionReadiness.since > now - keep,
        )
        .order_by(PartitionReadiness.snapshot_id, PartitionReadiness.partition)
    ).all()
    return [
        {"partition": p, "commit": int(c), "until": (since + keep).isoformat()}
        for p, c, since in rows
        if c is not None and since is not None  # (the query's own conditions: for mypy)
    ]
