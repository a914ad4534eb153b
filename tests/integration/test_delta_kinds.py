"""Delta tables maintained end to end through the real services (issue 29): each kind asked
for through the API, planned by the worker from delta-rs' view of the log, dispatched by
the leader and run as Delta's own command: compaction (`OPTIMIZE … WHERE` the partitions
with enough small files), Z-order (Delta's `OPTIMIZE … ZORDER BY` steps, checked before
their commit, where lookups open many files),
clean (`VACUUM`, only below Delta's retention check with the policy's consent; the log's
files past its retention), liquid clustering (`OPTIMIZE` of a `CLUSTER BY` table, never
ZORDER BY), TTL (a metadata-only `DELETE` of whole days; a row `DELETE` and its exact-count
guard), and a rewrite whose validation failed undone by `RESTORE`. Every result is read
back by delta-rs: the row sets at the versions before and after, the files, the log.

One job runs as a real spark-submitted application of its own (the leader's launch, the
application's own Delta-family JVM); the others run the same application code
(`application_entry.run_application`) in the shared Delta-family writer's warm JVM
(`warm_applications`): a JVM per job made this file cost 155 s in CI."""

from __future__ import annotations

import json
import os
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb_delta
import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, write_deltalake
from duckdb_delta import agreed_digest as _digest
from duckdb_delta import files_per_day as _files
from fastapi.testclient import TestClient
from helpers import read_throughout, task_of, wait_for
from spark_writer import SparkWriters
from sqlalchemy import create_engine, select

from benchmarks.s3_server import S3Server
from lakewarden.db.models import JobRun
from lakewarden.db.session import transaction
from lakewarden.formats.base import JobMarker, marker_of
from lakewarden.formats.delta.timeline import DeltaTimeline
from lakewarden.formats.delta.validation import digest as validation_digest
from lakewarden.formats.digest import digest_rows
from lakewarden.process import Ticker
from lakewarden.runtime import Runtime
from lakewarden.settings import Settings
from lakewarden.spark.submit import application_settings, settings_env
from services.scheduler.main import Scheduler
from services.worker.main import Worker

TABLES = "/api/v1/catalogs/dlake/tables"
DV_ON = "'delta.enableDeletionVectors' = true"
TABLE = f"{TABLES}/lake/events"


def _batch(start: int, day: str) -> pa.Table:
    """Ten rows whose x and y each span most of their range: every file overlaps."""
    ids = range(start, start + 10)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "day": [day] * 10,
            "x": pa.array([(i * 37) % 100 for i in ids], pa.int64()),
            "y": pa.array([(i * 53) % 100 for i in ids], pa.int64()),
        }
    )


def _rows(path: str, version: int | None = None) -> list[tuple[Any, ...]]:
    """The table's rows at `version` as a sorted list, read by delta-rs and by DuckDB's
    Delta extension, which must agree."""
    got = []
    for table in (
        DeltaTable(path, version=version).to_pyarrow_table(),
        duckdb_delta.read(path, version),
    ):
        columns = (table.column(c).to_pylist() for c in ("id", "day", "x", "y"))
        got.append(sorted(zip(*columns, strict=True)))
    assert got[0] == got[1], "delta-rs and DuckDB read different rows"
    return got[0]


def _live_paths(path: str) -> list[str]:
    """The table's live files, read by delta-rs."""
    return sorted(pa.table(DeltaTable(path).get_add_actions()).column("path").to_pylist())


class Services:
    def __init__(self, rt: Runtime) -> None:
        self.rt, self.sched, self.stop = rt, Scheduler(rt), threading.Event()
        self.sched.renew()
        Ticker("lease", 1.0, self.sched.renew, self.stop).start()

    def warm_applications(
        self, spark_writers: SparkWriters, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """From now on the leader's launch of an application runs it in the shared
        Delta-family writer's warm JVM (`spark_writer.run_job`: the application's own code,
        with the environment the leader gives one), until it ends: not a JVM per job."""
        rt = self.rt

        def launch(fence: Any, job: Any, timeout_s: float) -> None:
            env = settings_env(application_settings(rt.settings), rt.db_url)
            step = {"job": {"task_id": job.task_id, "attempt": job.attempt, "env": env}}
            spark_writers.run("delta", [step])

        monkeypatch.setattr(self.sched.applications, "launch", launch)

    def plan(self, task_id: int) -> dict[str, Any]:
        assert Worker(self.rt).run_once()
        task = task_of(self.rt, task_id)
        assert task.state == "planned", (task.state, task.reason)
        return dict(task.plan or {})

    def attempt(self, task_id: int) -> str:
        """Dispatch the planned task (an application, whatever its pool's mode), wait for
        the attempt to end: the task's state then (pending: it failed, to be retried)."""
        assert self.sched.dispatch_once()

        def done() -> str | None:
            self.sched.applications.poll(self.sched.leading())
            state = task_of(self.rt, task_id).state
            return state if state in ("succeeded", "failed", "pending") else None

        logs = self.sched.applications.log_dir
        return wait_for(
            done,
            900,  # one JVM per job; minutes on a loaded machine
            f"task {task_id}",
            lambda: "\n".join(p.read_text()[-4000:] for p in logs.glob("*.log")),
        )

    def runs(self, task_id: int) -> list[JobRun]:
        """The task's runs, first attempt first."""
        with transaction(self.rt.engine) as s:
            runs = list(
                s.scalars(select(JobRun).where(JobRun.task_id == task_id).order_by(JobRun.attempt))
            )
            s.expunge_all()
        return runs

    def run(self, task_id: int) -> JobRun:
        """Dispatch the planned task and wait: it succeeded, in one attempt."""
        state = self.attempt(task_id)
        with transaction(self.rt.engine) as s:
            run = s.scalars(select(JobRun).where(JobRun.task_id == task_id)).one()
            s.expunge(run)
        assert state == "succeeded", (run.error, run.log_tail)
        assert run.mode == "application"
        print(f"task {task_id}: {run.duration_ms} ms, {(run.metrics or {}).get('seconds')} s")
        return run


@pytest.fixture
def services(db_url: str, tmp_path: Path) -> Iterator[Services]:
    settings = Settings(
        database_url=db_url,
        data_dir=tmp_path / "data",
        application_master="local[1]",
        application_driver_memory="768m",
        heartbeat_interval_s=1.0,
        spark_warmup=False,
        # A few tasks, not Delta's 50 to rebuild a tiny table's state, nor Spark's 10000 to
        # list its files for VACUUM, on local[1].
        spark_conf={
            "spark.databricks.delta.snapshotPartitions": "2",
            "spark.sql.sources.parallelPartitionDiscovery.parallelism": "4",
        },
    )
    url = settings.database_url or db_url
    rt = Runtime(settings, url, create_engine(url, pool_size=5), role="scheduler")
    found = Services(rt)
    try:
        yield found
    finally:
        found.stop.set()
        found.sched.applications.kill_all()
        rt.engine.dispose()


def _ask(client: TestClient, kind: str, table: str = TABLE) -> int:
    got = client.post(f"{table}/tasks", json={"kind": kind})
    assert got.status_code == 201, got.text
    return int(got.json()["id"])


@pytest.mark.spark
@pytest.mark.timeout(1800)  # two Delta-family JVMs: ~3 min each on a loaded 2-core box
def test_compaction_zorder_and_clean_run_as_deltas_own_commands(
    client: TestClient,
    services: Services,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    spark_writers: SparkWriters,
) -> None:
    warehouse = tmp_path / "wh"
    path = str(warehouse / "lake" / "events")
    for i in range(4):  # d1: four small files (due); d2: two (under min_input_files)
        write_deltalake(path, _batch(10 * i, "d1"), partition_by=["day"], mode="append")
    for i in range(2):
        write_deltalake(path, _batch(100 + 10 * i, "d2"), partition_by=["day"], mode="append")
    got = client.post(
        "/api/v1/catalogs",
        json={"name": "dlake", "type": "delta", "properties": {"warehouse": str(warehouse)}},
    )
    assert got.status_code == 201, got.text
    # Spark's OPTIMIZE (a plain copy is pyarrow's by default: test_delta_native.py)
    spark_compaction = {"min_input_files": 3, "min_small_files": 3, "native_rewrite": False}
    policy = {
        "compaction": spark_compaction,
        "zorder": {"enabled": True, "columns": ["x", "y"], "max_files_per_lookup": 1.0},
        "clean": {"max_snapshot_age_hours": 1},
    }
    got = client.post(TABLES, json={"namespace": "lake", "name": "events", "policy": policy})
    assert got.status_code == 201, got.text
    # The baseline version is judged at registration: d1's small files call for compaction,
    # its overlapping files for Z-order; each task says why. Cancelled here: the steps
    # below ask for each kind in turn.
    opened = client.get("/api/v1/tasks", params={"table": "lake.events", "catalog": "dlake"})
    assert opened.status_code == 200, opened.text
    by_kind = {t["kind"]: t["id"] for t in opened.json()["items"]}
    assert set(by_kind) == {"compaction", "zorder"}, by_kind
    for kind, opened_id in by_kind.items():
        task = client.get(f"/api/v1/tasks/{opened_id}").json()
        assert task["trigger"]["source"] == "event" and task["trigger"]["commit"] == "5"
        assert "d1" in task["trigger"]["reason"], (kind, task["trigger"])
        assert client.post(f"/api/v1/tasks/{opened_id}/cancel").status_code == 200

    # A rerun never commits twice: a commit of the task in the log (as an earlier attempt
    # leaves it; here one delta-rs wrote, marked so) is the run's outcome, and its
    # application finishes from it before starting a JVM.
    task_id = _ask(client, "compaction")
    assert services.plan(task_id)["partitions"] == [{"day": "d1"}]
    mark = {"lakewarden.task-id": str(task_id), "lakewarden.attempt": "1"}
    write_deltalake(
        path,
        _batch(200, "d3"),
        partition_by=["day"],
        mode="append",
        commit_properties=CommitProperties(custom_metadata=mark),
    )
    run = services.run(task_id)
    assert run.metrics == {
        "recovered": True,
        "recovered_commit_of_attempt": 1,
        "committed_version": 6,
    }
    assert run.spark_app_id is None  # no Spark application was started
    assert DeltaTimeline(path).versions()[-1] == 6  # no OPTIMIZE
    rows = _rows(path)
    assert len(rows) == 70

    # Compaction: only d1 (four small files); d2's two are under min_input_files.
    task_id = _ask(client, "compaction")
    plan = services.plan(task_id)
    assert plan["format"] == "delta" and plan["path"] == path
    assert plan["partitions"] == [{"day": "d1"}] and plan["version"] == 6
    run = services.run(task_id)
    assert run.spark_app_id
    metrics = run.metrics or {}
    assert metrics["operation"] == "OPTIMIZE" and metrics["files_removed"] == 4
    assert metrics["engine"] == {"engine": "spark", "reason": "compaction.native_rewrite is off"}
    compacted = int(metrics["committed_version"])
    # Spark rewrote, DuckDB checked the files, then Delta's transaction committed
    assert metrics["validation"]["status"] == "passed", metrics["validation"]
    assert metrics["validation"]["when"] == "before the commit"
    # the rows of the files it rewrote: d1's forty
    assert metrics["validation"]["rows"] == 40 and metrics["read_version"] == 6
    commit = DeltaTimeline(path).find_job_commits(task_id)
    assert commit is not None and int(commit.id) == compacted == 7
    assert marker_of(commit.summary) == JobMarker(task_id, 1)
    assert "day = d1" in commit.summary["param.predicate"]  # as Delta renders it
    assert _files(path) == {"d1": 1, "d2": 2, "d3": 1}
    assert _rows(path, 6) == _rows(path, 7) == rows  # delta-rs: the same row set

    # The other jobs run their application's code in the shared Delta-family JVM.
    services.warm_applications(spark_writers, monkeypatch)
    # Z-order: d2's two files overlap on x and y (a lookup opens both); d1, d3: one file.
    task_id = _ask(client, "zorder")
    plan = services.plan(task_id)
    assert plan["partitions"] == [{"day": "d2"}] and plan["zorder"] == ["x", "y"]
    metrics = services.run(task_id).metrics or {}
    assert metrics["validation"]["status"] == "passed" and metrics["committed_version"] == 8
    # Spark Z-ordered, DuckDB checked the files, then Delta's transaction committed
    assert metrics["validation"]["when"] == "before the commit", metrics
    assert metrics["files_removed"] == 2 and metrics["validation"]["rows"] == 20
    commit = DeltaTimeline(path).since("7", 10).commits[0]
    assert commit.operation == "OPTIMIZE" and marker_of(commit.summary) == JobMarker(task_id, 1)
    assert commit.summary["param.zOrderBy"].replace(" ", "") == '["x","y"]'
    assert _files(path) == {"d1": 1, "d2": 1, "d3": 1}
    assert _rows(path, 8) == rows

    # Clean: the policy's hour is below Delta's 7-day retention check, so without the
    # policy's consent VACUUM keeps a week, and nothing removed is that old.
    task_id = _ask(client, "clean")
    assert Worker(services.rt).run_once()
    skipped = task_of(services.rt, task_id)
    reason = skipped.reason or ""
    assert skipped.state == "skipped", reason
    assert "RETAIN 168 HOURS" in reason and "allow_below_safety_floors" in reason

    consent = {
        "clean": {"max_snapshot_age_hours": 0.0001, "allow_below_safety_floors": True},
    }
    got = client.put(f"{TABLE}/policy", json=consent)
    assert got.status_code == 200, got.text
    task_id = _ask(client, "clean")
    plan = services.plan(task_id)
    assert plan["below_retention_check"] is True and plan["retain_hours"] == 0.0001
    removed = {
        a["remove"]["path"]
        for v in (7, 8)
        for a in DeltaTimeline(path).read_actions(v)
        if "remove" in a
    }
    assert len(removed) == 6 and all((Path(path) / p).exists() for p in removed)
    metrics = services.run(task_id).metrics or {}
    assert metrics["operation"] == "VACUUM END" and metrics["files_deleted"] == 6
    assert not any((Path(path) / p).exists() for p in removed)  # VACUUM deleted them
    assert _rows(path) == rows  # the live files are untouched
    vacuums = DeltaTimeline(path).since("8", 10).commits
    assert [c.operation for c in vacuums] == ["VACUUM START", "VACUUM END"]
    assert all(marker_of(c.summary) == JobMarker(task_id, 1) for c in vacuums)

    _ttl_drops_whole_partitions(client, services, str(warehouse / "lake" / "clicks"))
    # d2: three more small files, so a bin-pack is due beside the purge
    assert client.put(f"{TABLE}/policy", json={"compaction": spark_compaction}).status_code == 200
    for i in range(3):
        write_deltalake(path, _batch(300 + 10 * i, "d2"), partition_by=["day"], mode="append")
    _deletion_vectors_are_purged(client, services, spark_writers, path)


def _ttl_drops_whole_partitions(client: TestClient, services: Services, path: str) -> None:
    """TTL on a table partitioned by its date column: the expired days go as a
    metadata-only DELETE (whole files removed, none written), its count checked against
    the commit's numDeletedRows; delta-rs reads what is left."""
    today = datetime.now(UTC).date()
    for back in range(10, 0, -1):  # ten rows a day for the ten days before today
        day = today - timedelta(days=back)
        rows = pa.table(
            {"id": pa.array(range(100 * back, 100 * back + 10), pa.int64()), "day": [day] * 10}
        )
        write_deltalake(path, rows, partition_by=["day"], mode="append")
    ttl = {"ttl": {"enabled": True, "column": "day", "retention_days": 7}}
    got = client.post(TABLES, json={"namespace": "lake", "name": "clicks", "policy": ttl})
    assert got.status_code == 201, got.text
    got = client.post(f"{TABLES}/lake/clicks/tasks", json={"kind": "ttl"})
    assert got.status_code == 201, got.text
    task_id = int(got.json()["id"])
    plan = services.plan(task_id)
    assert plan["level"] == "partition" and plan["partition_column"] == "day"
    assert plan["rows_to_delete"] == 30 and plan["version"] == 9  # the 3 oldest days
    metrics = services.run(task_id).metrics or {}
    assert metrics["counted_rows"] == metrics["deleted_records"] == 30, metrics
    assert metrics["deleted_source"] == "operationMetrics.numDeletedRows"
    assert metrics["metadata_only"] is True and metrics["committed_version"] == 10
    assert metrics["files_removed"] == 3 and metrics["files_added"] == 0
    commit = DeltaTimeline(path).find_job_commits(task_id)
    assert commit is not None and commit.operation == "DELETE"
    assert marker_of(commit.summary) == JobMarker(task_id, 1)
    left = DeltaTable(path).to_pyarrow_table()
    assert left.num_rows == 70 and _digest(path).rows == 70  # DuckDB reads the same
    assert min(left.column("day").to_pylist()) == today - timedelta(days=7)


@pytest.mark.spark
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("kind", ["compaction", "zorder"])
def test_a_reader_never_sees_a_corrupted_spark_rewrite(
    client: TestClient,
    services: Services,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    spark_writers: SparkWriters,
    kind: str,
) -> None:
    """Issue 30 goal 5 on Spark's path: a compaction of a table with deletion vectors (the
    arrow path refuses it), or a Z-order of it, whose rewrite loses a row (the test-only
    failpoint corrupts a written file before the check) is refused before it commits; a
    reader reading the newest version over and over all along (delta-rs' scan, deletion
    vectors applied) sees the same version and rows every time, and the task fails for
    good."""
    services.warm_applications(spark_writers, monkeypatch)
    warehouse = tmp_path / "wh"
    path = str(warehouse / "lake" / "events")
    for i in range(6):  # d1: six small files of ten rows
        write_deltalake(path, _batch(10 * i, "d1"), partition_by=["day"], mode="append")
    table = f"delta.`{path}`"
    spark_writers.run(
        "delta",
        [
            {"sql": f"ALTER TABLE {table} SET TBLPROPERTIES ({DV_ON})"},
            {"sql": f"DELETE FROM {table} WHERE id = 11"},  # a deletion vector, no purge
        ],
    )
    _catalog(client, warehouse)
    zorder = {"enabled": True, "columns": ["x", "y"], "max_files_per_lookup": 1.0}
    policies: dict[str, dict[str, Any]] = {
        "compaction": {"compaction": {"min_input_files": 3, "min_small_files": 3}},
        "zorder": {"compaction": {"enabled": False}, "zorder": zorder},
    }
    _register(client, "events", policies[kind])
    for opened in client.get("/api/v1/tasks", params={"catalog": "dlake"}).json()["items"]:
        client.post(f"/api/v1/tasks/{opened['id']}/cancel")  # the baseline's: asked below
    version = DeltaTable(path).version()
    before = validation_digest(path, version)
    assert before.rows == 59
    monkeypatch.setattr(services.rt.settings, "failpoint", "corrupt-rewrite")
    monkeypatch.setattr(services.rt.settings, "failpoints_enabled", True)
    task_id = _ask(client, kind)
    assert services.plan(task_id)["partitions"] == [{"day": "d1"}]

    def newest() -> tuple[int, Any]:
        at = DeltaTable(path).version()
        return at, validation_digest(path, at)

    with read_throughout(newest, 0.05) as seen:
        assert services.sched.dispatch_once()
        if kind == "compaction":
            # tried without Spark first: the arrow path refuses the deletion vector, and
            # hands the job to Spark's application, launched by the next dispatch
            wait_for(lambda: services.sched.fallbacks.qsize() or None, 60, "handed to Spark")
            services.sched.dispatch_once()

        def ended() -> str | None:
            services.sched.applications.poll(services.sched.leading())
            state = task_of(services.rt, task_id).state
            return state if state in ("succeeded", "failed", "pending") else None

        state = wait_for(ended, 900, f"task {task_id}")
    # what the reader saw: the version before, its rows, every time
    assert len(seen) >= 3 and set(seen) == {(version, before)}, set(seen)
    [run] = services.runs(task_id)
    metrics = run.metrics or {}
    assert state == "failed", (state, run.error)
    assert "nothing was committed" in (run.error or ""), run.error
    assert metrics["engine"]["engine"] == "spark" and "optimize" not in metrics["engine"]
    if kind == "compaction":
        assert "deletion" in str(metrics["engine"]).lower()
    assert metrics["validation"]["status"] == "failed"
    assert metrics["validation"]["when"] == "before the commit"
    assert DeltaTable(path).version() == version
    assert DeltaTimeline(path).find_job_commits(task_id) is None


def _deletion_vectors_are_purged(
    client: TestClient, services: Services, spark_writers: SparkWriters, path: str
) -> None:
    """A Spark writer's DELETE leaves deletion vectors hiding a quarter of d1's rows: the
    compaction purges d1 (what REORG … WHERE day = 'd1' APPLY (PURGE) rewrites) beside its
    bin-pack of d2's small files, in one commit checked before it lands
    (`staged_rewrite`); delta-rs reads the log after: no deletion vector left, the rows the
    files hold are the live rows, the same rows as before (deletion vectors applied)."""
    table = f"delta.`{path}`"
    live = sum(r["num_records"] for r in pa.table(DeltaTable(path).get_add_actions()).to_pylist())
    spark_writers.run(
        "delta",
        [
            {"sql": f"ALTER TABLE {table} SET TBLPROPERTIES ({DV_ON})"},
            {"sql": f"DELETE FROM {table} WHERE day = 'd1' AND id % 4 = 0"},
        ],
    )
    hidden = pa.table(DeltaTable(path).deletion_vectors()).to_pylist()
    assert ["/day=d1/" in r["filepath"] for r in hidden] == [True]
    seen = _digest(path)  # through the deletion vectors, by delta-rs and DuckDB alike
    assert seen.rows == live - 10
    task_id = _ask(client, "compaction")
    plan = services.plan(task_id)
    assert plan["purge_partitions"] == [{"day": "d1"}] and plan["optimize"] is True
    assert "REORG … APPLY (PURGE)" in (task_of(services.rt, task_id).reason or "")
    metrics = services.run(task_id).metrics or {}
    assert metrics["staged"]["purged_files"] == 1, metrics
    assert metrics["operation"] == "OPTIMIZE", metrics
    # the inputs read through their deletion vectors: the same rows written
    assert metrics["validation"]["status"] == "passed", metrics["validation"]
    assert metrics["validation"]["when"] == "before the commit", metrics["validation"]
    # what it rewrote: d1's hollowed file (30 live rows) and d2's small files, no more
    assert 30 < metrics["validation"]["rows"] < live - 10, metrics["validation"]
    assert pa.table(DeltaTable(path).deletion_vectors()).num_rows == 0
    files = pa.table(DeltaTable(path).get_add_actions(flatten=True)).to_pylist()
    d1 = sum(r["num_records"] for r in files if r["partition.day"] == "d1")
    assert d1 == 30  # 40 rows less the 10 deleted: gone from the files
    assert _digest(path) == seen


def _catalog(client: TestClient, warehouse: Path) -> None:
    got = client.post(
        "/api/v1/catalogs",
        json={"name": "dlake", "type": "delta", "properties": {"warehouse": str(warehouse)}},
    )
    assert got.status_code == 201, got.text


def _register(client: TestClient, name: str, policy: dict[str, Any]) -> None:
    got = client.post(TABLES, json={"namespace": "lake", "name": name, "policy": policy})
    assert got.status_code == 201, got.text


def _skipped(services: Services, task_id: int) -> str:
    """The worker's one pass on the task: skipped, and why."""
    assert Worker(services.rt).run_once()
    task = task_of(services.rt, task_id)
    assert task.state == "skipped", (task.state, task.reason)
    return task.reason or ""


@pytest.mark.spark
@pytest.mark.timeout(1200)
def test_a_clustered_table_is_optimized_never_zordered(
    client: TestClient,
    services: Services,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    spark_writers: SparkWriters,
) -> None:
    """A table with liquid clustering (`CLUSTER BY (x, y)`, Delta 3.3.3 on Spark 3.5):
    its writer features (clustering, domainMetadata) are ones delta-rs reads past but
    cannot write; the zorder kind refuses it (Delta refuses ZORDER BY there), the
    clustering kind runs OPTIMIZE's clustering steps, checked before their commit;
    delta-rs reads the same rows in fewer files; a rollback by delta-rs is refused, naming
    Spark's RESTORE."""
    services.warm_applications(spark_writers, monkeypatch)
    warehouse = tmp_path / "wh"
    path = str(warehouse / "lake" / "clustered")
    table = f"delta.`{path}`"
    inserts = [
        {
            "sql": f"INSERT INTO {table} SELECT id, (id * 37) % 100, (id * 53) % 100 "
            f"FROM range({10 * i}, {10 * i + 10}, 1, 1)"
        }
        for i in range(4)
    ]
    spark_writers.run(
        "delta",
        [
            {
                "sql": f"CREATE TABLE {table} (id BIGINT, x BIGINT, y BIGINT) USING delta "
                "CLUSTER BY (x, y)"
            },
            *inserts,
        ],
    )
    _catalog(client, warehouse)
    zorder = {"enabled": True, "columns": ["x", "y"], "max_files_per_lookup": 1.0}
    _register(client, "clustered", {"compaction": {"enabled": False}, "zorder": zorder})
    url = f"{TABLES}/lake/clustered"
    health = client.get(f"{url}/delta")
    assert health.status_code == 200, health.text
    facts = health.json()["facts"]
    assert facts["clustering_columns"] == ["x", "y"]
    assert facts["protocol"]["min_reader_version"] == 1
    assert {"clustering", "domainMetadata"} <= set(facts["protocol"]["writer_features"])
    layout = next(c for c in health.json()["commands"] if c["command"] in ("cluster", "zorder"))
    assert layout["command"] == "cluster" and "Delta refuses ZORDER BY" in layout["reason"]
    # Z-order is never opened on it (at registration, nor when asked), saying why.
    detail = client.get(f"{url}/events").json()["items"][0]["decision_detail"]
    assert "Delta refuses ZORDER BY" in detail["zorder"]["reason"], detail["zorder"]
    opened = client.get("/api/v1/tasks", params={"table": "lake.clustered", "catalog": "dlake"})
    assert opened.json()["items"] == [], opened.json()
    reason = _skipped(services, _ask(client, "zorder", url))
    assert "CLUSTER BY x, y" in reason and "Delta refuses ZORDER BY" in reason, reason

    clustering = {"enabled": True, "max_files_per_lookup": 1.0}
    got = client.put(
        f"{url}/policy", json={"compaction": {"enabled": False}, "clustering": clustering}
    )
    assert got.status_code == 200, got.text
    before = _live_paths(path)
    rows = sorted(DeltaTable(path).to_pyarrow_table().to_pylist(), key=lambda r: r["id"])
    seen = _digest(path)
    task_id = _ask(client, "clustering", url)
    plan = services.plan(task_id)
    assert plan["clustering"] == ["x", "y"] and plan["partitions"] is None
    assert "never ZORDER BY" in (task_of(services.rt, task_id).reason or "")
    metrics = services.run(task_id).metrics or {}
    assert metrics["operation"] == "OPTIMIZE", metrics
    assert metrics["validation"]["status"] == "passed", metrics["validation"]
    assert metrics["files_removed"] == len(before) > metrics["files_added"]
    # Spark clustered (Delta's ClusteringStrategy), DuckDB checked, then Delta committed
    assert metrics["validation"]["when"] == "before the commit", metrics
    commit = DeltaTimeline(path).find_job_commits(task_id)
    assert commit is not None and commit.summary.get("param.zOrderBy", "[]") == "[]"
    assert json.loads(commit.summary["param.clusterBy"]) == ["x", "y"]
    added = [a["add"] for a in DeltaTimeline(path).read_actions(int(commit.id)) if "add" in a]
    # one new ZCUBE, its files tagged as Delta's OPTIMIZE tags them
    assert len({a["tags"]["ZCUBE_ID"] for a in added}) == 1, added
    assert all(a["clusteringProvider"] == "liquid" and not a["dataChange"] for a in added)
    after = sorted(DeltaTable(path).to_pyarrow_table().to_pylist(), key=lambda r: r["id"])
    assert after == rows and len(_live_paths(path)) == metrics["files_added"]
    assert _digest(path) == seen  # DuckDB too: the same rows

    refused = client.post(f"{url}/rollback", json={"to_snapshot": 1})
    assert refused.status_code == 422, refused.text  # not a conflict to retry
    assert "RESTORE TABLE" in refused.text and "ClusteredTable" in refused.text


def _age(path: str, up_to: int, days: float) -> None:
    """Set the log's files up to version `up_to` `days` back (as if written then)."""
    at = datetime.now(UTC).timestamp() - days * 86400
    for f in (Path(path) / "_delta_log").iterdir():
        if f.name[:20].isdigit() and int(f.name[:20]) <= up_to:
            os.utime(f, (at, at))


@pytest.mark.spark
@pytest.mark.timeout(1200)
def test_clean_removes_log_files_past_the_tables_log_retention(
    client: TestClient,
    services: Services,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    spark_writers: SparkWriters,
) -> None:
    """Six versions, the first four 40 days old, never checkpointed: Delta would keep them
    all. Clean's first run writes a checkpoint at the head (none follows them); once that
    checkpoint is itself past the 30-day log retention, the next removes every log file
    before it. A table whose own log retention is 60 days keeps them (never below Delta's
    own). delta-rs reads the table after, at its newest version."""
    services.warm_applications(spark_writers, monkeypatch)
    warehouse = tmp_path / "wh"
    path = str(warehouse / "lake" / "events")
    keep = str(warehouse / "lake" / "kept")
    for i in range(6):
        write_deltalake(path, _batch(10 * i, "d1"), mode="append")
        config = {"delta.logRetentionDuration": "interval 60 days"}
        write_deltalake(keep, _batch(10 * i, "d1"), mode="append", configuration=config)
    _age(path, 3, 40)
    _age(keep, 3, 40)
    _catalog(client, warehouse)
    policy = {"compaction": {"enabled": False}}
    _register(client, "events", policy)
    _register(client, "kept", policy)

    reason = _skipped(services, _ask(client, "clean", f"{TABLES}/lake/kept"))
    assert "no log file is older than the table's log retention (1440 h)" in reason, reason

    health = client.get(f"{TABLE}/delta").json()["facts"]
    assert health["log_files"] == 6 and health["commit_files"] == 6
    assert health["checkpoint_version"] is None and health["log_retention_hours"] == 720
    assert health["commits_waiting_for_a_checkpoint"] == 4
    assert health["removable_log_files"] == 0 and health["oldest_commit_age_s"] > 39 * 86400

    task_id = _ask(client, "clean")
    plan = services.plan(task_id)
    assert (plan["vacuum"], plan["log_cleanup"], plan["checkpoint"]) == (False, True, True)
    metrics = services.run(task_id).metrics or {}
    assert metrics["delta"]["log"]["checkpoint_version"] == 5, metrics
    assert metrics["delta"]["log"]["log_files_removed"] == 0  # the checkpoint is new
    assert DeltaTimeline(path).versions() == [0, 1, 2, 3, 4, 5]

    _age(path, 5, 35)  # 35 days later: the checkpoint too is past the retention
    task_id = _ask(client, "clean")
    plan = services.plan(task_id)
    assert (plan["log_cleanup"], plan["checkpoint"]) == (True, False)
    metrics = services.run(task_id).metrics or {}
    assert metrics["delta"]["log"]["log_files_removed"] == 5, metrics  # versions 0-4
    assert DeltaTimeline(path).versions() == [5]
    table = DeltaTable(path)
    assert table.version() == 5 and table.to_pyarrow_table().num_rows == 60
    assert _digest(path).rows == 60  # DuckDB reads it from the checkpoint alone
    health = client.get(f"{TABLE}/delta").json()["facts"]
    assert health["removable_log_files"] == health["commits_waiting_for_a_checkpoint"] == 0
    assert health["checkpoint_version"] == 5 and health["oldest_version_in_log"] == 5


@pytest.mark.spark
@pytest.mark.timeout(1200)
def test_row_level_ttl_deletes_rows_and_its_guard_restores_a_miscount(
    client: TestClient,
    services: Services,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    spark_writers: SparkWriters,
) -> None:
    """TTL on a table partitioned by region, not by its event time: a row `DELETE … WHERE
    ts < cutoff` run through the job's real path, its exact-count guard (Spark's count
    right before = the commit's numDeletedRows); then a delete made to miscount (the
    test-only failpoint) is RESTOREd. delta-rs reads the rows left each time."""
    services.warm_applications(spark_writers, monkeypatch)
    warehouse = tmp_path / "wh"
    path = str(warehouse / "lake" / "clicks")
    now = datetime.now(UTC)

    def write(ids: range, days_back: list[float]) -> None:
        """Rows `ids`, each as old as its `days_back` (a file holds rows of every age)."""
        ts = [now - timedelta(days=d) for d in days_back]
        rows = pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "region": [f"r{i % 2}" for i in ids],
                "ts": pa.array(ts, pa.timestamp("us", "UTC")),
            }
        )
        write_deltalake(path, rows, partition_by=["region"], mode="append")

    for batch in range(5):  # 100 rows, 9.5 days old to half a day old, 10 of each age
        write(range(20 * batch, 20 * batch + 20), [i % 10 + 0.5 for i in range(20)])
    _catalog(client, warehouse)
    ttl = {"enabled": True, "column": "ts", "retention_days": 7}
    _register(client, "clicks", {"compaction": {"enabled": False}, "ttl": ttl})
    url = f"{TABLES}/lake/clicks"
    cutoff = now - timedelta(days=7)

    task_id = _ask(client, "ttl", url)
    plan = services.plan(task_id)
    assert plan["level"] == "row" and plan["partition_column"] is None
    assert plan["rows_to_delete"] == 30 and plan["expected_metadata_only"] is False
    metrics = services.run(task_id).metrics or {}
    assert metrics["counted_rows"] == metrics["deleted_records"] == 30, metrics
    assert metrics["deleted_source"] == "operationMetrics.numDeletedRows"
    assert metrics["metadata_only"] is False and metrics["files_added"] > 0
    assert metrics["predicate"].startswith("`ts` < ")
    commit = DeltaTimeline(path).find_job_commits(task_id)
    assert commit is not None and commit.operation == "DELETE"
    left = DeltaTable(path).to_pyarrow_table()
    assert left.num_rows == 70 and min(left.column("ts").to_pylist()) >= cutoff
    assert _digest(path).rows == 70

    write(range(5000, 5004), [20, 20, 1, 1])  # two more expired rows, two kept
    before = DeltaTimeline(path).versions()[-1]
    files = _live_paths(path)
    monkeypatch.setattr(services.rt.settings, "failpoint", "ttl-miscount-row")
    monkeypatch.setattr(services.rt.settings, "failpoints_enabled", True)
    task_id = _ask(client, "ttl", url)
    assert services.plan(task_id)["rows_to_delete"] == 2
    with pytest.raises(AssertionError) as failed:
        services.run(task_id)
    assert "deleted 3 rows where it counted 2" in str(failed.value), failed.value
    assert "RESTOREd to version" in str(failed.value)
    assert task_of(services.rt, task_id).state == "failed"
    done = DeltaTimeline(path).since(str(before), 10).commits
    assert [c.operation for c in done] == ["DELETE", "RESTORE"]
    assert done[0].summary["files-added"] == "2"  # a row delete: both files rewritten
    assert _live_paths(path) == files and DeltaTable(path).to_pyarrow_table().num_rows == 74
    assert _digest(path) == _digest(path, before)


def _insert(table: str, start: int, day: str = "d1", **step: Any) -> dict[str, Any]:
    """A Spark INSERT of ten rows (one small file) into `table` (a step's extras: conf)."""
    sql = (
        f"INSERT INTO {table} SELECT id, '{day}', (id * 37) % 100, (id * 53) % 100 "
        f"FROM range({start}, {start + 10}, 1, 1)"
    )
    return {"sql": sql, **step}


def _create(table: str) -> dict[str, Any]:
    sql = f"CREATE TABLE {table} (id BIGINT, day STRING, x BIGINT, y BIGINT) USING delta "
    return {"sql": sql + "PARTITIONED BY (day)"}


@pytest.mark.spark
@pytest.mark.timeout(2400)  # two writers' worth of Spark commits: 20 min at load 30
def test_a_table_another_optimizer_keeps_is_left_alone_with_the_evidence(
    client: TestClient, services: Services, tmp_path: Path, spark_writers: SparkWriters
) -> None:
    """Never fight another optimizer, seen in the log alone (no table property says so):
    a Spark writer whose session turns Delta's auto compaction on commits an OPTIMIZE with
    auto=true, and another service runs OPTIMIZE … ZORDER BY and VACUUM on a schedule
    (unmarked: not lakewarden's). Both tables have small files lakewarden would compact;
    it leaves them alone, each skip and health's other_optimizers giving the evidence."""
    warehouse = tmp_path / "wh"
    auto = f"delta.`{warehouse / 'lake' / 'autocompacted'}`"
    conf = {
        "spark.databricks.delta.autoCompact.enabled": "true",
        "spark.databricks.delta.autoCompact.minNumFiles": "3",
    }
    writes = [_insert(auto, 10 * i, conf=conf) for i in range(3)]  # the third compacts
    writes += [_insert(auto, 100 + 10 * i) for i in range(3)]  # three more small files
    spark_writers.run("delta", [_create(auto), *writes], timeout=1500)
    path = str(warehouse / "lake" / "autocompacted")
    commits = DeltaTimeline(path).since(None, 50).commits
    compacted = [c for c in commits if c.operation == "OPTIMIZE"]
    assert [c.summary.get("param.auto") for c in compacted] == ["true"], commits
    assert marker_of(compacted[0].summary) is None

    other = f"delta.`{warehouse / 'lake' / 'optimized'}`"
    theirs = {"user_metadata": "nightly maintenance"}
    vacuum = {
        "sql": f"VACUUM {other} RETAIN 168 HOURS",
        "conf": {"spark.databricks.delta.vacuum.logging.enabled": "true"},
    }
    zorder = {"sql": f"OPTIMIZE {other} ZORDER BY (x, y)", **theirs}
    # each kind's skip is the evidence, whatever else it would find: few files suffice
    steps = [_create(other), _insert(other, 0), zorder, vacuum]
    steps += [_insert(other, 100), zorder, vacuum, _insert(other, 200)]
    spark_writers.run("delta", steps, timeout=1500)

    _catalog(client, warehouse)
    policy = {
        "compaction": {"min_input_files": 3, "min_small_files": 3},
        "zorder": {"enabled": True, "columns": ["x", "y"], "max_files_per_lookup": 1.0},
        "clean": {"max_snapshot_age_hours": 0.0001, "allow_below_safety_floors": True},
    }
    # auto compaction fights compaction alone: the other kinds stay off on that table
    _register(client, "autocompacted", {"compaction": policy["compaction"]})
    _register(client, "optimized", policy)
    # Registration's baseline judged both: nothing opened.
    opened = client.get("/api/v1/tasks", params={"catalog": "dlake"}).json()["items"]
    assert [t["kind"] for t in opened] == [], opened

    url = f"{TABLES}/lake/autocompacted"
    health = client.get(f"{url}/delta").json()
    assert health["facts"]["small_files"] >= 3
    found = health["facts"]["other_optimizers"]
    assert list(found) == ["compaction"] and found["compaction"]["who"] == "auto-compaction"
    said = f"version {compacted[0].id} is an OPTIMIZE with auto=true"
    assert said in found["compaction"]["evidence"]
    optimize = next(c for c in health["commands"] if c["command"] == "optimize")
    assert not optimize["due"] and said in optimize["reason"]
    assert said in _skipped(services, _ask(client, "compaction", url))

    url = f"{TABLES}/lake/optimized"
    found = client.get(f"{url}/delta").json()["facts"]["other_optimizers"]
    assert set(found) == {"optimize", "vacuum"}, found
    assert "2 OPTIMIZE/REORG commits lakewarden did not make" in found["optimize"]["evidence"]
    assert "2 VACUUM commits lakewarden did not make" in found["vacuum"]["evidence"]
    for kind in ("compaction", "zorder"):
        reason = _skipped(services, _ask(client, kind, url))
        assert "2 OPTIMIZE/REORG commits lakewarden did not make" in reason, (kind, reason)
    reason = _skipped(services, _ask(client, "clean", url))
    assert "2 VACUUM commits lakewarden did not make" in reason, reason


class _Writer(threading.Thread):
    """A second writer, delta-rs, changing one row of d1 at a time until stopped: a
    DELETE of every other row on its first pass over them, then UPDATEs (`x + 1000`),
    each a commit rewriting the file that holds the row. What it committed, and the
    conflicts its own commits lost (delta-rs' conflict check: such a change is not made)."""

    def __init__(self, path: str, ids: list[int]) -> None:
        super().__init__(daemon=True)
        self.path, self.ids, self.stop = path, ids, threading.Event()
        self.deleted: set[int] = set()
        self.updated: dict[int, int] = {}  # row -> times x was raised by 1000
        self.conflicts = 0

    def run(self) -> None:
        from deltalake.exceptions import CommitFailedError

        n = 0
        while not self.stop.wait(0.2):
            row = self.ids[n % len(self.ids)]
            delete = n < len(self.ids) and n % 2 == 0
            n += 1
            if row in self.deleted:
                continue
            table = DeltaTable(self.path)
            try:
                if delete:
                    table.delete(f"id = {row}")
                    self.deleted.add(row)
                else:
                    table.update(updates={"x": "x + 1000"}, predicate=f"id = {row}")
                    self.updated[row] = self.updated.get(row, 0) + 1
            except CommitFailedError:
                self.conflicts += 1


@pytest.mark.spark
@pytest.mark.timeout(1200)
def test_a_writer_deleting_and_updating_during_optimize_loses_nothing(
    client: TestClient,
    services: Services,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    spark_writers: SparkWriters,
) -> None:
    """While lakewarden's compaction OPTIMIZEs d1, another writer (delta-rs) deletes and
    updates rows of d1, each a commit rewriting the file that holds the row. Delta's
    conflict check fails the OPTIMIZE whose files were changed under it (nothing of it
    commits; the run names the conflict), and lakewarden retries the attempt, re-planned
    from the table as it is then, which commits. Every committed delete and update is
    there, nothing else changed: delta-rs and DuckDB read the same rows, as the writer's
    own record says they must be."""
    services.warm_applications(spark_writers, monkeypatch)
    monkeypatch.setattr(services.rt.settings, "retry_base_s", 0.2)
    monkeypatch.setattr(services.rt.settings, "retry_cap_s", 0.5)
    warehouse = tmp_path / "wh"
    path = str(warehouse / "lake" / "events")
    for i in range(6):  # d1: six small files of ten rows
        write_deltalake(path, _batch(10 * i, "d1"), partition_by=["day"], mode="append")
    _catalog(client, warehouse)
    spark = {"min_input_files": 3, "min_small_files": 3, "native_rewrite": False}  # OPTIMIZE's
    _register(client, "events", {"compaction": spark})
    before = {r[0]: r for r in _rows(path)}
    for opened in client.get("/api/v1/tasks", params={"catalog": "dlake"}).json()["items"]:
        client.post(f"/api/v1/tasks/{opened['id']}/cancel")  # the baseline's: asked below
    task_id = _ask(client, "compaction")
    assert services.plan(task_id)["partitions"] == [{"day": "d1"}]

    writer = _Writer(path, [10 * i + j for j in range(10) for i in range(6)])
    writer.start()
    try:
        state = services.attempt(task_id)  # the OPTIMIZE, with the writer committing
    finally:
        writer.stop.set()
        writer.join(60)
    runs = services.runs(task_id)
    assert writer.deleted and writer.updated
    if state == "pending":  # the writer's commit conflicted: retried, re-planned
        first = runs[0]
        assert (first.metrics or {}).get("conflict", "").startswith(("Concurrent", "DELTA_")), (
            first.error
        )
        assert "Concurrent" in (first.error or ""), first.error
        worker = Worker(services.rt)  # re-planned once its backoff is over
        wait_for(lambda: worker.run_once() or None, 60, f"task {task_id} re-planned")
        assert task_of(services.rt, task_id).state == "planned"
        state = services.attempt(task_id)
        runs = services.runs(task_id)
    else:  # OPTIMIZE committed first: each later change of the writer's read it afresh
        assert writer.conflicts, "neither the OPTIMIZE nor the writer saw the other's commit"
    assert state == "succeeded", [(r.attempt, r.error) for r in runs]
    print(f"conflicts: lakewarden {len(runs) - 1}, the writer {writer.conflicts}")
    last = runs[-1].metrics or {}
    assert last["operation"] == "OPTIMIZE" and last["validation"]["status"] == "passed"
    expected = sorted(
        (k, r[1], r[2] + 1000 * writer.updated.get(k, 0), r[3])
        for k, r in before.items()
        if k not in writer.deleted
    )
    assert _rows(path) == expected  # delta-rs and DuckDB alike
    assert _files(path) == {"d1": 1}  # what the writer's rewrites left, packed


@pytest.mark.spark
@pytest.mark.timeout(1200)
def test_optimize_and_vacuum_on_s3_through_s3a(
    client: TestClient,
    services: Services,
    monkeypatch: pytest.MonkeyPatch,
    spark_writers: SparkWriters,
    s3_server: S3Server,
    rt: Runtime,
) -> None:
    """A Delta table in a bucket of the session's S3 server (S3Proxy), its catalog's
    credentials by reference: the compaction's OPTIMIZE and the clean's VACUUM run in the
    Delta family's Spark through Hadoop's S3A (the `s3a` jars: hadoop-aws 3.3.4 and the
    AWS SDK v1 bundle), the table's s3:// read as s3a://, its bucket's credentials set on
    the running session only; the job's own reads (its commit, validation) by delta-rs
    with the same properties. delta-rs reads the rows back from the bucket; the files the
    OPTIMIZE replaced are gone from it."""
    services.warm_applications(spark_writers, monkeypatch)
    for secrets in {rt.settings.secrets_path, services.rt.settings.secrets_path}:  # API, jobs
        secrets.mkdir(parents=True, exist_ok=True)
        (secrets / "delta-s3-access").write_text(s3_server.access_key)
        (secrets / "delta-s3-secret").write_text(s3_server.secret_key)
    warehouse = f"{s3_server.bucket('lw-delta')}/{uuid.uuid4().hex[:8]}"
    path = f"{warehouse}/lake/events"
    writer = {
        "AWS_ENDPOINT_URL": s3_server.endpoint,
        "AWS_ACCESS_KEY_ID": s3_server.access_key,
        "AWS_SECRET_ACCESS_KEY": s3_server.secret_key,
        "AWS_REGION": "us-east-1",
        "AWS_ALLOW_HTTP": "true",
        "AWS_S3_ALLOW_UNSAFE_RENAME": "true",
    }
    for i in range(4):  # d1: four small files
        batch = _batch(10 * i, "d1")
        write_deltalake(path, batch, partition_by=["day"], mode="append", storage_options=writer)
    properties = {
        "warehouse": warehouse,
        "s3.endpoint": s3_server.endpoint,
        "s3.region": "us-east-1",
        "s3.access-key-id": {"file": "delta-s3-access"},
        "s3.secret-access-key": {"file": "delta-s3-secret"},
    }
    got = client.post(
        "/api/v1/catalogs", json={"name": "dlake", "type": "delta", "properties": properties}
    )
    assert got.status_code == 201, got.text
    policy = {
        "compaction": {"min_input_files": 3, "min_small_files": 3},
        "clean": {"max_snapshot_age_hours": 0.0001, "allow_below_safety_floors": True},
    }
    _register(client, "events", policy)
    for opened in client.get("/api/v1/tasks", params={"catalog": "dlake"}).json()["items"]:
        client.post(f"/api/v1/tasks/{opened['id']}/cancel")  # the baseline's: asked below
    before = DeltaTable(path, storage_options=writer).to_pyarrow_table()
    replaced = [
        str(s3_server.object_path(f"{path}/{p}"))
        for p in pa.table(DeltaTable(path, storage_options=writer).get_add_actions())
        .column("path")
        .to_pylist()
    ]
    assert len(replaced) == 4 and all(Path(p).exists() for p in replaced)

    task_id = _ask(client, "compaction")
    plan = services.plan(task_id)
    assert plan["path"] == path and plan["partitions"] == [{"day": "d1"}]
    metrics = services.run(task_id).metrics or {}
    assert metrics["operation"] == "OPTIMIZE" and metrics["files_removed"] == 4, metrics
    assert metrics["validation"]["status"] == "passed" and metrics["validation"]["rows"] == 40
    # Spark's rewrite on S3, checked by pyarrow's reads of the bucket before the commit
    assert metrics["validation"]["when"] == "before the commit", metrics

    task_id = _ask(client, "clean")
    plan = services.plan(task_id)
    assert plan["vacuum"] is True and plan["below_retention_check"] is True
    metrics = services.run(task_id).metrics or {}
    assert metrics["operation"] == "VACUUM END" and metrics["files_deleted"] == 4, metrics
    assert not any(Path(p).exists() for p in replaced)  # deleted from the bucket

    after = DeltaTable(path, storage_options=writer)
    ops = [h["operation"] for h in after.history()]
    assert ops[:3] == ["VACUUM END", "VACUUM START", "OPTIMIZE"], ops
    assert len(after.file_uris()) == 1
    assert digest_rows(after.to_pyarrow_table()) == digest_rows(before)
    shown = client.get("/api/v1/catalogs/dlake").json()
    assert s3_server.secret_key not in str(shown) and s3_server.access_key not in str(shown)


def _without_stats(path: str) -> dict[str, int]:
    """Live files whose add action has no `stats`, by partition, read from the log's JSON
    commit files themselves (not delta-rs, not lakewarden's reader): each path's newest
    add, less those removed after."""
    live: dict[str, dict[str, Any]] = {}
    for commit in sorted((Path(path) / "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                live[action["add"]["path"]] = action["add"]
            elif "remove" in action:
                live.pop(action["remove"]["path"], None)
    out: dict[str, int] = {}
    for add in live.values():
        if not add.get("stats"):
            key = "/".join(f"{k}={v}" for k, v in sorted(add["partitionValues"].items()))
            out[key] = out.get(key, 0) + 1
    return out


@pytest.mark.spark
@pytest.mark.timeout(1200)
def test_stats_recomputes_the_statistics_a_writer_left_out(
    client: TestClient,
    services: Services,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    spark_writers: SparkWriters,
) -> None:
    """Issue 32 §1 on Delta: a writer with statistics collection off
    (`spark.databricks.delta.stats.collect=false`) leaves files without statistics in two
    partitions. Health counts them; the registration opens a stats task; the job
    recomputes them with Delta's StatisticsCollection.recompute in those two partitions,
    those files only (one COMPUTE STATS commit with the job's mark, neither the third
    partition's file nor the other file of a due partition in it); the log's JSON then
    holds statistics for every live file, the rows as before; a stats task asked again is
    skipped, saying the statistics are fresh."""
    services.warm_applications(spark_writers, monkeypatch)
    warehouse = tmp_path / "wh"
    path = str(warehouse / "lake" / "nostats")
    table = f"delta.`{path}`"
    off = {"spark.databricks.delta.stats.collect": "false"}
    steps = [_create(table), _insert(table, 0, "d1", conf=off), _insert(table, 10, "d2", conf=off)]
    # files with statistics too: d3's, and one more in d1 (a due partition)
    spark_writers.run("delta", [*steps, _insert(table, 20, "d3"), _insert(table, 30, "d1")])
    assert _without_stats(path) == {"day=d1": 1, "day=d2": 1}  # what the job must change
    rows = _digest(path)

    _catalog(client, warehouse)
    _register(client, "nostats", {"stats": {"enabled": True}})
    health = client.get(f"{TABLES}/lake/nostats/delta").json()
    assert health["facts"]["files_without_stats"] == 2, health["facts"]
    command = {c["command"]: c for c in health["commands"]}["compute_stats"]
    assert command["due"] and "2 of 4 live file(s) have no statistics" in command["reason"]
    detail = client.get(f"{TABLES}/lake/nostats/events").json()["items"][0]["decision_detail"]
    assert detail["stats"]["decision"] == "task-created", detail
    task_id = int(detail["stats"]["task_id"])

    plan = services.plan(task_id)
    assert plan["action"] == "recompute_stats" and plan["files_without_stats"] == 2
    assert sorted(p["day"] for p in plan["partitions"]) == ["d1", "d2"]
    run = services.run(task_id)
    metrics = run.metrics or {}
    assert metrics["delta"] == {
        "files_without_stats_before": 2,
        "files_without_stats_chosen": 2,
        "files_without_stats_after": 0,
    }
    commit = DeltaTimeline(path).find_job_commits(task_id)
    assert commit is not None and commit.operation == "COMPUTE STATS"
    # the two without statistics; not d3's file, nor d1's that had them
    assert commit.summary["files-added"] == "2"

    assert _without_stats(path) == {}  # every live file has statistics now
    assert _digest(path) == rows
    again = _ask(client, "stats", f"{TABLES}/lake/nostats")
    assert "statistics are fresh: all 4 live file(s)" in _skipped(services, again)
