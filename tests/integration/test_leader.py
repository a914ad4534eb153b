"""Leadership through Postgres: one leader, takeover after the lease lapses, fencing."""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import text

from lakewarden.db.locks import DBLocks
from lakewarden.db.session import transaction
from lakewarden.leader import FencedOut, acquire_or_renew, check_fence, resign
from lakewarden.runtime import Runtime
from services.scheduler.main import Scheduler


def test_two_schedulers_one_leader_and_takeover(rt: Runtime) -> None:
    a, b = Scheduler(rt), Scheduler(rt)
    b.rt = Runtime(settings=rt.settings, db_url=rt.db_url, engine=rt.engine, role="scheduler")
    a.rt = Runtime(settings=rt.settings, db_url=rt.db_url, engine=rt.engine, role="scheduler")
    a.renew()
    b.renew()
    fence = a.leading()
    assert fence is not None and b.leading() is None
    epoch = fence.epoch
    a.renew()
    b.renew()
    fence = a.leading()
    assert fence is not None and fence.epoch == epoch and b.leading() is None

    # The leader stops renewing (killed): once the lease lapses the standby takes over.
    with rt.engine.begin() as conn:
        conn.execute(text("UPDATE leader_lease SET expires_at = now() - interval '1 second'"))
    b.renew()
    fence = b.leading()
    assert fence is not None and fence.epoch == epoch + 1
    a.renew()
    assert a.fence is None


def test_concurrent_candidates_elect_exactly_one(rt: Runtime) -> None:
    winners: list[str] = []
    barrier = threading.Barrier(8)

    def candidate(i: int) -> None:
        barrier.wait()
        with rt.engine.begin() as conn:
            if acquire_or_renew(conn, DBLocks.SCHEDULER_LEASE, f"cand-{i}", 15):
                winners.append(f"cand-{i}")

    threads = [threading.Thread(target=candidate, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(winners) == 1


def test_deposed_leader_is_fenced_out(rt: Runtime) -> None:
    with rt.engine.begin() as conn:
        old = acquire_or_renew(conn, DBLocks.SCHEDULER_LEASE, "old", 15)
    assert old is not None
    with rt.engine.begin() as conn:
        conn.execute(text("UPDATE leader_lease SET expires_at = now()"))
        new = acquire_or_renew(conn, DBLocks.SCHEDULER_LEASE, "new", 15)
    assert new is not None and new.epoch == old.epoch + 1
    with transaction(rt.engine) as s, pytest.raises(FencedOut):
        check_fence(s, old)
    with transaction(rt.engine) as s:
        check_fence(s, new)  # the current leader passes


def test_lease_expiry_uses_the_database_clock(rt: Runtime) -> None:
    """A candidate whose own clock is far ahead still cannot take a live lease."""
    with rt.engine.begin() as conn:
        acquire_or_renew(conn, DBLocks.SCHEDULER_LEASE, "a", 1.0)
        assert acquire_or_renew(conn, DBLocks.SCHEDULER_LEASE, "b", 1.0) is None
    time.sleep(1.2)
    with rt.engine.begin() as conn:
        fence = acquire_or_renew(conn, DBLocks.SCHEDULER_LEASE, "b", 1.0)
    assert fence is not None and fence.holder == "b"


def test_resign_hands_over_at_once(rt: Runtime) -> None:
    with rt.engine.begin() as conn:
        fence = acquire_or_renew(conn, DBLocks.SCHEDULER_LEASE, "a", 60)
        assert fence is not None
        resign(conn, fence)
        assert acquire_or_renew(conn, DBLocks.SCHEDULER_LEASE, "b", 60) is not None


def test_a_scheduler_whose_first_renewal_fails_keeps_running_and_leads_later(
    rt: Runtime,
) -> None:
    """Two schedulers starting at once: the first one's transaction holds the lease row
    past the second's statement timeout. The second's first try fails; it must not die
    (it did: the standby of a region was then gone), its lease ticker tries again."""
    rt.settings.lease_renew_interval_s = 0.3  # the lease's statement timeout
    rt.settings.spark_warmup = False
    with transaction(rt.engine) as s:
        s.execute(
            text(
                "INSERT INTO leader_lease (name, holder, epoch, acquired_at, renewed_at, "
                "expires_at) VALUES (:n, 'gone', 1, now(), now(), now())"
            ),
            {"n": DBLocks.SCHEDULER_LEASE},
        )
    sched = Scheduler(rt)
    with rt.engine.connect() as holder:
        holder.execute(
            text("SELECT 1 FROM leader_lease WHERE name = :n FOR UPDATE"),
            {"n": DBLocks.SCHEDULER_LEASE},
        )
        serving = threading.Thread(target=sched.serve, name="scheduler", daemon=True)
        serving.start()
        time.sleep(1.5)  # its first renewal has timed out by now
        assert serving.is_alive(), "the scheduler died of its first renewal"
        assert sched.leading() is None
        holder.rollback()
    try:
        deadline = time.monotonic() + 10
        while sched.leading() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sched.leading() is not None and serving.is_alive()
    finally:
        sched.stop.set()
        serving.join(timeout=10)
