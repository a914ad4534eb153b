"""Two real scheduler processes; five compactions run as their own Spark applications; kill -9
the leader while they run. The standby re-attaches the applications instead of starting
them again: every task ends in exactly one terminal state, with one attempt and one commit."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import append_batches, job_runs, make_table, manage, process_logs, task_of, wait_for
from sqlalchemy import text

from benchmarks import processes
from lakewarden.db.session import transaction
from lakewarden.runtime import Runtime
from lakewarden.spark.commits import TASK_KEY
from lakewarden.states import TERMINAL_TASK_STATES
from lakewarden.tasks import repo
from services.scheduler.applications import local_pid
from services.worker.main import Worker

pytestmark = pytest.mark.slow

TASKS = 5
TTL_S = 3.0
TERMINAL = {s.value for s in TERMINAL_TASK_STATES}


def scheduler_env(db_url: str, data_dir: Path) -> dict[str, str]:
    """Short leases; the big pool's jobs as small applications (5 JVMs on 2 cores)."""
    return processes.process_env(
        db_url,
        data_dir,
        warehouse=(data_dir / "warehouse").as_uri(),
        lease_ttl_s=str(TTL_S),
        lease_renew_interval_s="0.5",
        spark_warmup="false",
        pool_modes=json.dumps({"big": "application"}),
        max_concurrent_applications=str(TASKS),
        application_master="local[1]",
        application_driver_memory="512m",
        heartbeat_interval_s="1",
        stale_after_s="15",
        scheduler_poll_interval_s="1",
        # each job waits 10 s once its driver is up: most are still running when the next
        # leader's reaper looks (lease 3 s, reaper every 5 s), however fast they compact
        fault_job_delay_s="10",
    )


def plan_compactions(rt: Runtime, n: int) -> list[int]:
    """`n` tiny tables, each with a planned compaction in the application pool `big`."""
    ids = []
    for i in range(n):
        append_batches(make_table(rt, name=f"t{i}", partitioned=False), 4, rows=10)
        task_id = manage(rt, f"t{i}", {"compaction": {"min_small_files": 3, "min_input_files": 3}})
        with rt.engine.begin() as conn:
            conn.execute(text("UPDATE tasks SET pool = 'big' WHERE id = :id"), {"id": task_id})
        assert Worker(rt).run_once()
        ids.append(task_id)
    assert {task_of(rt, t).state for t in ids} == {"planned"}
    return ids


@pytest.fixture
def schedulers(db_url: str, tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    env = scheduler_env(db_url, tmp_path)
    procs = [processes.start(["scheduler"], env, tmp_path / f"scheduler-{i}.log") for i in range(2)]
    yield procs
    processes.stop(procs, timeout=10, crash=True)


def test_kill_the_leader_while_five_applications_run_and_the_standby_reattaches(
    rt: Runtime, schedulers: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    # The test's runtime (rt) shares the schedulers' database and warehouse (tmp_path's).
    task_ids = plan_compactions(rt, TASKS)
    holder, epoch = wait_for(lambda: processes.lease_holder(rt.engine), 30, "a leader")
    leader = next(p for p in schedulers if f"-{p.pid}-" in holder)

    # All five launched, and their drivers up (app ids stored): then the leader dies.
    def all_running() -> bool:
        runs = job_runs(rt)
        return len(runs) == TASKS and all(r.spark_app_id for r in runs)

    wait_for(all_running, 240, "five running applications", lambda: process_logs(tmp_path))
    running_at_kill = {r.task_id for r in job_runs(rt) if r.state == "running"}
    leader.send_signal(signal.SIGKILL)
    leader.wait(10)

    def all_terminal() -> bool:
        return all(task_of(rt, t).state in TERMINAL for t in task_ids)

    try:
        wait_for(all_terminal, 300, "every task to end", lambda: process_logs(tmp_path))
        new_holder, new_epoch = wait_for(
            lambda: processes.lease_holder(rt.engine), 5, "the new leader"
        )
        assert new_holder != holder and new_epoch > epoch

        runs = job_runs(rt)
        reattached = 0
        for task_id in task_ids:
            task = task_of(rt, task_id)
            with transaction(rt.engine) as s:
                history = repo.history(s, task_id)
            ends = [h for h in history if h.to_state in TERMINAL]
            assert len(ends) == 1, [(h.from_state, h.to_state, h.reason) for h in history]
            assert task.state == "succeeded" and task.attempt == 1  # never started again
            (run,) = [r for r in runs if r.task_id == task_id]
            assert run.state == "succeeded" and run.mode == "application"
            table = rt.catalog.load_table(f"sales.t{task_ids.index(task_id)}")
            commits = [
                snap
                for snap in table.snapshots()
                if snap.summary is not None and snap.summary.get(TASK_KEY) == str(task_id)
            ]
            assert len(commits) == 1 and run.committed_snapshot_id == commits[0].snapshot_id
            moves = [h for h in history if h.from_state == h.to_state == "running"]
            if moves:
                reattached += 1
                assert moves[0].leader_epoch == new_epoch
                assert ends[0].leader_epoch == new_epoch  # reported under the new epoch
            elif task_id in running_at_kill:
                # it reported while the dead leader's lease still ran (its fence held)
                assert ends[0].leader_epoch == epoch, (ends[0].leader_epoch, epoch)
        # Those still running when the new leader looked were re-attached (not re-planned).
        assert reattached > 0
        print(f"{reattached} of {len(running_at_kill)} running applications re-attached")
    finally:
        for run in job_runs(rt):
            pid = local_pid(run.submission_id)
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
