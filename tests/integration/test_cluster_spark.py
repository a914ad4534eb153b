"""A real Spark standalone cluster (master + worker from PySpark's spark-class, on
loopback): its JSON state, killing an application, and lakewarden's maintenance kinds
(compaction, Z-order, TTL, clean) run through it by the real scheduler process
(`LAKEWARDEN_SPARK_MASTER=spark://...`), their results checked with pyiceberg.

The scheduler runs in a process of its own: PySpark allows one SparkContext per Python
process, and the shared `spark` fixture (local[2]) may already hold this one's."""

from __future__ import annotations

import random
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from conftest import _Databases, _with_db, make_test_runtime
from helpers import append_batches, make_table, manage, task_of, wait_for
from sqlalchemy import select

from benchmarks import processes
from lakewarden.db.models import JobRun
from lakewarden.db.session import transaction
from lakewarden.fingerprint import Fingerprint, fingerprint
from lakewarden.runtime import Runtime
from lakewarden.spark.local_cluster import (
    LocalCluster,
    app_state,
    apps_by_id,
    kill_app,
)
from lakewarden.states import TaskState
from services.worker.main import Worker

pytestmark = pytest.mark.slow


# A driver of its own (one SparkContext per Python process), idle until its context stops.
_IDLE_APP = """
import sys, time
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master(sys.argv[1]).appName("idle")
         .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.ui.enabled", "false").config("spark.executor.memory", "512m")
         .getOrCreate())
print(spark.sparkContext.applicationId, flush=True)
while not spark.sparkContext._jsc.sc().isStopped():
    time.sleep(0.2)
print("stopped", flush=True)
"""


def test_app_state_and_kill_app(spark_cluster: LocalCluster, tmp_path: Path) -> None:
    assert spark_cluster.state()["aliveworkers"] == 1
    assert app_state(spark_cluster.web_url, "app-that-never-was") is None
    driver = subprocess.Popen(
        [sys.executable, "-c", _IDLE_APP, spark_cluster.master_url],
        stdout=subprocess.PIPE,
        stderr=open(tmp_path / "driver.log", "wb"),  # noqa: SIM115
        text=True,
    )
    try:
        assert driver.stdout is not None
        app_id = driver.stdout.readline().strip()
        assert app_id.startswith("app-"), (tmp_path / "driver.log").read_text()[-3000:]
        wait_for(lambda: app_state(spark_cluster.web_url, app_id) == "RUNNING", 60, "RUNNING")
        kill_app(spark_cluster.web_url, app_id)
        wait_for(lambda: app_state(spark_cluster.web_url, app_id) == "KILLED", 60, "KILLED")
        # The master tells the client-mode driver, whose context stops.
        assert driver.stdout.readline().strip() == "stopped"
        driver.wait(timeout=60)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()


# --- The maintenance kinds, run by a scheduler process on the cluster --------------------

AB = pa.schema(
    [pa.field("a", pa.int64(), nullable=False), pa.field("b", pa.int64(), nullable=False)]
)
EVENTS = pa.schema(
    [pa.field("id", pa.int64(), nullable=False), pa.field("ts", pa.timestamp("us", tz="UTC"))]
)
TERMINAL = {TaskState.SUCCEEDED, TaskState.FAILED, TaskState.CANCELLED, TaskState.SKIPPED}
PLANNED_OR_LATER = {TaskState.PLANNED, TaskState.RUNNING, TaskState.SUCCEEDED}


@dataclass
class ClusterRun:
    """What the tables were before, the tasks, and the scheduler's log."""

    rt: Runtime
    tasks: dict[str, int]
    before: dict[str, Fingerprint]
    ttl_rows_before: list[tuple[int, datetime]]
    clean_snapshots: list[int]
    log: Path
    extra: dict[str, Any] = field(default_factory=dict)


def _zorder_table(rt: Runtime) -> Any:
    rt.catalog.create_namespace_if_not_exists("sales")
    table = rt.catalog.create_table("sales.cl_zorder", schema=AB)
    rng = random.Random("cl_zorder")
    for _ in range(12):  # small files that each span the whole a, b range
        a = [rng.randrange(1000) for _ in range(200)]
        b = [rng.randrange(1000) for _ in range(200)]
        table.append(pa.table({"a": a, "b": b}, schema=AB))
    return rt.catalog.load_table("sales.cl_zorder")


def _events_table(rt: Runtime) -> Any:
    """Rows every two hours over the last 8 days, partitioned by day, a commit per day."""
    from pyiceberg.transforms import DayTransform

    rt.catalog.create_namespace_if_not_exists("sales")
    table = rt.catalog.create_table("sales.cl_events", schema=EVENTS)
    with table.update_spec() as spec:
        spec.add_field("ts", DayTransform(), "ts_day")
    now, next_id = datetime.now(UTC), 0
    for d in range(8, -1, -1):
        day = (now - timedelta(days=d)).replace(hour=0, minute=0, second=0, microsecond=0)
        stamps = [t for t in (day + timedelta(hours=h) for h in range(0, 24, 2)) if t <= now]
        ids = list(range(next_id, next_id + len(stamps)))
        next_id += len(stamps)
        rt.catalog.load_table("sales.cl_events").append(
            pa.table({"id": ids, "ts": stamps}, schema=EVENTS)
        )
    return rt.catalog.load_table("sales.cl_events")


def _event_rows(rt: Runtime) -> list[tuple[int, datetime]]:
    rows = rt.catalog.load_table("sales.cl_events").scan().to_arrow().to_pylist()
    return sorted((r["id"], r["ts"]) for r in rows)


def _scheduler_env(rt: Runtime, cluster: LocalCluster) -> dict[str, str]:
    return processes.process_env(
        rt.db_url,
        rt.settings.data_dir,
        drop="LAKEWARDEN_",
        warehouse=rt.settings.warehouse_uri,
        spark_master=cluster.master_url,
        spark_master_web_url=cluster.web_url,
        # The jobs are the proof; a warm-up job beside them only adds to 2 busy cores.
        spark_warmup="false",
        scheduler_poll_interval_s="1",
        spark_conf='{"spark.executor.memory": "1g"}',
    )


@pytest.fixture(scope="module")
def cluster_run(
    spark_cluster: LocalCluster,
    server_url: str,
    _databases: _Databases,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ClusterRun]:
    """A scheduler process with LAKEWARDEN_SPARK_MASTER=<the cluster> (started first: its
    start overlaps making the tables), four tables, a task of each kind planned by a
    worker here; the scheduler runs them (at once: 4 jobs for a cluster master) and is
    stopped."""
    name = _databases.take()
    tmp = tmp_path_factory.mktemp("cluster-run")
    rt = make_test_runtime(_with_db(server_url, name), tmp)
    try:
        yield _run_on_cluster(rt, spark_cluster, tmp / "scheduler.log")
    finally:
        rt.engine.dispose()
        _databases.give_back(name)


def _run_on_cluster(rt: Runtime, cluster: LocalCluster, log_path: Path) -> ClusterRun:
    scheduler = processes.start(["scheduler"], _scheduler_env(rt, cluster), log_path)
    try:
        orders = append_batches(
            make_table(rt, name="cl_orders"), 8, rows=30, regions=("a", "b", "c")
        )
        zorder = _zorder_table(rt)
        events = _events_table(rt)
        churn = append_batches(make_table(rt, name="cl_churn"), 10)
        total = sum(t.file.file_size_in_bytes for t in zorder.scan().plan_files())
        run = ClusterRun(
            rt=rt,
            tasks={},
            before={
                "compaction": fingerprint(orders),
                "zorder": fingerprint(zorder),
                "ttl": fingerprint(events),
                "clean": fingerprint(churn),
            },
            ttl_rows_before=_event_rows(rt),
            clean_snapshots=[
                s.snapshot_id for s in sorted(churn.snapshots(), key=lambda s: s.timestamp_ms)
            ],
            log=log_path,
        )
        run.tasks = {
            "compaction": manage(
                rt, "cl_orders", {"compaction": {"min_small_files": 5, "min_input_files": 5}}
            ),
            "zorder": manage(
                rt,
                "cl_zorder",
                {
                    "zorder": {
                        "enabled": True,
                        "columns": ["a", "b"],
                        "target_file_size_bytes": total // 4,
                    }
                },
                kind="zorder",
            ),
            "ttl": manage(
                rt,
                "cl_events",
                {
                    "ttl": {
                        "enabled": True,
                        "column": "ts",
                        "retention_days": 3.5,
                        "max_fraction": 0.9,
                    }
                },
                kind="ttl",
            ),
            "clean": manage(
                rt,
                "cl_churn",
                {
                    "clean": {
                        "keep_last_snapshots": 3,
                        "max_snapshot_age_hours": 0.0001,  # 0.36 s: all but the last 3
                        "allow_below_safety_floors": True,
                        "remove_orphans": False,
                        "rewrite_manifests_min_count": 1000,
                    }
                },
                kind="clean",
            ),
        }
        time.sleep(1)  # every snapshot of cl_churn older than max_snapshot_age_hours
        worker = Worker(rt)
        assert worker.run_once()  # a worker claims a batch: every task at once here
        while worker.run_once():
            pass
        for kind, task_id in run.tasks.items():
            planned = task_of(rt, task_id)  # the scheduler starts each once it is planned
            assert planned.state in PLANNED_OR_LATER, (kind, planned.state, planned.reason)

        def all_done() -> bool:
            assert scheduler.poll() is None, log_path.read_text()[-5000:]
            return all(task_of(rt, t).state in TERMINAL for t in run.tasks.values())

        wait_for(all_done, 240, "the four jobs", lambda: log_path.read_text()[-5000:])
    finally:
        processes.stop([scheduler], timeout=60)  # a clean stop: its application FINISHED
    return run


def _succeeded(run: ClusterRun, kind: str) -> dict[str, Any]:
    task = task_of(run.rt, run.tasks[kind])
    assert task.state == TaskState.SUCCEEDED, (task.state, task.reason, run.log.read_text()[-3000:])
    assert task.result is not None
    return task.result


def test_the_jobs_ran_as_an_application_of_the_cluster_on_its_worker(
    cluster_run: ClusterRun, spark_cluster: LocalCluster
) -> None:
    with transaction(cluster_run.rt.engine) as s:
        runs = s.scalars(select(JobRun).where(JobRun.task_id.in_(cluster_run.tasks.values()))).all()
    assert len(runs) == 4
    # One warm session: every job in the scheduler's one application.
    (app_id,) = {r.spark_app_id for r in runs}
    assert app_id and app_id.startswith("app-")  # a standalone master's id (local-...: local)
    app = apps_by_id(spark_cluster.web_url)[app_id]
    assert app["name"].startswith("lakewarden")
    assert app_state(spark_cluster.web_url, app_id) == "FINISHED"  # stopped cleanly
    # Its executor ran on the worker: the worker's work dir holds the executor's log, with
    # the tasks it ran.
    executor_logs = list((spark_cluster.base_dir / "work" / app_id).glob("*/stderr"))
    assert executor_logs, list((spark_cluster.base_dir / "work").iterdir())
    text = "".join(p.read_text(errors="replace") for p in executor_logs)
    assert text.count("Finished task") > 0
    # spark.jars reached the executor from the driver on loopback: the Iceberg runtime,
    # and the Postgres JDBC driver the catalog needs.
    assert "Fetching spark://127.0.0.1:" in text
    assert "postgresql-" in text and "iceberg-spark-runtime" in text


def test_compaction_on_the_cluster(cluster_run: ClusterRun) -> None:
    result = _succeeded(cluster_run, "compaction")
    before = cluster_run.before["compaction"]
    after = fingerprint(cluster_run.rt.catalog.load_table("sales.cl_orders"))
    assert before.data_files == 24 and after.data_files == 3  # one per region
    assert (after.rows, after.checksum) == (before.rows, before.checksum)
    assert result["rewritten_data_files"] == 24
    assert result["committed_snapshot_id"] == after.snapshot_id


def test_zorder_on_the_cluster(cluster_run: ClusterRun) -> None:
    result = _succeeded(cluster_run, "zorder")
    before = cluster_run.before["zorder"]
    after = fingerprint(cluster_run.rt.catalog.load_table("sales.cl_zorder"))
    assert (after.rows, after.checksum) == (before.rows, before.checksum)
    assert result["rewritten_data_files"] == before.data_files == 12
    assert after.data_files < before.data_files
    assert result["committed_snapshot_id"] == after.snapshot_id


def test_ttl_on_the_cluster(cluster_run: ClusterRun) -> None:
    result = _succeeded(cluster_run, "ttl")
    plan = task_of(cluster_run.rt, cluster_run.tasks["ttl"]).plan
    assert plan is not None
    cutoff = datetime.fromisoformat(plan["cutoff"])
    before, after = cluster_run.ttl_rows_before, _event_rows(cluster_run.rt)
    assert after == [r for r in before if r[1] >= cutoff]  # exactly the old rows went
    assert 0 < len(after) < len(before)
    assert result["deleted_records"] == len(before) - len(after)


def test_clean_on_the_cluster(cluster_run: ClusterRun) -> None:
    result = _succeeded(cluster_run, "clean")
    table = cluster_run.rt.catalog.load_table("sales.cl_churn")
    ids = cluster_run.clean_snapshots
    assert len(ids) == 10
    assert {s.snapshot_id for s in table.snapshots()} == set(ids[-3:])  # 7 expired
    assert fingerprint(table) == cluster_run.before["clean"]  # the data, file for file
    assert result["expire_snapshots"]["deleted_manifest_lists_count"] == 7
