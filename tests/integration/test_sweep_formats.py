"""The leader's sweep on tables of every format: a Hudi or Delta table gets the time-based
kinds its format runs (TTL, clean, stats), and no Iceberg tag; an Iceberg table gets them
all, as before. A Hudi table's registration judged its TTL, clean and stats already (its
baseline event), a Delta table's its stats: the sweep's first task of each waits its
interval from then, and says so."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import select

from lakewarden.db.locks import DBLocks
from lakewarden.db.models import ManagedTable, Task
from lakewarden.db.session import transaction
from lakewarden.leader import acquire_or_renew
from lakewarden.runtime import Runtime
from services.scheduler.sweeps import sweep_due_tasks

POLICY = {
    "ttl": {"enabled": True, "column": "ts", "retention_days": 30},
    "stats": {"enabled": True},
}


def test_the_sweep_opens_the_kinds_each_format_runs(rt: Runtime) -> None:
    with transaction(rt.engine) as s:
        now = datetime.now(UTC)
        for name, table_format, registered in (
            ("h", "hudi", now - timedelta(days=2)),
            ("fresh", "hudi", now),
            ("d", "delta", now),
            ("i", "iceberg", now),
        ):
            s.add(
                ManagedTable(
                    catalog="lake",
                    namespace="sales",
                    name=name,
                    format=table_format,
                    policy=POLICY,
                    created_at=registered,
                )
            )
    with rt.engine.begin() as conn:
        fence = acquire_or_renew(conn, DBLocks.SCHEDULER_LEASE, "test-leader", 60)
    assert fence is not None
    created = sweep_due_tasks(rt, fence, datetime.now(UTC))
    with transaction(rt.engine) as s:
        opened = {
            (name, kind)
            for name, kind in s.execute(
                select(ManagedTable.name, Task.kind).join(Task, Task.table_id == ManagedTable.id)
            )
        }
        reasons = {
            (name, kind): reason
            for name, kind, reason in s.execute(
                select(ManagedTable.name, Task.kind, Task.trigger["reason"].astext).join(
                    Task, Task.table_id == ManagedTable.id
                )
            )
        }
    assert len(created) == len(opened)
    # Registered just now, judged then (its baseline event): nothing to open before the
    # interval has passed since (before: both at once, though just judged at registration).
    assert not {k for n, k in opened if n == "fresh"}
    assert "the table's registration judged clean 48.0 h ago" in reasons[("h", "clean")]
    assert reasons[("d", "clean")] == "clean sweep: no clean task yet"
    assert opened == {
        ("h", "ttl"),
        ("h", "clean"),
        ("h", "stats"),
        # not d's stats: judged at its registration just now
        ("d", "ttl"),
        ("d", "clean"),
        ("i", "ttl"),
        ("i", "clean"),
        ("i", "stats"),
    }
    assert sweep_due_tasks(rt, fence, datetime.now(UTC)) == []  # idempotent
