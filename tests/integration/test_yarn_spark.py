"""Spark on YARN (a real ResourceManager and NodeManager: the `yarn` fixture): compactions
submitted by the real scheduler process as YARN applications, in client mode and in
cluster mode (the driver in the ApplicationMaster's container), checked with pyiceberg;
an application killed from outside through the ResourceManager's REST API; a
ResourceManager that does not answer; kill -9 of the leader while an application runs on
YARN, and its re-attachment by the standby."""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import append_batches, free_port, make_table, manage, task_of, wait_for
from sqlalchemy import select, text

from benchmarks import processes
from lakewarden.db.models import JobRun
from lakewarden.db.session import transaction
from lakewarden.fingerprint import Fingerprint, fingerprint
from lakewarden.runtime import Runtime
from lakewarden.spark import yarn as rm
from lakewarden.spark.commits import TASK_KEY
from lakewarden.spark.local_yarn import LocalYarn
from lakewarden.tasks import repo
from services.worker.main import Worker

pytestmark = [pytest.mark.slow, pytest.mark.spark]

TERMINAL = {"succeeded", "failed", "cancelled", "skipped"}


def scheduler_env(rt: Runtime, yarn: LocalYarn, deploy_mode: str, **values: str) -> dict[str, str]:
    """A scheduler whose pool `big` submits each job as a YARN application."""
    settings = {
        "warehouse": rt.settings.warehouse_uri,
        "spark_warmup": "false",  # the applications are the proof; the session stays cold
        "pool_modes": json.dumps({"big": "application"}),
        "scheduler_poll_interval_s": "1",
        "heartbeat_interval_s": "1",
        **yarn.application_values(deploy_mode),
        **values,
    }
    env = processes.process_env(rt.db_url, rt.settings.data_dir, drop="LAKEWARDEN_")
    env.update(processes.setting_vars(settings))
    return {**env, **yarn.client_env()}


def plan_compaction(rt: Runtime, name: str) -> int:
    """A small-file table and its compaction, planned, in the application pool `big`."""
    append_batches(make_table(rt, name=name, partitioned=False), 6, rows=20)
    task_id = manage(rt, name, {"compaction": {"min_small_files": 3, "min_input_files": 3}})
    with rt.engine.begin() as conn:
        conn.execute(text("UPDATE tasks SET pool = 'big' WHERE id = :id"), {"id": task_id})
    assert Worker(rt).run_once()
    assert task_of(rt, task_id).state == "planned"
    return task_id


def runs_of(rt: Runtime, task_id: int) -> list[JobRun]:
    with transaction(rt.engine) as s:
        runs = list(
            s.scalars(select(JobRun).where(JobRun.task_id == task_id).order_by(JobRun.attempt))
        )
        s.expunge_all()
    return runs


def logs(data_dir: Path) -> str:
    files = sorted(data_dir.glob("scheduler*.log")) + sorted(
        (data_dir / "applications").glob("*.log")
    )
    return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in files)


@pytest.fixture
def started(rt: Runtime) -> Iterator[list[subprocess.Popen[bytes]]]:
    """The scheduler processes a test starts, stopped (hard) at its end."""
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    processes.stop(procs, timeout=15, crash=True)


def check_compacted(
    rt: Runtime, yarn: LocalYarn, task_id: int, name: str, before: Fingerprint, mode: str
) -> None:
    """The task succeeded, pyiceberg reads the same rows from one file, its run was a YARN
    application of `mode` that YARN ran to its end, its secrets file gone."""
    data_dir = rt.settings.data_dir
    task = task_of(rt, task_id)
    assert task.state == "succeeded", (task.reason, logs(data_dir))
    after = fingerprint(rt.catalog.load_table(f"sales.{name}"))
    assert before.data_files == 6 and after.data_files == 1
    assert (after.rows, after.checksum) == (before.rows, before.checksum)
    (run,) = runs_of(rt, task_id)
    assert (run.mode, run.master, run.deploy_mode) == ("application", "yarn", mode)
    # The driver stored YARN's application id; YARN ran it to success.
    yarn_id = run.spark_app_id or ""
    assert yarn_id.startswith("application_")
    wait_for(lambda: (yarn.app(yarn_id) or {}).get("state") == "FINISHED", 60, "FINISHED")
    # A cluster-mode submission's settings file (secrets) does not outlive it: gone once
    # the scheduler saw spark-submit exit.
    wait_for(
        lambda: not list((data_dir / "applications").glob("*.properties")),
        30,
        "no secrets file",
        lambda: logs(data_dir),
    )


def test_compaction_as_a_yarn_application_in_client_mode(
    rt: Runtime, yarn: LocalYarn, started: list[subprocess.Popen[bytes]]
) -> None:
    data_dir = rt.settings.data_dir
    env = scheduler_env(rt, yarn, "client")
    started.append(processes.start(["scheduler"], env, data_dir / "scheduler.log"))
    task_id = plan_compaction(rt, "y_client")
    before = fingerprint(rt.catalog.load_table("sales.y_client"))
    wait_for(
        lambda: task_of(rt, task_id).state in TERMINAL, 240, "the task", lambda: logs(data_dir)
    )
    check_compacted(rt, yarn, task_id, "y_client", before, "client")


def test_an_application_killed_from_outside_fails_its_run_with_yarns_word(
    rt: Runtime, yarn: LocalYarn, started: list[subprocess.Popen[bytes]]
) -> None:
    data_dir = rt.settings.data_dir
    # An executor of 5 GB (+ overhead) never fits beside the ApplicationMaster on the 6 GB
    # node: the job waits for one, and is killed from outside meanwhile.
    env = scheduler_env(rt, yarn, "client")
    conf = json.loads(env["LAKEWARDEN_SPARK_CONF"])
    conf["spark.executor.memory"] = "5g"  # 5g + overhead: more than the node has left
    env["LAKEWARDEN_SPARK_CONF"] = json.dumps(conf)
    env["LAKEWARDEN_RETRY_BASE_S"] = "600"  # the retry is planned, not run here
    started.append(processes.start(["scheduler"], env, data_dir / "scheduler.log"))
    task_id = plan_compaction(rt, "y_killed")

    def app_id() -> str | None:
        runs = runs_of(rt, task_id)
        return runs[0].spark_app_id if runs else None

    yarn_id = wait_for(app_id, 180, "the driver's application id", lambda: logs(data_dir))
    rm.kill(yarn.web_url, yarn_id)
    wait_for(
        lambda: task_of(rt, task_id).state == "pending", 120, "a retry", lambda: logs(data_dir)
    )
    (run,) = runs_of(rt, task_id)
    assert run.state == "failed"
    # YARN's word (the test ResourceManager serves no diagnostics text: spark.yarn).
    assert run.error and "YARN says KILLED" in run.error, run.error
    task = task_of(rt, task_id)
    assert "attempt 1/" in (task.reason or "") and "re-planning" in (task.reason or "")


def test_an_unreachable_resourcemanager_fails_the_run_naming_it(
    rt: Runtime, yarn: LocalYarn, started: list[subprocess.Popen[bytes]]
) -> None:
    data_dir = rt.settings.data_dir
    nowhere = f"http://127.0.0.1:{free_port()}"
    env = scheduler_env(rt, yarn, "client", yarn_resourcemanager_url=nowhere, retry_base_s="600")
    started.append(processes.start(["scheduler"], env, data_dir / "scheduler.log"))
    task_id = plan_compaction(rt, "y_no_rm")
    wait_for(lambda: task_of(rt, task_id).state == "pending", 60, "a retry", lambda: logs(data_dir))
    (run,) = runs_of(rt, task_id)
    assert run.state == "failed" and run.error
    assert f"the YARN ResourceManager at {nowhere} did not answer" in run.error
    assert run.spark_app_id is None  # nothing was submitted


def test_cluster_mode_and_kill_9_of_the_leader_the_standby_reattaches_the_application(
    rt: Runtime, yarn: LocalYarn, started: list[subprocess.Popen[bytes]]
) -> None:
    data_dir = rt.settings.data_dir
    # The job waits 15 s before its work: still running when the standby's reaper (every
    # 5 s, once its lease is taken 3 s after the kill) looks, however fast the compaction.
    env = scheduler_env(
        rt,
        yarn,
        "cluster",
        lease_ttl_s="3",
        lease_renew_interval_s="0.5",
        stale_after_s="15",
        fault_job_delay_s="15",
    )
    for i in range(2):
        started.append(processes.start(["scheduler"], env, data_dir / f"scheduler-{i}.log"))
    holder, epoch = wait_for(lambda: processes.lease_holder(rt.engine), 30, "a leader")
    leader = next(p for p in started if f"-{p.pid}-" in holder)
    task_id = plan_compaction(rt, "y_failover")
    before = fingerprint(rt.catalog.load_table("sales.y_failover"))

    def driver_up() -> bool:
        runs = runs_of(rt, task_id)
        return bool(runs and runs[0].spark_app_id)

    wait_for(driver_up, 180, "the driver on YARN", lambda: logs(data_dir))
    leader.send_signal(signal.SIGKILL)
    leader.wait(10)
    wait_for(
        lambda: task_of(rt, task_id).state in TERMINAL, 240, "the task", lambda: logs(data_dir)
    )
    # Cluster mode's compaction, checked as client mode's is.
    check_compacted(rt, yarn, task_id, "y_failover", before, "cluster")
    task = task_of(rt, task_id)
    assert task.attempt == 1
    with transaction(rt.engine) as s:
        history = repo.history(s, task_id)
    moves = [h for h in history if h.from_state == h.to_state == "running"]
    assert len(moves) == 1 and (moves[0].leader_epoch or 0) > epoch  # re-attached, not re-planned
    assert "re-attached" in (moves[0].reason or "")
    commits = [
        snap
        for snap in rt.catalog.load_table("sales.y_failover").snapshots()
        if snap.summary is not None and snap.summary.get(TASK_KEY) == str(task_id)
    ]
    (run,) = runs_of(rt, task_id)
    assert len(commits) == 1 and run.committed_snapshot_id == commits[0].snapshot_id
