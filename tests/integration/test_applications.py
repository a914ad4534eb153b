"""Jobs of an application-mode pool run as their own Spark application (spark-submit of
`lakewarden.jobs.application_entry`, real processes), checked with pyiceberg; cancelling
kills it."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from helpers import (
    append_batches,
    application_leader,
    application_runtime,
    break_planned_rewrite,
    executor_error,
    make_table,
    manage,
    task_of,
    wait_for,
)
from sqlalchemy import select, text

from lakewarden.db.models import JobRun
from lakewarden.db.session import transaction
from lakewarden.fingerprint import fingerprint
from lakewarden.runtime import Runtime
from lakewarden.spark.commits import TASK_KEY
from lakewarden.states import TaskState
from lakewarden.tasks import repo
from services.scheduler.applications import local_pid
from services.scheduler.main import Scheduler
from services.worker.main import Worker

if TYPE_CHECKING:
    from lakewarden.spark.local_cluster import LocalCluster

pytestmark = pytest.mark.slow


# Small JVMs: several may run at once on 2 cores.
def app_runtime(db_url: str, tmp: Path, **overrides: object) -> Runtime:
    """A leader's runtime whose `big` pool runs each job as an application of its own."""
    own = {
        "warehouse": (tmp / "warehouse").as_uri(),
        "pool_modes": {"big": "application"},
        "application_driver_memory": "512m",
        "retry_base_s": 0.1,
    }
    return application_runtime(db_url, tmp, **{**own, **overrides})


@pytest.fixture
def app_rt(db_url: str, tmp_path: Path) -> Iterator[Runtime]:
    rt = app_runtime(db_url, tmp_path)
    yield rt
    rt.engine.dispose()


@pytest.fixture
def leader(app_rt: Runtime) -> Iterator[Scheduler]:
    """A leading scheduler (no Spark session of its own: its jobs are applications)."""
    with application_leader(app_rt) as sched:
        yield sched


def planned_in_big_pool(rt: Runtime, name: str, batches: int = 8, **policy: object) -> int:
    append_batches(make_table(rt, name=name), batches, rows=20, regions=("a", "b"))
    task_id = manage(
        rt, name, {"compaction": {"min_small_files": 4, "min_input_files": 4, **policy}}
    )
    with rt.engine.begin() as conn:
        conn.execute(text("UPDATE tasks SET pool = 'big' WHERE id = :id"), {"id": task_id})
    assert Worker(rt).run_once()
    assert task_of(rt, task_id).state == "planned"
    return task_id


def until_done(sched: Scheduler, task_id: int, timeout: float = 300) -> str:
    """Run the leader's loop (poll its applications) until the task is terminal."""

    def done() -> str | None:
        sched.applications.poll(sched.leading())
        state = task_of(sched.rt, task_id).state
        return state if state in ("succeeded", "failed", "cancelled", "pending") else None

    return wait_for(done, timeout, f"task {task_id} to finish", lambda: _logs(sched))


def _logs(sched: Scheduler) -> str:
    logs = sorted(sched.applications.log_dir.glob("*.log"))
    return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in logs)


def polled(sched: Scheduler) -> Scheduler:
    """The leader after one more look at its applications (as its loop takes)."""
    sched.applications.poll(sched.leading())
    return sched


def run_of(rt: Runtime, task_id: int) -> JobRun:
    with transaction(rt.engine) as s:
        run = s.scalars(select(JobRun).where(JobRun.task_id == task_id)).one()
        s.expunge(run)
    return run


def test_compaction_in_an_application_pool_runs_as_its_own_application(
    leader: Scheduler, app_rt: Runtime
) -> None:
    task_id = planned_in_big_pool(app_rt, "orders")
    before = fingerprint(app_rt.catalog.load_table("sales.orders"))
    assert leader.dispatch_once()
    assert not leader.inflight and leader.applications.task_ids() == {task_id}
    # The submission is stored as soon as it is launched.
    submitted = run_of(app_rt, task_id)
    assert submitted.mode == "application" and submitted.master == "local[1]"
    assert local_pid(submitted.submission_id) is not None
    assert submitted.deploy_mode == "client"

    assert until_done(leader, task_id) == "succeeded", _logs(leader)
    table = app_rt.catalog.load_table("sales.orders")
    after = fingerprint(table)
    assert after.data_files == 2  # one per partition
    assert (after.rows, after.checksum) == (before.rows, before.checksum)
    snapshot = table.current_snapshot()
    assert snapshot is not None and snapshot.summary is not None
    assert snapshot.summary.get(TASK_KEY) == str(task_id)
    run = run_of(app_rt, task_id)
    assert run.state == "succeeded" and run.committed_snapshot_id == snapshot.snapshot_id
    # Its own application (not the scheduler's session: it has none), heartbeating.
    assert run.spark_app_id and run.spark_app_id.startswith("local-")
    assert run.heartbeat_at is not None
    assert leader._spark is None
    wait_for(
        lambda: not polled(leader).applications.running,
        60,
        "the leader to forget the ended application",
    )


def test_cancelling_the_task_kills_its_application(leader: Scheduler, app_rt: Runtime) -> None:
    task_id = planned_in_big_pool(app_rt, "cancelled")
    assert leader.dispatch_once()
    # Running: its driver stored the application id.
    wait_for(lambda: run_of(app_rt, task_id).spark_app_id, 120, "the app id", lambda: _logs(leader))
    pid = local_pid(run_of(app_rt, task_id).submission_id)
    assert pid is not None
    app = leader.applications.running[task_id]
    with transaction(app_rt.engine) as s:
        repo.transition(s, task_id, TaskState.CANCELLED, actor="test", reason="by hand")
    assert until_done(leader, task_id) == "cancelled"
    wait_for(
        lambda: polled(leader) and run_of(app_rt, task_id).state == "cancelled",
        60,
        "the run to be cancelled",
    )

    def group_gone() -> bool:
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return True
        return False

    wait_for(group_gone, 60, "the application's processes to end")
    assert app.killed == "cancelled"  # killed by the leader, not ended by itself
    assert app.process is not None and app.process.returncode not in (None, 0)
    # Nothing of it reached the table.
    table = app_rt.catalog.load_table("sales.cancelled")
    assert all(
        s.summary is None or s.summary.get(TASK_KEY) != str(task_id) for s in table.snapshots()
    )


def test_an_application_past_its_timeout_is_killed_and_the_attempt_fails(
    leader: Scheduler, app_rt: Runtime
) -> None:
    # 3 s: the application is still starting its JVM.
    task_id = planned_in_big_pool(app_rt, "slow", timeout_minutes=0.05, max_attempts=1)
    assert leader.dispatch_once()
    app = leader.applications.running[task_id]
    assert until_done(leader, task_id) == "failed", _logs(leader)
    assert app.killed == "timeout"
    assert app.process is not None and app.process.returncode not in (None, 0)
    run = run_of(app_rt, task_id)
    assert run.state == "failed" and run.error is not None
    assert run.error.startswith("TimeoutError: job exceeded its timeout of 3s and was killed")


def test_an_application_on_a_standalone_cluster_is_watched_through_its_master(
    db_url: str, tmp_path: Path, spark_cluster: LocalCluster
) -> None:
    rt = app_runtime(
        db_url,
        tmp_path,
        application_master=spark_cluster.master_url,
        spark_master_web_url=spark_cluster.web_url,
        spark_conf={"spark.executor.memory": "512m", "spark.cores.max": "1"},
    )
    try:
        with application_leader(rt) as sched:
            task_id = planned_in_big_pool(rt, "standalone")
            assert sched.dispatch_once()
            assert until_done(sched, task_id) == "succeeded", _logs(sched)
            run = run_of(rt, task_id)
            assert run.master == spark_cluster.master_url and run.spark_app_id
            assert run.spark_app_id.startswith("app-")  # the master's id, not a local one
            # The master knows it, and saw it finish.
            wait_for(
                lambda: spark_cluster.app_state(run.spark_app_id or "") == "FINISHED",
                60,
                "the master to list the application as finished",
            )
            after = fingerprint(rt.catalog.load_table("sales.standalone"))
            assert after.data_files == 2
    finally:
        rt.engine.dispose()


def test_a_failed_application_links_its_history_page_and_keeps_spark_s_error_lines(
    db_url: str, tmp_path: Path
) -> None:
    events = tmp_path / "spark-events"
    history = "http://history.test:18080"
    rt = app_runtime(
        db_url,
        tmp_path,
        spark_ui_enabled=True,
        spark_event_log_dir=str(events),
        spark_history_url=history,
    )
    try:
        with application_leader(rt) as sched:
            task_id = planned_in_big_pool(rt, "history", max_attempts=1)
            lost = break_planned_rewrite(rt, task_id, rt.catalog.load_table("sales.history"))
            assert sched.dispatch_once()
            assert until_done(sched, task_id) == "failed", _logs(sched)
            run = run_of(rt, task_id)
            app_id = run.spark_app_id
            assert app_id and app_id.startswith("local-")
            assert run.ui_url == f"{history}/history/{app_id}"
            # Its driver's Spark log, recorded by the application itself.
            assert run.log_tail and lost in run.log_tail
            assert re.search(executor_error(f"lakewarden-task-{task_id}-1"), run.log_tail, re.M)
            # The event log the history server reads (rolling: a directory of files), complete
            # (its status file no longer .inprogress) once the application stopped its session.
            log = events / f"eventlog_v2_{app_id}"
            complete = log / f"appstatus_{app_id}"
            wait_for(complete.exists, 60, "the application's event log", lambda: _logs(sched))
            (first,) = log.glob(f"events_1_{app_id}*")
            assert '"Event":"SparkListenerApplicationStart"' in first.read_text()
            # The UI was on in the application (the live link, while it ran).
            output = (
                rt.settings.data_dir / "applications" / f"{run.spark_job_group}.log"
            ).read_text()
            assert "Successfully started service 'SparkUI'" in output
    finally:
        rt.engine.dispose()
