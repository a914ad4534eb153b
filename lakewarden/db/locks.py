"""Every lease and advisory-lock name lakewarden uses, in one place (like Airflow's `DBLocks`).

A new lock gets a member here; nothing else names a lock. Advisory locks are keyed by
`hashtextextended(key, 0)`, where the key is the member's value, or `value:scope` for a lock
taken per object (a namespace, an alert rule). The lease is not an advisory lock but the
`leader_lease` row of that name (`lakewarden.leader`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from enum import StrEnum

from sqlalchemy import Connection, Engine, text
from sqlalchemy.orm import Session


class DBLocks(StrEnum):
    # The leader_lease row the schedulers compete for (its name is stored: never change it).
    SCHEDULER_LEASE = "scheduler"
    # The fleet-wide duties' lease (metric fold, history retention, alerts), held by one of
    # the region leaders (lakewarden.catalogs.regions). A region's own lease is
    # SCHEDULER_LEASE for the default region, `SCHEDULER_LEASE.key(region)` for the others.
    FLEET_LEASE = "scheduler.fleet"
    # Session lock for the whole of `lakewarden migrate`: replicas migrating at once take turns.
    MIGRATIONS = "lakewarden.migrations"
    # Transaction lock: concurrent DDL on the commit trigger's function fails in Postgres.
    COMMIT_TRIGGER = "lakewarden.commit_trigger"
    # Transaction lock per alert rule (scope: the rule) for a read-modify-write of its alerts.
    ALERT_RULE = "lakewarden.alert_rule"
    # Transaction lock per namespace (scope: `catalog.namespace`): exclusive to change its
    # defaults, shared to change or register one of its tables.
    NAMESPACE_POLICY = "lakewarden.namespace_policy"

    def key(self, scope: str | None = None) -> str:
        return self.value if scope is None else f"{self.value}:{scope}"


def xact_lock(
    conn: Connection | Session, lock: DBLocks, scope: str | None = None, *, shared: bool = False
) -> None:
    """Take `lock` until the current transaction ends."""
    fn = "pg_advisory_xact_lock_shared" if shared else "pg_advisory_xact_lock"
    conn.execute(text(f"SELECT {fn}(hashtextextended(:key, 0))"), {"key": lock.key(scope)})


@contextmanager
def session_lock(engine: Engine, lock: DBLocks) -> Iterator[None]:
    """Hold `lock` while the block runs, on a dedicated connection of its own (so the block's
    own transactions, and the DDL in them, do not matter). Waits while another holds it."""
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        key = {"key": lock.key()}
        conn.execute(text("SELECT pg_advisory_lock(hashtextextended(:key, 0))"), key)
        try:
            yield
        finally:
            conn.execute(text("SELECT pg_advisory_unlock(hashtextextended(:key, 0))"), key)
