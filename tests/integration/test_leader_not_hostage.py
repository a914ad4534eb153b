"""The leader's own long loops never hold its lease hostage (issue 11).

The sweep once ran one transaction over every table behind `check_fence`, which held the
lease row FOR SHARE to the end: the leader's renewal (an UPDATE of that row) waited for
the whole sweep and the lease lapsed (epoch 1 -> 5 at 10,000 tables). Here a renewal
runs on its own connection, as the lease ticker does, with a lock_timeout, all through
a sweep of thousands of tables; and the fence still makes a takeover wait."""

from __future__ import annotations

import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError

from lakewarden.db.locks import DBLocks
from lakewarden.db.session import transaction
from lakewarden.leader import Fence, acquire_or_renew, check_fence
from lakewarden.runtime import Runtime
from services.scheduler.sweeps import sweep_due_tasks

# Most tables have no time-based kind enabled (the sweep still looks at each);
# three in forty are due. The old sweep held the lease row for seconds at this size.
TABLES = 4000
LOCK_WAIT_S = 1.0  # the renewal's lock_timeout: a renewal waiting longer on a lock fails
# A renewal must end well within the lease's margin (ttl 15 s, 80% trusted, every 5 s);
# more than a lock wait, this allows for a loaded 2-core machine (CPU, the GIL).
MAX_RENEWAL_S = 3.0
TTL = {"ttl": {"enabled": True, "column": "id", "retention_days": 30}}
OFF = {"clean": {"enabled": False}}


def _fleet(rt: Runtime) -> dict[str, set[str]]:
    """Bulk-insert managed tables in two catalogs (rows only: the sweep needs no table
    files); returns the time-based kinds each table is due for."""
    with rt.engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO managed_tables (catalog, namespace, name, policy) "
                "SELECT CASE WHEN g % 2 = 0 THEN 'lake' ELSE 'other' END, 'ns' || (g % 7), "
                "'t' || g, CASE WHEN g % 40 = 0 THEN CAST(:ttl AS jsonb) "
                "WHEN g % 40 IN (1, 4) THEN '{}'::jsonb ELSE CAST(:off AS jsonb) END "
                "FROM generate_series(1, :n) g"
            ),
            {"n": TABLES, "ttl": _json(TTL), "off": _json(OFF)},
        )
        # A namespace default turns clean off for one namespace of one catalog.
        conn.execute(
            text(
                "INSERT INTO namespace_policies (catalog, namespace, policy) "
                "VALUES ('other', 'ns3', CAST(:off AS jsonb))"
            ),
            {"off": _json(OFF)},
        )
        # A table retired is not swept; one swept a minute ago is not due again.
        conn.execute(text("UPDATE managed_tables SET retired_at = now() WHERE name = 't1'"))
        conn.execute(
            text(
                "INSERT INTO tasks (table_id, kind, state, trigger, created_at) "
                "SELECT id, 'clean', 'succeeded', '{}', now() - interval '1 minute' "
                "FROM managed_tables WHERE name = 't4'"
            )
        )
        conn.execute(text("ANALYZE managed_tables"))
        rows = conn.execute(
            text(
                "SELECT catalog, namespace, name, policy FROM managed_tables "
                "WHERE retired_at IS NULL"
            )
        ).all()
    due: dict[str, set[str]] = {}
    for catalog, namespace, name, policy in rows:
        kinds = set()
        if policy.get("ttl"):
            kinds.add("ttl")
        clean_off = policy == OFF or (catalog, namespace) == ("other", "ns3")
        if not clean_off and name != "t4":
            kinds.add("clean")
        if kinds:
            due[f"{catalog}.{name}"] = kinds
    return due


def _json(value: object) -> str:
    import json

    return json.dumps(value)


def _leader(rt: Runtime, ttl_s: float = 60) -> Fence:
    with rt.engine.begin() as conn:
        fence = acquire_or_renew(conn, DBLocks.SCHEDULER_LEASE, "leader", ttl_s)
    assert fence is not None
    return fence


def test_a_sweep_of_thousands_of_tables_never_blocks_the_renewal(rt: Runtime) -> None:
    due = _fleet(rt)
    fence = _leader(rt)
    # As the lease ticker's connection: a renewal waiting on a lock over LOCK_WAIT_S fails.
    lease_db = create_engine(
        rt.engine.url,
        connect_args={"options": f"-c lock_timeout={int(LOCK_WAIT_S * 1000)}"},
    )
    done, latencies, failures = threading.Event(), [], []

    def renew_all_along() -> None:
        while not done.is_set():
            started = time.monotonic()
            try:
                with lease_db.begin() as conn:
                    renewed = acquire_or_renew(conn, DBLocks.SCHEDULER_LEASE, "leader", 60)
                assert renewed == fence
            except OperationalError as exc:
                failures.append(str(exc).splitlines()[0])
            latencies.append(time.monotonic() - started)
            done.wait(0.05)

    renewer = threading.Thread(target=renew_all_along)
    now = datetime.now(UTC)
    try:
        renewer.start()
        started = time.monotonic()
        # Two sweeps at once (a slow tick overlapping a standby's brief lead would be the
        # same): each due task is still created exactly once.
        with ThreadPoolExecutor(2) as pool:
            runs = list(pool.map(lambda _: sweep_due_tasks(rt, fence, now), range(2)))
        took = time.monotonic() - started
    finally:
        done.set()
        renewer.join()
        lease_db.dispose()

    assert failures == [], f"renewals blocked during the sweep: {failures[:3]}"
    assert len(latencies) >= 5, f"only {len(latencies)} renewals in a {took:.1f}s sweep"
    assert max(latencies) < MAX_RENEWAL_S, f"slowest renewal {max(latencies):.3f}s"
    print(f"sweep {took:.1f}s, {len(latencies)} renewals, slowest {max(latencies):.3f}s")
    created = runs[0] + runs[1]
    assert len(created) == len(set(created)) == sum(len(kinds) for kinds in due.values())
    with transaction(rt.engine) as s:
        rows = s.execute(
            text(
                "SELECT m.catalog || '.' || m.name, t.kind, count(*) FROM tasks t "
                "JOIN managed_tables m ON m.id = t.table_id WHERE t.state = 'pending' "
                "GROUP BY 1, 2"
            )
        ).all()
    assert {count for *_, count in rows} == {1}
    found: dict[str, set[str]] = {}
    for table, kind, _ in rows:
        found.setdefault(table, set()).add(kind)
    assert found == due
    assert sweep_due_tasks(rt, fence, now + timedelta(minutes=1)) == []  # idempotent


def test_the_fence_still_makes_a_takeover_wait_but_not_the_leaders_renewal(rt: Runtime) -> None:
    """A fenced transaction open: the leader renews at once; a standby taking over the
    lapsed lease waits for it (and the leader's fenced write completes or is refused)."""
    fence = _leader(rt, ttl_s=60)
    other = create_engine(rt.engine.url, connect_args={"options": "-c lock_timeout=300"})
    try:
        with transaction(rt.engine) as fenced:
            check_fence(fenced, fence)
            with other.begin() as conn:
                assert acquire_or_renew(conn, DBLocks.SCHEDULER_LEASE, "leader", 60) == fence
            with other.begin() as conn:  # the lease lapses (a paused leader, say)
                conn.execute(text("UPDATE leader_lease SET expires_at = now()"))
            with other.begin() as conn, pytest.raises(OperationalError, match="lock timeout"):
                acquire_or_renew(conn, DBLocks.SCHEDULER_LEASE, "standby", 60)
        with other.begin() as conn:  # the fenced transaction ended: the takeover goes on
            new = acquire_or_renew(conn, DBLocks.SCHEDULER_LEASE, "standby", 60)
        assert new is not None and new.epoch == fence.epoch + 1
    finally:
        other.dispose()


def test_a_namespace_default_that_fails_skips_its_tables_with_a_bounded_log(
    rt: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    """Its tables share one parse of their policy, and so its error: each is skipped and
    alerted, and each log record's stack trace stays as short as the first's."""
    with rt.engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO managed_tables (catalog, namespace, name, policy) "
                "SELECT 'lake', CASE WHEN g <= 30 THEN 'legacy' ELSE 'sales' END, 't' || g, "
                "'{}'::jsonb FROM generate_series(1, 40) g"
            )
        )
        conn.execute(  # stored by an older release; today's model refuses it
            text(
                "INSERT INTO namespace_policies (catalog, namespace, policy) "
                "VALUES ('lake', 'legacy', CAST(:p AS jsonb))"
            ),
            {"p": _json({"clean": {"interval_minutes": 1e13}})},
        )
    with caplog.at_level("ERROR", logger="lakewarden.isolation"):
        created = sweep_due_tasks(rt, _leader(rt), datetime.now(UTC))
    assert len(created) == 10
    depths = [len(traceback.extract_tb(r.exc_info[2])) for r in caplog.records if r.exc_info]
    assert len(depths) == 30 and max(depths) <= depths[0]
    with transaction(rt.engine) as s:
        alerts = s.execute(text("SELECT count(*) FROM alerts WHERE state <> 'resolved'"))
        assert alerts.scalar() == 30
