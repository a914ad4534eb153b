"""The leader's sweep on tables of every format: a Hudi or Delta table gets the time-based
kinds its format runs (TTL, clean), never one it does not (stats), and no Iceberg tag; an
Iceberg table gets them all, as before."""

from __future__ import annotations

from datetime import UTC, datetime

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
        for name, table_format in (("h", "hudi"), ("d", "delta"), ("i", "iceberg")):
            s.add(
                ManagedTable(
                    catalog="lake",
                    namespace="sales",
                    name=name,
                    format=table_format,
                    policy=POLICY,
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
    assert len(created) == len(opened)
    assert opened == {
        ("h", "ttl"),
        ("h", "clean"),
        ("d", "ttl"),
        ("d", "clean"),
        ("i", "ttl"),
        ("i", "clean"),
        ("i", "stats"),
    }
    assert sweep_due_tasks(rt, fence, datetime.now(UTC)) == []  # idempotent
