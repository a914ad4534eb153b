"""B14: the same maintenance jobs on a local Spark standalone cluster vs `local[2]`.

One real scheduler process (`python -m cli scheduler`) per Spark master, on the
same machine and the same kind of tables: first `LAKEWARDEN_SPARK_MASTER=local[2]`, then
`spark://...` of a master and one worker (2 cores, 2g) started from PySpark's own
`spark-class` (`lakewarden.spark.local_cluster`). Each round makes four small tables, a
worker plans a compaction, a Z-order, a TTL and a clean on them, and the scheduler runs
the four one at a time (max_concurrent_jobs=1, so one kind's time is not another's). The
first round of each master warms its session and is left out. Per job: the scheduler's
own `job_runs.duration_ms` (dispatch to outcome, in its warm session).

Both must pass (every job succeeded); the ratio is cluster / local per round (>1: the
cluster is slower). On one 2-core machine a cluster can only cost: the driver, the
executor, the master and the worker are four JVMs sharing the cores local[2] has to
itself, and every task crosses a socket. What it proves is that the same jobs run
unchanged through a master URL, and what that costs here.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.transforms import DayTransform
from sqlalchemy import select, text

from benchmarks import data, processes
from benchmarks.harness import Context, Figure, Stat, measuring
from lakewarden.db.models import JobRun, ManagedTable, Task
from lakewarden.db.session import transaction
from lakewarden.runtime import Runtime
from lakewarden.spark.local_cluster import LocalCluster, apps_by_id, start_cluster
from lakewarden.tasks import repo
from services.worker.main import Worker

NAMESPACE = "b14"
KINDS = ("compaction", "zorder", "ttl", "clean")
TERMINAL = ("succeeded", "failed", "skipped", "cancelled")
JOB_TIMEOUT_S = 600.0
EVENTS = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("ts", pa.timestamp("us", tz="UTC")),
        pa.field("v", pa.string()),
    ]
)


def _kinds(ctx: Context) -> tuple[str, ...]:
    """Smoke checks the harness with one kind; tests/integration/test_cluster_spark.py runs
    every kind on a cluster in the suite already."""
    return KINDS[:1] if ctx.sizes.name == "smoke" else KINDS


def _shape(ctx: Context) -> data.Shape:
    """Small tables: appends x files x rows."""
    return data.Shape(2, 4, 500) if ctx.sizes.name == "smoke" else data.Shape(4, 8, 5_000)


def _policy(kind: str, table: Any) -> dict[str, Any]:
    if kind == "compaction":
        return {"compaction": {"min_small_files": 2, "min_input_files": 2}}
    if kind == "zorder":
        total = sum(t.file.file_size_in_bytes for t in table.scan().plan_files())
        return {
            "zorder": {
                "enabled": True,
                "columns": ["user_id", "amount"],
                "target_file_size_bytes": max(1, total // 4),
            }
        }
    if kind == "ttl":
        return {
            "ttl": {"enabled": True, "column": "ts", "retention_days": 3.5, "max_fraction": 0.9}
        }
    return {
        "clean": {
            "keep_last_snapshots": 2,
            "max_snapshot_age_hours": 0.0001,  # 0.36 s: every snapshot but the last two
            "allow_below_safety_floors": True,
            "remove_orphans": False,
            "rewrite_manifests_min_count": 1000,
        }
    }


def _events(catalog: Catalog, identifier: str, rows_per_day: int) -> Any:
    """Rows over the last 8 days (`data`'s timestamps are in January: all past any
    retention), partitioned by day, a commit per day."""
    if catalog.table_exists(identifier):
        catalog.purge_table(identifier)
    table = catalog.create_table(identifier, schema=EVENTS)
    with table.update_spec() as spec:
        spec.add_field("ts", DayTransform(), "ts_day")
    now, next_id = datetime.now(UTC), 0
    for d in range(8, -1, -1):
        day = (now - timedelta(days=d)).replace(hour=0, minute=0, second=0, microsecond=0)
        step = timedelta(days=1) / rows_per_day
        stamps = [t for t in (day + i * step for i in range(rows_per_day)) if t <= now]
        ids = list(range(next_id, next_id + len(stamps)))
        next_id += len(stamps)
        batch = {"id": ids, "ts": stamps, "v": [f"row-{i}" for i in ids]}
        catalog.load_table(identifier).append(pa.table(batch, schema=EVENTS))
    return catalog.load_table(identifier)


def make_round(
    rt: Runtime, ctx: Context, tag: str, catalog: Catalog | None = None, name: str | None = None
) -> dict[str, int]:
    """Four tables, one task of each kind on them (in `catalog`, a client of the catalog
    `name`; the default one unless given). Returns kind -> task id."""
    catalog, catalog_name = catalog or rt.catalog, name or rt.settings.catalog_name
    catalog.create_namespace_if_not_exists(NAMESPACE)
    shape = _shape(ctx)
    tasks: dict[str, int] = {}
    for i, kind in enumerate(_kinds(ctx)):
        name = f"{tag}_{kind}"
        identifier = f"{NAMESPACE}.{name}"
        if kind == "ttl":
            table = _events(catalog, identifier, shape.files_per_append * shape.rows_per_file // 4)
        elif kind == "clean":  # snapshots to expire: one per append
            churn = data.Shape(6, 1, shape.files_per_append * shape.rows_per_file // 6)
            table = data.create(catalog, identifier, churn, seed=11 + i)
        else:
            table = data.create(catalog, identifier, shape, seed=11 + i)
        with transaction(rt.engine) as s:
            row = ManagedTable(
                catalog=catalog_name,
                namespace=NAMESPACE,
                name=name,
                policy=_policy(kind, table),
            )
            s.add(row)
            s.flush()
            task_id = repo.create_task(
                s, table_id=row.id, kind=kind, trigger={"reason": "B14"}, actor="bench"
            )
        assert task_id is not None
        tasks[kind] = task_id
    time.sleep(1)  # the clean table's snapshots older than its max_snapshot_age_hours
    return tasks


def plan_round(rt: Runtime, tasks: dict[str, int]) -> None:
    """A worker plans them (pyiceberg, this process); the scheduler starts each as soon as
    it is planned, so a task may be past planned already."""
    worker = Worker(rt)
    deadline = time.monotonic() + 120
    for _ in range(40):  # plans ours (and any other figure's left pending)
        if all(_state(rt, t) != "pending" for t in tasks.values()):
            break
        if not worker.run_once():
            # A planning that failed (a busy S3 server under load) put its task back with
            # a backoff: wait it out, within the deadline.
            with transaction(rt.engine) as s:
                due = repo.next_pending_due_in(s)
            if due is None or time.monotonic() + due > deadline:
                break
            time.sleep(due + 0.1)
    for kind, task_id in tasks.items():
        state = _state(rt, task_id)
        if state not in ("planned", "running", "succeeded"):
            with transaction(rt.engine) as s:
                last = repo.history(s, task_id)[-1].reason
            raise RuntimeError(f"B14 {kind} task {task_id} was not planned: {state} ({last})")


def _state(rt: Runtime, task_id: int) -> str:
    with transaction(rt.engine) as s:
        return str(s.scalar(select(Task.state).where(Task.id == task_id)))


def _scheduler(
    rt: Runtime,
    master: str,
    web_url: str | None,
    log: Path,
    settings_update: dict[str, Any] | None = None,
    env_update: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    settings = rt.settings.model_copy(
        update={
            "spark_master": master,
            "spark_master_web_url": web_url,
            "max_concurrent_jobs": 1,
            "scheduler_poll_interval_s": 1.0,
            **(settings_update or {}),
        }
    )
    env = processes.process_env(rt.db_url, drop="LAKEWARDEN_", settings=settings)
    env.update(env_update or {})
    return processes.start(["scheduler"], env, log, append=True, start_new_session=True)


def _wait_done(
    rt: Runtime, tasks: dict[str, int], proc: subprocess.Popen[bytes], log: Path
) -> float:
    """Seconds until every task is terminal."""
    start = time.perf_counter()
    while time.perf_counter() - start < JOB_TIMEOUT_S:
        if proc.poll() is not None:
            raise RuntimeError(f"the scheduler exited ({proc.returncode}): {_tail(log)}")
        if all(_state(rt, t) in TERMINAL for t in tasks.values()):
            return time.perf_counter() - start
        time.sleep(0.2)
    raise RuntimeError(f"B14 jobs not done within {JOB_TIMEOUT_S:.0f}s: {_tail(log)}")


def _tail(log: Path) -> str:
    return log.read_bytes()[-2000:].decode(errors="replace")


def _runs(rt: Runtime, tasks: dict[str, int]) -> dict[str, JobRun]:
    with transaction(rt.engine) as s:
        rows = s.scalars(select(JobRun).where(JobRun.task_id.in_(tasks.values()))).all()
        s.expunge_all()
    by_task = {r.task_id: r for r in rows}
    return {kind: by_task[t] for kind, t in tasks.items() if t in by_task}


def _mode(
    rt: Runtime,
    ctx: Context,
    mode: str,
    master: str,
    web_url: str | None,
    rounds: int,
    settings_update: dict[str, Any] | None = None,
    env_update: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Every round on one scheduler process (its settings and environment updated by
    `settings_update`, `env_update`); per kind the job seconds of the measured rounds, each
    round's wall time, whether every job succeeded, the app ids."""
    log = ctx.work_dir / f"b14-{mode}-scheduler.log"
    log.unlink(missing_ok=True)
    with rt.engine.begin() as conn:
        conn.execute(text("DELETE FROM leader_lease"))
    proc = _scheduler(rt, master, web_url, log, settings_update, env_update)
    seconds: dict[str, list[float]] = {k: [] for k in KINDS}
    walls: list[float] = []
    failed: list[str] = []
    apps: set[str] = set()
    try:
        for n in range(rounds):
            tasks = make_round(rt, ctx, f"{mode}_{n}")
            started = time.perf_counter()
            plan_round(rt, tasks)
            _wait_done(rt, tasks, proc, log)
            wall = time.perf_counter() - started  # planning to the last outcome
            runs = _runs(rt, tasks)
            for kind, task_id in tasks.items():
                run = runs.get(kind)
                if _state(rt, task_id) != "succeeded" or run is None:
                    failed.append(f"{mode} round {n} {kind}: {_state(rt, task_id)}")
                    continue
                apps.add(run.spark_app_id or "")
                if n > 0:  # round 0 warms the session
                    seconds[kind].append((run.duration_ms or 0) / 1000)
            if n > 0:
                walls.append(wall)
    finally:
        processes.stop([proc], timeout=60)
    return {"seconds": seconds, "walls": walls, "failed": failed, "apps": sorted(apps)}


def local_rounds(ctx: Context, rounds: int) -> dict[str, Any]:
    """`_mode`'s rounds on `local[2]`: the baseline B14, B19 and B21 each compare with. A
    full run measures it beside each figure's own, as the load drifts; a smoke run (the
    suite's check, whose numbers mean nothing) measures it once and the next figure reuses
    it: one scheduler JVM and its rounds fewer."""
    if ctx.sizes.name != "smoke":
        return _mode(ctx.rt, ctx, "local", "local[2]", None, rounds)
    key = f"local[2] x {rounds}"
    if key not in ctx.shared:
        ctx.shared[key] = _mode(ctx.rt, ctx, "local", "local[2]", None, rounds)
    result: dict[str, Any] = ctx.shared[key]
    return result


def _clear(rt: Runtime) -> None:
    with rt.engine.begin() as conn:
        conn.execute(text("DELETE FROM managed_tables WHERE namespace = :n"), {"n": NAMESPACE})


def b14(ctx: Context) -> Figure:
    with measuring(
        "B14",
        "maintenance jobs (compaction, zorder, ttl, clean) on a local standalone cluster",
        "the same jobs on local[2]",
        "both pass; timings reported",
    ) as fig:
        rt = ctx.rt
        # A warm-up round, then the measured ones (smoke: one, it checks the harness only).
        rounds = 2 if ctx.sizes.name == "smoke" else ctx.repeats + 1
        _clear(rt)
        local = local_rounds(ctx, rounds)
        cluster_dir = ctx.work_dir / "b14-cluster"
        started = time.perf_counter()
        cluster: LocalCluster
        with start_cluster(cluster_dir) as cluster:
            start_s = time.perf_counter() - started
            remote = _mode(rt, ctx, "cluster", cluster.master_url, cluster.web_url, rounds)
            known = apps_by_id(cluster.web_url)
            on_cluster = bool(remote["apps"]) and all(a in known for a in remote["apps"])
        _clear(rt)
        _report(fig, local, remote, start_s, on_cluster)
    return fig


def _report(
    fig: Figure,
    local: dict[str, Any],
    remote: dict[str, Any],
    start_s: float,
    on_cluster: bool,
) -> None:
    per_kind: dict[str, Any] = {}
    lines = [f"{'kind':<11} {'local[2] s':>11} {'cluster s':>10} {'cluster/local':>14}"]
    for kind in KINDS:
        lo, cl = local["seconds"][kind], remote["seconds"][kind]
        if not lo or not cl:
            continue
        lo_s, cl_s = Stat.of(lo), Stat.of(cl)
        per_kind[kind] = {
            "local_s": lo_s,
            "cluster_s": cl_s,
            "ratio": round(cl_s.median / lo_s.median, 3) if lo_s.median else None,
        }
        lines.append(
            f"{kind:<11} {lo_s.median:>11.2f} {cl_s.median:>10.2f} "
            f"{cl_s.median / lo_s.median if lo_s.median else 0:>14.2f}"
        )
    pairs = list(zip(local["walls"], remote["walls"], strict=False))
    if pairs:
        fig.ratio = Stat.of([c / lo for lo, c in pairs if lo])
        fig.ratio_label = f"cluster/local time of a round of {len(per_kind)} job(s)"
        lines.append(
            f"{'round (4)':<11} {statistics.median(local['walls']):>11.2f} "
            f"{statistics.median(remote['walls']):>10.2f} {fig.ratio.median:>14.2f}"
        )
    failed = local["failed"] + remote["failed"]
    fig.goal_met = not failed and on_cluster and bool(pairs)
    fig.values = {
        "per_kind": per_kind,
        "round_local_s": Stat.of(local["walls"]) if local["walls"] else None,
        "round_cluster_s": Stat.of(remote["walls"]) if remote["walls"] else None,
        "cluster_start_s": round(start_s, 2),
        "failed": failed,
        "cluster_app_ids": remote["apps"],
        "local_app_ids": local["apps"],
        "apps_listed_by_master": on_cluster,
    }
    fig.notes.append(
        "job seconds: job_runs.duration_ms of each warm job (round 0 of each master left out); "
        "local[2] measured first, then the cluster, each on its own scheduler process; "
        "a round's time runs from planning (a worker, pyiceberg) to the last job's outcome"
    )
    print("\nB14: median seconds per job\n" + "\n".join(lines), file=sys.stderr, flush=True)
