"""A submitted application reports under the fence of the leader its run is assigned to:
refused once that leader is deposed, accepted after the new leader re-attaches the run.
After a failover the new leader re-attaches a live application, finishes a dead one that
committed as succeeded (never re-run), and re-plans a dead one that did not. No JVM: the
application's side is `lakewarden.jobs.application_entry`'s fence and `finish_run`, called here."""

from __future__ import annotations

import dataclasses
import os
import socket

import pyarrow as pa
from helpers import SCHEMA, make_table, manage, stored, task_of
from sqlalchemy import select, text

from lakewarden.db.locks import DBLocks
from lakewarden.db.models import JobRun
from lakewarden.db.session import transaction
from lakewarden.jobs.application_entry import assigned_fence, fence_waiting_for_leader
from lakewarden.leader import Fence, acquire_or_renew
from lakewarden.runtime import Runtime
from lakewarden.spark.commits import ATTEMPT_KEY, TASK_KEY
from lakewarden.tasks import repo
from lakewarden.tasks.runs import finish_run
from services.scheduler.applications import Applications
from services.scheduler.reaper import abandon_orphans

LEASE = DBLocks.SCHEDULER_LEASE


def _lead(rt: Runtime, who: str) -> Fence:
    """`who` takes the lease (deposing the holder: its lease is made to lapse first)."""
    with rt.engine.begin() as conn:
        conn.execute(
            text("UPDATE leader_lease SET expires_at = now() WHERE holder <> :w"), {"w": who}
        )
        fence = acquire_or_renew(conn, LEASE, who, 60.0)
    assert fence is not None
    return fence


def _running_application(
    rt: Runtime, name: str, leader: Fence, submission_id: str, *, heartbeat_age_s: float = 0
) -> int:
    """A task running as an application `leader` launched (attempt 1)."""
    task_id = manage(rt, name, {})
    with transaction(rt.engine) as s:
        s.execute(
            text("UPDATE tasks SET state = 'running', attempt = 1, holder = :h WHERE id = :id"),
            {"h": leader.holder, "id": task_id},
        )
        s.add(
            JobRun(
                task_id=task_id,
                attempt=1,
                state="running",
                scheduler_id=leader.holder,
                leader_epoch=leader.epoch,
                spark_job_group=f"lakewarden-task-{task_id}-1",
                mode="application",
                master="local[1]",
                submission_id=submission_id,
            )
        )
        s.flush()
        s.execute(
            text(
                "UPDATE job_runs SET heartbeat_at = now() - make_interval(secs => :age), "
                "started_at = now() - make_interval(secs => :age) WHERE task_id = :id"
            ),
            {"age": heartbeat_age_s, "id": task_id},
        )
    return task_id


def _run(rt: Runtime, task_id: int) -> JobRun:
    with transaction(rt.engine) as s:
        run = s.scalars(select(JobRun).where(JobRun.task_id == task_id)).one()
        s.expunge(run)
    return run


def test_a_result_under_a_deposed_epoch_is_refused_and_accepted_once_reattached(
    rt: Runtime,
) -> None:
    old = _lead(rt, "scheduler-old")
    # A live application: its process is this one (same host, alive).
    task_id = _running_application(rt, "t1", old, f"pid:{socket.gethostname()}:{os.getpid()}")
    assert assigned_fence(rt, task_id, 1) == (old, True)

    new = _lead(rt, "scheduler-new")
    assert new.epoch == old.epoch + 1
    # The application finishes now: its leader is deposed and nobody re-attached it yet.
    fence = fence_waiting_for_leader(rt, task_id, 1, deadline_s=0.0)
    assert fence == old
    assert finish_run(rt, fence, task_id, 1, metrics={"x": 1}) == "fenced"
    assert task_of(rt, task_id).state == "running"
    assert _run(rt, task_id).state == "running"

    # The new leader's reaper re-attaches it instead of re-planning it.
    apps = Applications(rt)
    assert abandon_orphans(rt, new, 30.0, set(), applications=apps) == 0
    assert apps.task_ids() == {task_id}
    task, run = task_of(rt, task_id), _run(rt, task_id)
    assert (task.state, task.holder, task.attempt) == ("running", new.holder, 1)
    assert (run.scheduler_id, run.leader_epoch) == (new.holder, new.epoch)

    # The same report now goes through, under the new leader's epoch.
    fence = fence_waiting_for_leader(rt, task_id, 1, deadline_s=0.0)
    assert fence == new
    assert finish_run(rt, fence, task_id, 1, metrics={"x": 1}) == "succeeded"
    with transaction(rt.engine) as s:
        history = [(h.from_state, h.to_state, h.leader_epoch) for h in repo.history(s, task_id)]
    assert ("running", "running", new.epoch) in history  # the re-attachment, fenced
    assert history[-1] == ("running", "succeeded", new.epoch)
    assert stored(rt, JobRun, run.id).state == "succeeded"


def test_a_dead_application_that_committed_is_finished_never_re_run(rt: Runtime) -> None:
    old = _lead(rt, "scheduler-old")
    table = make_table(rt, name="t2", partitioned=False)
    task_id = _running_application(rt, "t2", old, "pid:another-host:1", heartbeat_age_s=3600)
    # It committed (its commit carries its task id), then died before reporting.
    table.append(
        pa.table({"id": [1], "region": ["a"], "amount": [1.0]}, schema=SCHEMA),
        snapshot_properties={TASK_KEY: str(task_id), ATTEMPT_KEY: "1"},
    )
    committed = table.refresh().current_snapshot()
    assert committed is not None

    new = _lead(rt, "scheduler-new")
    assert abandon_orphans(rt, new, 30.0, set(), applications=Applications(rt)) == 0
    task, run = task_of(rt, task_id), _run(rt, task_id)
    assert (task.state, task.attempt) == ("succeeded", 1)
    assert run.state == "succeeded" and run.committed_snapshot_id == committed.snapshot_id
    assert run.metrics is not None and run.metrics["recovered_commit_of_attempt"] == "1"


def test_a_killed_leaders_settings_file_goes_once_its_run_is_over(rt: Runtime) -> None:
    # A leader killed after spark-submit read its settings file (secrets) cannot drop it,
    # and the next leader never adopts an application that reported before its reaper ran.
    old = _lead(rt, "scheduler-old")
    over = _running_application(rt, "t5", old, "pid:another-host:1")
    live = _running_application(rt, "t6", old, "pid:another-host:2")
    assert finish_run(rt, old, over, 1, metrics={"x": 1}) == "succeeded"
    apps = Applications(rt)  # any scheduler on the host: it leads nothing
    apps.log_dir.mkdir(parents=True)
    files = {t: apps.log_dir / f"lakewarden-task-{t}-1.properties" for t in (over, live)}
    for path in files.values():
        path.write_text("spark.yarn.appMasterEnv.LAKEWARDEN_DATABASE_URL=secret\n")
    other = apps.log_dir / "lakewarden-task-1-1.log"  # not a settings file: kept
    other.write_text("log\n")

    apps.poll(None)
    assert not files[over].exists()
    assert files[live].exists() and other.exists()  # its application may not have read it


def test_a_dead_application_without_a_commit_is_re_planned(rt: Runtime) -> None:
    old = _lead(rt, "scheduler-old")
    make_table(rt, name="t3", partitioned=False)
    task_id = _running_application(rt, "t3", old, "pid:another-host:1", heartbeat_age_s=3600)
    new = _lead(rt, "scheduler-new")
    apps = Applications(rt)
    assert abandon_orphans(rt, new, 30.0, set(), applications=apps) == 1
    assert not apps.task_ids()
    assert task_of(rt, task_id).state == "pending"
    assert _run(rt, task_id).state == "abandoned"


def test_dispatch_skips_the_pools_of_a_full_mode_only(rt: Runtime) -> None:
    """A scheduler whose applications are at max_concurrent_applications still dispatches
    session pools' tasks, and the other way round."""
    import json

    from services.scheduler.dispatch import _NEXT_PLANNED

    big, small = manage(rt, "big", {}), manage(rt, "small", {})
    with rt.engine.begin() as conn:
        conn.execute(text("UPDATE tasks SET state = 'planned', plan = '{}'"))
        conn.execute(
            text("UPDATE tasks SET pool = 'big', priority = 9 WHERE id = :id"), {"id": big}
        )

    def pick(full_modes: list[str]) -> int | None:  # the modes with no room
        with transaction(rt.engine) as s:
            row = s.execute(
                _NEXT_PLANNED,
                {
                    "pool_limits": "{}",
                    "pool_modes": json.dumps({"big": "application"}),
                    "rooms": json.dumps({mode: 0 for mode in full_modes}),
                },
            ).one_or_none()
        return None if row is None else int(row[0])

    assert pick([]) == big  # the higher priority
    assert pick(["application"]) == small
    assert pick(["session"]) == big
    assert pick(["session", "application"]) is None
    # A Hudi table's job is always an application: in a session pool, it waits for room.
    with rt.engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE managed_tables SET format = 'hudi' "
                "WHERE id = (SELECT table_id FROM tasks WHERE id = :id)"
            ),
            {"id": small},
        )
    assert pick(["application"]) is None


def test_an_application_that_cannot_be_submitted_fails_its_task_at_once(rt: Runtime) -> None:
    """A Kubernetes master without an image: no attempt could ever start. The task fails
    (not left running with no one watching it)."""
    from lakewarden.catalogs.catalog import TableRef
    from lakewarden.jobs.execute import Job

    leader = _lead(rt, rt.process_id)
    task_id = _running_application(rt, "t4", leader, "")
    k8s = dataclasses.replace(
        rt, settings=rt.settings.model_copy(update={"application_master": "k8s://https://k:6443"})
    )
    apps = Applications(k8s)
    apps.launch(leader, Job(task_id, 1, "compaction", "lake", TableRef("sales", "t4")), 60.0)
    assert not apps.task_ids()
    task = task_of(rt, task_id)
    assert task.state == "failed" and "kubernetes_image" in (task.reason or "")
    assert _run(rt, task_id).state == "failed"
