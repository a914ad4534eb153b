"""Warm family hosts (`warm_families`, services.scheduler.family_hosts): a leader with
`warm_families=["delta"]` runs Delta compactions in one long-lived Delta-family process.

Real parts: the in-process leader (dispatch, `Applications.poll`), the host process and its
JVM (local[1]), Delta tables written and read back by delta-rs, Postgres. One test, in
phases, so that the host's JVM starts twice in all (its start, its restart after the kill),
not once per phase:

1. two tables' compactions run one after the other in the same host: the same host pid,
   the same Spark application id, the same JVM pid; each committed once, rows unchanged;
2. the host is killed with SIGKILL (its whole process group: the JVM too) while a third
   compaction runs: the leader judges the attempt from the table's log (as an application
   that ended without reporting), a new host is started, and the task ends succeeded with
   exactly one commit of it in the log, rows unchanged.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from fastapi.testclient import TestClient
from helpers import application_leader, application_runtime, task_of, wait_for
from sqlalchemy import select, text

from lakewarden.db.models import JobRun
from lakewarden.db.session import transaction
from lakewarden.formats.base import marker_of
from lakewarden.formats.delta.timeline import DeltaTimeline
from lakewarden.runtime import Runtime
from services.scheduler.applications import WARM_HOST, local_pid
from services.scheduler.main import Scheduler
from services.worker.main import Worker

pytestmark = [pytest.mark.spark, pytest.mark.timeout(1800)]

TABLES = "/api/v1/catalogs/dlake/tables"
# Spark's OPTIMIZE on the warm host (a plain copy is pyarrow's by default, without a JVM)
SPARK = {"native_rewrite": False}
# As the Delta kinds' tests: a few tasks, not Delta's 50 snapshot partitions, on local[1].
QUICK = {
    "spark.databricks.delta.snapshotPartitions": "2",
    "spark.sql.sources.parallelPartitionDiscovery.parallelism": "4",
}


def _small_files(path: str, n: int = 4) -> list[tuple[Any, ...]]:
    """`n` appends of ten rows to one partition (a compaction is due); the rows, sorted."""
    for i in range(n):
        ids = range(10 * i, 10 * i + 10)
        write_deltalake(
            path,
            pa.table({"id": pa.array(ids, pa.int64()), "day": ["d1"] * 10}),
            partition_by=["day"],
            mode="append",
        )
    return _rows(path)


def _rows(path: str) -> list[tuple[Any, ...]]:
    table = DeltaTable(path).to_pyarrow_table()
    return sorted(zip(table.column("id").to_pylist(), table.column("day").to_pylist(), strict=True))


def _commits_of(path: str, task_id: int) -> list[int]:
    """The versions of the log stamped with the task (delta-rs' read of the log)."""
    timeline = DeltaTimeline(path)
    found = []
    for version in timeline.versions():
        marker = marker_of(timeline.commit(version, version - 1 if version else None).summary)
        if marker is not None and marker.task_id == task_id:
            found.append(version)
    return found


def _compaction_of(client: TestClient, name: str) -> int:
    """The table's compaction task, opened at registration (its small files call for it)."""
    got = client.post(
        TABLES,
        json={
            "namespace": "lake",
            "name": name,
            "policy": {"compaction": {"min_input_files": 3, "min_small_files": 3, **SPARK}},
        },
    )
    assert got.status_code == 201, got.text
    tasks = client.get("/api/v1/tasks", params={"table": f"lake.{name}", "catalog": "dlake"})
    (task_id,) = [t["id"] for t in tasks.json()["items"] if t["kind"] == "compaction"]
    return int(task_id)


def _runs(rt: Runtime, task_id: int) -> list[JobRun]:
    with transaction(rt.engine) as s:
        runs = list(
            s.scalars(select(JobRun).where(JobRun.task_id == task_id).order_by(JobRun.attempt))
        )
        s.expunge_all()
    return runs


def _until_ended(rt: Runtime, sched: Scheduler, task_id: int, log_dir: Path) -> str:
    """Plan, dispatch and poll until the task ends (a failed attempt is retried)."""

    def ended() -> str | None:
        Worker(rt).run_once()
        sched.dispatch_once()
        sched.applications.poll(sched.leading())
        state = task_of(rt, task_id).state
        return state if state in ("succeeded", "failed", "cancelled") else None

    def logs() -> str:
        return "\n".join(p.read_text()[-3000:] for p in log_dir.glob("*.log"))

    return wait_for(ended, 900, f"task {task_id}", logs)


def test_a_warm_host_runs_attempts_in_one_jvm_and_survives_a_kill_mid_job(
    db_url: str, client: TestClient, tmp_path: Path
) -> None:
    warehouse = tmp_path / "wh"
    paths = {name: str(warehouse / "lake" / name) for name in ("a", "b", "c")}
    rows = {name: _small_files(path) for name, path in paths.items()}
    got = client.post(
        "/api/v1/catalogs",
        json={"name": "dlake", "type": "delta", "properties": {"warehouse": str(warehouse)}},
    )
    assert got.status_code == 201, got.text
    rt = application_runtime(
        db_url, tmp_path / "data", warm_families=["delta"], spark_conf=QUICK, retry_base_s=1.0
    )
    log_dir = rt.settings.data_dir / "applications"
    try:
        with application_leader(rt) as sched:
            # 1. Two attempts, one host: the same process, Spark application and JVM.
            seen = []
            for name in ("a", "b"):
                task_id = _compaction_of(client, name)
                assert _until_ended(rt, sched, task_id, log_dir) == "succeeded"
                (run,) = _runs(rt, task_id)
                assert run.deploy_mode == WARM_HOST and run.mode == "application"
                host = sched.applications.hosts.hosts["delta"]
                seen.append((local_pid(run.submission_id), run.spark_app_id, host.jvm_pid))
                assert len(_commits_of(paths[name], task_id)) == 1
                assert _rows(paths[name]) == rows[name]
                detail = client.get(f"/api/v1/tasks/{task_id}").json()
                assert detail["runs"][0]["deploy_mode"] == "warm-host", detail["runs"]
                # the host beats as a process (/metrics' lakewarden_process_up)
                with rt.engine.connect() as conn:
                    role = conn.execute(
                        text("SELECT role FROM process_heartbeats WHERE pid = :pid"),
                        {"pid": host.pid},
                    ).scalar()
                assert role == "delta-host"
                print(f"task {task_id}: {run.duration_ms} ms on host {host.pid}")
            assert seen[0] == seen[1], seen
            assert seen[0][0] == host.pid and host.jvm_pid != host.pid  # the JVM: its child

            # 2. The host killed (with its JVM) while the third compaction runs.
            task_id = _compaction_of(client, "c")
            assert Worker(rt).run_once() and sched.dispatch_once()

            def started() -> float | None:
                sched.applications.poll(sched.leading())
                return host.seen(task_id, 1).started_at

            wait_for(started, 300, "the host to start the attempt")
            # Frozen at once (it cannot commit between the look and the kill), then killed.
            os.killpg(host.pid, signal.SIGSTOP)
            assert _commits_of(paths["c"], task_id) == [], "committed before the kill"
            os.killpg(host.pid, signal.SIGKILL)
            assert _until_ended(rt, sched, task_id, log_dir) == "succeeded"
            first, *_, last = _runs(rt, task_id)
            assert first.state == "failed" and "exited (-9) while it ran" in (first.error or "")
            assert last.state == "succeeded"
            new_host = sched.applications.hosts.hosts["delta"]
            assert new_host.pid != host.pid and local_pid(last.submission_id) == new_host.pid
            assert len(_commits_of(paths["c"], task_id)) == 1  # never committed twice
            assert _rows(paths["c"]) == rows["c"]
    finally:
        rt.engine.dispose()


def test_a_host_that_cannot_start_sends_its_job_to_an_application_of_its_own(
    db_url: str, client: TestClient, tmp_path: Path
) -> None:
    """A driver memory no JVM accepts: the host's session fails at once (no JVM runs), so
    the attempt queued on it is launched as its own application instead, its log saying
    why; that application fails too (the same memory) and the attempt is judged as any
    application's. Nothing here starts a JVM that lives."""
    warehouse = tmp_path / "wh"
    _small_files(str(warehouse / "lake" / "a"))
    got = client.post(
        "/api/v1/catalogs",
        json={"name": "dlake", "type": "delta", "properties": {"warehouse": str(warehouse)}},
    )
    assert got.status_code == 201, got.text
    rt = application_runtime(
        db_url, tmp_path / "data", warm_families=["delta"], application_driver_memory="12q"
    )
    log_dir = rt.settings.data_dir / "applications"
    try:
        with application_leader(rt) as sched:
            task_id = _compaction_of(client, "a")
            assert Worker(rt).run_once() and sched.dispatch_once()
            host = sched.applications.hosts.hosts["delta"]

            def judged() -> JobRun | None:
                sched.applications.poll(sched.leading())
                (run,) = _runs(rt, task_id)
                return run if run.state != "running" else None

            run = wait_for(judged, 300, "the attempt judged")
            assert host.why_not, "the host said why it did not start"
            assert run.deploy_mode == "client" and local_pid(run.submission_id) != host.pid
            note = (log_dir / f"lakewarden-task-{task_id}-1.log").read_text()
            assert "its warm host was gone before it started the attempt" in note
            assert "not on a warm host (its warm host could not start" in note, note
            # the next job of the family goes straight to its own application meanwhile
            assert "could not start" in (sched.applications.hosts.serves("delta") or "")
    finally:
        rt.engine.dispose()


def test_the_leader_gone_mid_job_the_next_leader_reattaches_its_host_attempt(
    db_url: str, client: TestClient, tmp_path: Path
) -> None:
    """The leader dies (its lease lapses, its end of the host's stdin closes, as at its
    kill -9) while its host runs an attempt (frozen meanwhile, so it cannot report first).
    The next leader's reaper re-attaches the run (`applications.reattach`: the host's
    process is alive); the attempt reports under the new leader's fence, once, never run
    again; the host, its stdin closed, exits after it."""
    warehouse = tmp_path / "wh"
    path = str(warehouse / "lake" / "a")
    rows = _small_files(path)
    got = client.post(
        "/api/v1/catalogs",
        json={"name": "dlake", "type": "delta", "properties": {"warehouse": str(warehouse)}},
    )
    assert got.status_code == 201, got.text
    settings: dict[str, Any] = {
        "warm_families": ["delta"],
        "spark_conf": QUICK,
        "lease_ttl_s": 3.0,
        "lease_renew_interval_s": 1.0,
    }
    rt1 = application_runtime(db_url, tmp_path / "data", **settings)
    rt2 = application_runtime(db_url, tmp_path / "data", **settings)
    first = Scheduler(rt1)
    host = None
    try:
        first.renew()
        task_id = _compaction_of(client, "a")
        assert Worker(rt1).run_once() and first.dispatch_once()
        host = first.applications.hosts.hosts["delta"]

        def started() -> float | None:
            first.renew()
            first.applications.poll(first.leading())
            return host.seen(task_id, 1).started_at

        wait_for(started, 300, "the host to start the attempt")
        os.killpg(host.pid, signal.SIGSTOP)
        assert _commits_of(path, task_id) == [], "committed before the leader died"
        # The leader is gone: no more renewals; its end of the host's stdin closed.
        assert host.process.stdin is not None
        host.process.stdin.close()
        second = Scheduler(rt2)

        def leads() -> Any:
            second.renew()
            return second.leading()

        fence = wait_for(leads, 60, "the next leader")
        os.killpg(host.pid, signal.SIGCONT)
        second.reap()
        assert task_id in second.applications.task_ids(), "not re-attached"

        def ended() -> str | None:
            second.renew()
            second.applications.poll(second.leading())
            state = task_of(rt2, task_id).state
            return state if state in ("succeeded", "failed", "pending") else None

        assert wait_for(ended, 300, "the attempt's outcome") == "succeeded"
        (run,) = _runs(rt2, task_id)  # attempt 1 only: re-attached, never run again
        assert run.scheduler_id == rt2.process_id and run.leader_epoch == fence.epoch
        assert len(_commits_of(path, task_id)) == 1 and _rows(path) == rows
        assert host.process.wait(120) == 0  # its stdin ended: it exits after the attempt
    finally:
        if host is not None and host.process.poll() is None:
            host.kill()
        rt1.engine.dispose()
        rt2.engine.dispose()
