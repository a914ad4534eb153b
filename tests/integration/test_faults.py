"""Fault tests with real processes on a real Postgres and real Spark.

Kill -9 the leading scheduler while its Spark job runs: the standby takes over,
the orphaned task is re-planned and re-run, it ends in exactly one terminal state,
no rewrite is committed twice, and every row survives.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from conftest import make_test_runtime
from helpers import admin_headers, append_batches, make_table, wait_for
from sqlalchemy import text

from benchmarks import processes
from lakewarden.db.locks import DBLocks
from lakewarden.db.models import ManagedTable
from lakewarden.db.session import transaction
from lakewarden.fingerprint import fingerprint
from lakewarden.runtime import Runtime
from lakewarden.spark.commits import TASK_KEY
from lakewarden.tasks import repo

pytestmark = pytest.mark.spark

T = TypeVar("T")


class Fleet:
    def __init__(self, db_url: str, tmp: Path) -> None:
        self.env = processes.process_env(
            db_url,
            tmp,
            warehouse=(tmp / "warehouse").as_uri(),
            lease_ttl_s="4",
            lease_renew_interval_s="1",
            stale_after_s="6",
            retry_base_s="0.5",
        )
        self.tmp = tmp
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, role: str) -> subprocess.Popen[bytes]:
        proc = processes.start([role], self.env, self.tmp / f"{role}-{len(self.procs)}.log")
        self.procs.append(proc)
        return proc

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text()[-2500:]}" for p in sorted(self.tmp.glob("*.log"))
        )

    def stop(self) -> None:
        processes.stop(self.procs)


@pytest.fixture
def fleet(db_url: str, tmp_path: Path) -> Iterator[Fleet]:
    f = Fleet(db_url, tmp_path)
    yield f
    f.stop()


def _wait(fn: Callable[[], T | None], timeout: float, what: str, fleet: Fleet) -> T:
    return wait_for(fn, timeout, what, fleet.logs)


def _in_spark(rt: Runtime, task_id: int) -> bool:
    """The task runs and its attempt has a Spark application: the session is up (warm or
    not), and the job starts now."""
    with rt.engine.connect() as conn:
        return bool(
            conn.execute(
                text(
                    "SELECT 1 FROM tasks t JOIN job_runs r ON r.task_id = t.id "
                    "AND r.attempt = t.attempt WHERE t.id = :i AND t.state = 'running' "
                    "AND r.spark_app_id IS NOT NULL"
                ),
                {"i": task_id},
            ).scalar()
        )


def test_kill_the_leader_mid_job(fleet: Fleet, db_url: str, tmp_path: Path) -> None:
    rt = make_test_runtime(db_url, tmp_path)
    table = append_batches(
        make_table(rt, name="killed"), 40, rows=100, regions=("a", "b", "c", "d")
    )
    before = fingerprint(table)
    schedulers = [fleet.start("scheduler"), fleet.start("scheduler")]
    fleet.start("worker")

    def lease() -> tuple[str, int] | None:
        with rt.engine.connect() as conn:
            row = conn.execute(
                text(
                    "SELECT holder, epoch FROM leader_lease "
                    "WHERE name = :lease AND expires_at > now()"
                ),
                {"lease": DBLocks.SCHEDULER_LEASE},
            ).one_or_none()
        return (row[0], row[1]) if row else None

    holder, epoch = _wait(lease, 60, "a leader", fleet)
    leader = next(p for p in schedulers if f"-{p.pid}-" in holder)

    with transaction(rt.engine) as s:
        row = ManagedTable(
            catalog="lake",
            namespace="sales",
            name="killed",
            policy={"compaction": {"min_small_files": 5, "min_input_files": 5, "max_attempts": 5}},
        )
        s.add(row)
        s.flush()
        task_id = repo.create_task(
            s, table_id=row.id, kind="compaction", trigger={}, actor="test", max_attempts=5
        )
    assert task_id is not None

    def state() -> str:
        with rt.engine.connect() as conn:
            return str(
                conn.execute(text("SELECT state FROM tasks WHERE id = :i"), {"i": task_id}).scalar()
            )

    _wait(lambda: _in_spark(rt, task_id), 120, "the job to start in Spark", fleet)
    leader.send_signal(signal.SIGKILL)
    killed_at = time.monotonic()

    _wait(
        lambda: state() in ("succeeded", "failed", "skipped", "cancelled"),
        240,
        "the task to end after failover",
        fleet,
    )
    recovery_s = time.monotonic() - killed_at
    print(f"kill -9 of the leader mid-job: task ended {state()} after {recovery_s:.1f}s")

    with transaction(rt.engine) as s:
        history = repo.history(s, task_id)
    ends = [
        h.to_state for h in history if h.to_state in ("succeeded", "failed", "skipped", "cancelled")
    ]
    assert len(ends) == 1, [(h.from_state, h.to_state, h.reason) for h in history]
    assert ends[0] in ("succeeded", "skipped"), fleet.logs()
    new_lease = lease()
    assert new_lease is not None
    new_holder, new_epoch = new_lease
    assert new_epoch > epoch and f"-{leader.pid}-" not in new_holder

    after = fingerprint(rt.catalog.load_table("sales.killed"))
    assert (after.rows, after.checksum) == (before.rows, before.checksum)
    assert after.data_files < before.data_files
    # No file group was rewritten twice: the tagged commits replaced disjoint files,
    # i.e. the deleted-file counts of this task's commits add up to at most the files
    # that existed before.
    table = rt.catalog.load_table("sales.killed")
    ours = [
        sn
        for sn in table.snapshots()
        if sn.summary is not None and sn.summary.get(TASK_KEY) == str(task_id)
    ]
    deleted = sum(int(sn.summary.get("deleted-data-files", 0)) for sn in ours if sn.summary)
    assert ours and deleted <= before.data_files
    rt.engine.dispose()


def test_postgres_restart_under_load(tmp_path: Path) -> None:
    """Restart the database while api, worker and scheduler run: they reconnect, and a
    commit made after the restart is still heard, planned and compacted."""
    import httpx

    from lakewarden.db.embedded import _any_free_port, ensure_server, restart_server, stop_server
    from lakewarden.db.migrate import migrate

    pg_dir = tmp_path / "own-pg"
    url = ensure_server(pg_dir, _any_free_port())  # its own server: the others keep theirs
    fleet = Fleet(url, tmp_path)
    fleet.env["LAKEWARDEN_POLL_INTERVAL_S"] = "2"
    port = _any_free_port()
    try:
        rt = make_test_runtime(url, tmp_path)
        migrate(rt)
        table = append_batches(make_table(rt, name="restarted"), 2)
        fleet.start("worker")
        fleet.start("scheduler")
        api_env = {**fleet.env, "LAKEWARDEN_API_PORT": str(port)}
        fleet.env, saved = api_env, fleet.env
        fleet.start("api")
        fleet.env = saved
        client = httpx.Client(
            base_url=f"http://127.0.0.1:{port}", headers=admin_headers(rt), timeout=10
        )

        def ready() -> bool:
            try:
                return client.get("/readyz").status_code == 200
            except httpx.HTTPError:
                return False

        _wait(ready, 60, "the API", fleet)
        r = client.post(
            "/api/v1/tables",
            json={
                "namespace": "sales",
                "name": "restarted",
                "policy": {"compaction": {"min_small_files": 6, "min_input_files": 5}},
            },
        )
        assert r.status_code == 201, r.text

        assert restart_server(pg_dir)
        rt.engine.dispose()
        append_batches(table, 6, start=1000)  # commits after the restart

        def compacted() -> bool:
            with rt.engine.connect() as conn:
                return bool(
                    conn.execute(text("SELECT 1 FROM tasks WHERE state = 'succeeded'")).scalar()
                )

        _wait(compacted, 180, "compaction after the restart", fleet)
        after = fingerprint(rt.catalog.load_table("sales.restarted"))
        assert after.rows == 80 and after.data_files == 2
        rt.engine.dispose()
    finally:
        fleet.stop()
        stop_server(pg_dir)


def test_kill_a_worker_mid_plan(fleet: Fleet, db_url: str, tmp_path: Path) -> None:
    """The planner dies holding a task: the leader's reaper returns it once its heartbeat
    is stale, another worker plans it, and it ends exactly once."""
    rt = make_test_runtime(db_url, tmp_path)
    append_batches(make_table(rt, name="planned"), 2)  # too few small files: a skip
    fleet.env["LAKEWARDEN_SPARK_WARMUP"] = "false"  # this test needs no Spark job
    slow = fleet.env.copy()
    fleet.env["LAKEWARDEN_FAULT_PLAN_DELAY_S"] = "600"
    doomed = fleet.start("worker")
    fleet.env = slow
    with transaction(rt.engine) as s:
        row = ManagedTable(catalog="lake", namespace="sales", name="planned", policy={})
        s.add(row)
        s.flush()
        task_id = repo.create_task(s, table_id=row.id, kind="compaction", trigger={}, actor="test")
    assert task_id is not None

    def task() -> tuple[str, str | None]:
        with rt.engine.connect() as conn:
            state, holder = conn.execute(
                text("SELECT state, holder FROM tasks WHERE id = :i"), {"i": task_id}
            ).one()
            return str(state), holder

    _wait(
        lambda: task()[0] == "planning" and f"-{doomed.pid}-" in (task()[1] or ""),
        60,
        "the slow worker to claim the task",
        fleet,
    )
    doomed.send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    fleet.start("scheduler")
    fleet.start("worker")
    _wait(lambda: task()[0] == "skipped", 90, "the task to be re-planned", fleet)
    print(
        f"kill -9 of a worker mid-plan: task re-planned and ended after "
        f"{time.monotonic() - killed_at:.1f}s"
    )
    with transaction(rt.engine) as s:
        history = [(h.from_state, h.to_state, h.reason) for h in repo.history(s, task_id)]
    assert ("planning", "pending", "planner went silent") in history
    assert [h[1] for h in history].count("skipped") == 1
    assert [h[1] for h in history] == ["pending", "planning", "pending", "planning", "skipped"]
    rt.engine.dispose()


def test_spark_jvm_crash_mid_job(fleet: Fleet, db_url: str, tmp_path: Path) -> None:
    """The scheduler's Spark JVM dies mid-job (OOM killer, crash): the attempt fails, the
    scheduler starts a new JVM, and the retry compacts the table with every row intact."""
    import psutil

    rt = make_test_runtime(db_url, tmp_path)
    table = append_batches(
        make_table(rt, name="crashed"), 40, rows=100, regions=("a", "b", "c", "d")
    )
    before = fingerprint(table)
    scheduler = fleet.start("scheduler")
    fleet.start("worker")

    def jvm() -> psutil.Process | None:
        kids = psutil.Process(scheduler.pid).children(recursive=True)
        return next((k for k in kids if k.name() == "java"), None)

    _wait(jvm, 60, "the scheduler's Spark JVM", fleet)
    with transaction(rt.engine) as s:
        row = ManagedTable(
            catalog="lake",
            namespace="sales",
            name="crashed",
            policy={"compaction": {"min_small_files": 5, "min_input_files": 5}},
        )
        s.add(row)
        s.flush()
        task_id = repo.create_task(s, table_id=row.id, kind="compaction", trigger={}, actor="test")
    assert task_id is not None

    def state() -> str:
        with rt.engine.connect() as conn:
            return str(
                conn.execute(text("SELECT state FROM tasks WHERE id = :i"), {"i": task_id}).scalar()
            )

    _wait(lambda: _in_spark(rt, task_id), 120, "the job to start in Spark", fleet)
    doomed = jvm()
    assert doomed is not None
    doomed.kill()
    _wait(lambda: state() in ("succeeded", "failed"), 240, "the retry", fleet)
    assert state() == "succeeded", fleet.logs()
    assert scheduler.poll() is None  # the scheduler itself survived
    with rt.engine.connect() as conn:
        runs = conn.execute(
            text("SELECT attempt, state FROM job_runs WHERE task_id = :i ORDER BY attempt"),
            {"i": task_id},
        ).all()
    assert [r[1] for r in runs][-1] == "succeeded" and runs[0][1] == "failed", runs
    after = fingerprint(rt.catalog.load_table("sales.crashed"))
    assert (after.rows, after.checksum) == (before.rows, before.checksum)
    assert after.data_files < before.data_files
    rt.engine.dispose()
