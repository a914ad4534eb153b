"""B13: jobs as submitted applications (`pool_modes`: "application").

1. Overhead per task on a tiny table (B6's shape), one application at a time, its phases
   from the leader's and the database's clocks (one host, one clock):
   dispatch + spark-submit launched -> the driver's Python runs (its first heartbeat: the
   SparkSubmit JVM and the Python interpreter cold) -> its app id stored (SparkContext and
   session up: the rest of the cold JVM start) -> the job committed (the snapshot's
   timestamp) -> the outcome reported (the run's finished_at) -> the process gone.
   Against the warm session's per-task time (dispatch -> reported, in-process scheduler,
   session already warm), measured alternately with it.
2. The leader killed (kill -9) with 5 applications running: two real scheduler
   processes; every task must end in exactly one terminal state, none started again
   (attempt 1, one commit per task in its table's history).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

from sqlalchemy import select, text

from benchmarks import data, processes
from benchmarks.harness import Context, Figure, Stat, measuring
from lakewarden.db.models import JobRun, ManagedTable, Task
from lakewarden.db.session import transaction
from lakewarden.process import Ticker
from lakewarden.runtime import Runtime
from lakewarden.spark.commits import TASK_KEY
from lakewarden.states import RunMode
from lakewarden.tasks import repo
from services.scheduler.applications import local_pid
from services.scheduler.main import Scheduler
from services.worker.main import Worker

ROOT = Path(__file__).resolve().parent.parent
NAMESPACE = "apps"
TINY = data.Shape(1, 4, 100)  # B6's tiny table: one append of 4 small files
POLICY: dict[str, Any] = {
    "compaction": {"min_small_files": 2, "min_input_files": 2},
    "clean": {"enabled": False},
}
APPLICATION = {
    "pool_modes": {"big": RunMode.APPLICATION},  # model_copy does not validate: the enum itself
    "application_master": "local[1]",
    "application_driver_memory": "512m",
    "heartbeat_interval_s": 1.0,
    "spark_warmup": False,
}
TERMINAL = ("succeeded", "failed", "skipped", "cancelled")
KILLED_APPS = 5
PHASES = ("launch", "jvm_and_python", "spark_session", "job", "report", "exit")


def _runtime(rt: Runtime, **settings: Any) -> Runtime:
    return dataclasses.replace(rt, settings=rt.settings.model_copy(update=settings), process_id="")


def _clear(rt: Runtime) -> None:
    """A clean slate in the benchmark's own database: no tables of ours, no lease."""
    with rt.engine.begin() as conn:
        conn.execute(text("DELETE FROM managed_tables WHERE namespace = :n"), {"n": NAMESPACE})
        conn.execute(text("DELETE FROM leader_lease"))


def _planned(rt: Runtime, name: str, pool: str, seed: int) -> int:
    """A tiny table with a planned compaction in `pool`."""
    data.create(rt.catalog, f"{NAMESPACE}.{name}", TINY, seed=seed)
    with transaction(rt.engine) as s:
        row = ManagedTable(
            catalog=rt.settings.catalog_name, namespace=NAMESPACE, name=name, policy=POLICY
        )
        s.add(row)
        s.flush()
        task_id = repo.create_task(
            s,
            table_id=row.id,
            kind="compaction",
            trigger={"reason": "bench"},
            actor="bench",
            pool=pool,
        )
    assert task_id is not None
    plan_it(rt, task_id)
    return task_id


def plan_it(rt: Runtime, task_id: int, what: str = "") -> None:
    """Plan the pending task with a worker of this process; raise if it ends unplanned."""
    worker = Worker(rt)
    while task_state(rt, task_id) == "pending" and worker.run_once():
        pass
    if task_state(rt, task_id) != "planned":
        raise RuntimeError(f"{what}task {task_id} was not planned: {task_state(rt, task_id)}")


def task_state(rt: Runtime, task_id: int) -> str:
    with transaction(rt.engine) as s:
        return str(s.scalar(select(Task.state).where(Task.id == task_id)))


def job_run(rt: Runtime, task_id: int) -> JobRun:
    with transaction(rt.engine) as s:
        run = s.scalars(select(JobRun).where(JobRun.task_id == task_id)).one()
        s.expunge(run)
    return run


def _leading(rt: Runtime) -> tuple[Scheduler, threading.Event]:
    sched = Scheduler(rt)
    sched.renew()
    if sched.leading() is None:
        raise RuntimeError("the benchmark's scheduler could not take the lease")
    stop = threading.Event()
    Ticker("lease", 1.0, sched.renew, stop).start()
    return sched, stop


def _application_task(sched: Scheduler, task_id: int) -> dict[str, float]:
    """One task as its own application: the phases' seconds."""
    rt = sched.rt
    t0 = time.time()
    if not sched.dispatch_once():
        raise RuntimeError("nothing dispatched")
    launched = time.time()
    app = sched.applications.running[task_id]
    seen: dict[str, float] = {}
    next_poll = 0.0
    while True:
        run = job_run(rt, task_id)
        now = time.time()
        if run.heartbeat_at is not None:
            seen.setdefault("driver", now)
        if run.spark_app_id:
            seen.setdefault("app_id", now)
        if run.state != "running":
            break
        if now >= next_poll:  # as the leader's loop does (timeouts, an app that died)
            sched.applications.poll(sched.leading())
            next_poll = now + 1.0
        if now - t0 > 600:
            raise RuntimeError(f"task {task_id} did not finish in 10 min")
        time.sleep(0.05)
    if run.state != "succeeded" or run.finished_at is None:
        raise RuntimeError(f"task {task_id}: {run.state}: {run.error}")
    assert app.process is not None
    app.process.wait(120)
    exited = time.time()
    sched.applications.poll(sched.leading())  # forgets it
    table = rt.catalog.load_table(f"{NAMESPACE}.{_name_of(rt, task_id)}")
    commit = next(
        s.timestamp_ms / 1000
        for s in table.snapshots()
        if s.summary is not None and s.summary.get(TASK_KEY) == str(task_id)
    )
    reported = run.finished_at.timestamp()
    driver = seen.get("driver", seen.get("app_id", commit))
    app_id = seen.get("app_id", commit)
    return {
        "launch": launched - t0,
        "jvm_and_python": driver - launched,
        "spark_session": app_id - driver,
        "job": commit - app_id,
        "report": reported - commit,
        "exit": exited - reported,
        "total": reported - t0,
        "cold_start": app_id - launched,
    }


def _name_of(rt: Runtime, task_id: int) -> str:
    with transaction(rt.engine) as s:
        return str(
            s.scalar(
                select(ManagedTable.name)
                .join(Task, Task.table_id == ManagedTable.id)
                .where(Task.id == task_id)
            )
        )


def _session_task(sched: Scheduler, task_id: int) -> float:
    """One task in the warm session: dispatch -> reported."""
    t0 = time.perf_counter()
    if not sched.dispatch_once():
        raise RuntimeError("nothing dispatched")
    state = sched.inflight[task_id].future.result(timeout=600)
    if state != "succeeded":
        raise RuntimeError(f"task {task_id}: {state}")
    return time.perf_counter() - t0


def _overhead(ctx: Context, fig: Figure) -> None:
    rt = _runtime(ctx.rt, **APPLICATION)
    _clear(rt)
    sched, stop = _leading(rt)
    sched._spark = ctx.spark  # the warm session, for the session-mode tasks
    try:
        _session_task(sched, _planned(rt, "warmup", "default", 0))  # warm it
        apps: list[dict[str, float]] = []
        warm: list[float] = []
        for i in range(ctx.repeats):
            warm.append(_session_task(sched, _planned(rt, f"s{i}", "default", i)))
            apps.append(_application_task(sched, _planned(rt, f"a{i}", "big", i)))
    finally:
        stop.set()
        sched.applications.kill_all()
    fig.ratio = Stat.of([a["total"] / w for a, w in zip(apps, warm, strict=True)])
    fig.ratio_label = "application / warm session, per task"
    fig.values.update(
        {
            "warm_session_s": Stat.of(warm),
            "application_total_s": Stat.of([a["total"] for a in apps]),
            "cold_start_s": Stat.of([a["cold_start"] for a in apps]),
            **{f"phase_{p}_s": Stat.of([a[p] for a in apps]) for p in PHASES},
        }
    )


# --- the leader killed with applications running ---------------------------------------------


def _scheduler_env(ctx: Context, data_dir: Path) -> dict[str, str]:
    settings = ctx.rt.settings.model_copy(
        update={
            **APPLICATION,
            "data_dir": data_dir,
            "warehouse": ctx.rt.settings.warehouse_uri,  # the benchmark's, not data_dir's
            "lease_ttl_s": 3.0,
            "lease_renew_interval_s": 0.5,
            "max_concurrent_applications": KILLED_APPS,
            "stale_after_s": 15.0,
            "scheduler_poll_interval_s": 1.0,
        }
    )
    return processes.process_env(ctx.rt.db_url, drop="LAKEWARDEN_", settings=settings)


def _wait(fn: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(0.1)
    raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}")


def _leader_killed(ctx: Context, fig: Figure, n: int) -> bool:
    rt = ctx.rt
    _clear(rt)
    task_ids = [_planned(rt, f"k{i}", "big", i) for i in range(n)]
    work = ctx.work_dir / "b13-failover"
    work.mkdir(parents=True, exist_ok=True)
    env = _scheduler_env(ctx, work)
    procs = [
        processes.start(["scheduler"], env, work / f"scheduler-{i}.log", cwd=ROOT) for i in range(2)
    ]
    try:
        holder, epoch = _wait(lambda: processes.lease_holder(rt.engine), 60, "a leader")
        leader = next(p for p in procs if f"-{p.pid}-" in holder)

        def drivers_up() -> bool:
            runs = [_runs_of(rt, t) for t in task_ids]
            return all(len(r) == 1 and r[0].spark_app_id for r in runs)

        _wait(drivers_up, 600, f"{n} running applications")
        running = sum(1 for t in task_ids if job_run(rt, t).state == "running")
        standby = next(p for p in procs if p is not leader)
        standby_cpu = _cpu_s(standby.pid)
        leader.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        leader.wait(10)
        new_holder, new_epoch = _wait(
            lambda: (now := processes.lease_holder(rt.engine)) and now[0] != holder and now,
            60,
            "a new leader",
        )
        takeover_s = time.monotonic() - killed
        _wait(lambda: all(task_state(rt, t) in TERMINAL for t in task_ids), 600, "every task")
        all_done_s = time.monotonic() - killed
        # What watching the applications costs the leader: its CPU from the kill (it was
        # the standby) until every task ended, per second of that time.
        leader_cpu_share = (_cpu_s(standby.pid) - standby_cpu) / all_done_s
        ends, attempts, commits, reattached, states = [], [], [], 0, []
        for task_id in task_ids:
            with transaction(rt.engine) as s:
                history = repo.history(s, task_id)
                attempts.append(int(s.scalar(select(Task.attempt).where(Task.id == task_id)) or 0))
            ends.append(sum(1 for h in history if h.to_state in TERMINAL))
            reattached += any(h.from_state == h.to_state == "running" for h in history)
            states.append(task_state(rt, task_id))
            table = rt.catalog.load_table(f"{NAMESPACE}.{_name_of(rt, task_id)}")
            commits.append(
                sum(
                    1
                    for s in table.snapshots()
                    if s.summary is not None and s.summary.get(TASK_KEY) == str(task_id)
                )
            )
    finally:
        processes.stop(procs, timeout=10, crash=True)
        for task_id in task_ids:
            for run in _runs_of(rt, task_id):
                pid = local_pid(run.submission_id)
                if pid is not None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(pid, signal.SIGKILL)
    re_run = sum(1 for a, c in zip(attempts, commits, strict=True) if a > 1 or c > 1)
    ok = all(e == 1 for e in ends) and re_run == 0 and all(s == "succeeded" for s in states)
    fig.values.update(
        {
            "killed_with_running": running,
            "reattached": reattached,
            "terminal_states_per_task": ends,
            "final_states": states,
            "attempts": attempts,
            "commits_per_task": commits,
            "re_run": re_run,
            "takeover_s": takeover_s,
            "new_leader_cpu_share_while_watching": leader_cpu_share,
            "all_terminal_after_kill_s": all_done_s,
            "epochs": [epoch, new_epoch],
            "new_leader_is_standby": new_holder != holder,
        }
    )
    return ok


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) process `pid` has used, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _runs_of(rt: Runtime, task_id: int) -> list[JobRun]:
    with transaction(rt.engine) as s:
        runs = list(s.scalars(select(JobRun).where(JobRun.task_id == task_id)))
        s.expunge_all()
    return runs


def b13(ctx: Context) -> Figure:
    smoke = ctx.sizes.name == "smoke"
    with measuring(
        "B13",
        "a task as its own Spark application (spark-submit) on a tiny table; "
        f"the leader killed with {KILLED_APPS} applications running",
        "the same task in the warm session",
        "report (cold JVM start broken out); after kill -9: each task ends once, none re-run",
    ) as fig:
        _overhead(ctx, fig)
        # Smoke leaves the leader kill to tests/integration/test_application_failover.py,
        # which runs it (five applications) in the suite already.
        fig.goal_met = None if smoke else _leader_killed(ctx, fig, KILLED_APPS)
        fig.notes.append(
            "phases: launch (dispatch + spark-submit started), jvm_and_python (to the "
            "driver's first heartbeat), spark_session (to its app id), job (to the commit), "
            "report (to the outcome recorded), exit (to the process gone); cold_start = "
            "jvm_and_python + spark_session"
        )
    return fig
