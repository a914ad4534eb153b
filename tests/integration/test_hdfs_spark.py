"""Every kind on tables whose warehouse is a real HDFS (the session's `hdfs`: Hadoop's own
NameNode and DataNode): a JDBC catalog registered with an `hdfs://` warehouse, the tables
written and read back by pyiceberg through hdfs-native (lakewarden.hdfs), planned by a
worker and run by the scheduler's Spark through Hadoop's HDFS client. One catalog and one
namespace for the module; each test its own table."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import pytest
from fastapi.testclient import TestClient
from helpers import (
    SCHEMA,
    admin_headers,
    append_batches,
    current,
    equal_to,
    free_port,
    make_table,
    manage,
    run_one,
    task_of,
)
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table
from pyiceberg.transforms import DayTransform, IdentityTransform
from sqlalchemy import delete, func, select, update

from lakewarden import storage
from lakewarden.db.models import Catalog as CatalogRow
from lakewarden.db.models import JobRun, ManagedTable, Task
from lakewarden.db.session import transaction
from lakewarden.fingerprint import fingerprint
from lakewarden.formats.iceberg.markers import ATTEMPT_KEY
from lakewarden.hdfs import HdfsFileIO, filesystem
from lakewarden.runtime import Runtime
from lakewarden.spark.commits import TASK_KEY
from lakewarden.spark.local_hdfs import LocalHdfs
from lakewarden.tasks import repo
from services.scheduler.main import Scheduler
from services.worker.main import Worker

pytestmark = pytest.mark.spark

URL_ENV = "LW_SECRET_TEST_HDFS_CATALOG_URL"
NS = "lake"
# The Python client's retries, bounded (hdfs-native fails over 15 times by default, with a
# backoff of up to 15 s, even to a single NameNode); `hadoop.*` reaches Spark's client too.
CLIENT = {
    "hadoop.dfs.client.failover.max.attempts": "1",
    "hadoop.ipc.client.connect.max.retries": "1",
}


@dataclass
class Lake:
    catalog: str
    client: Catalog
    hdfs: LocalHdfs

    def table(self, name: str, *, partition: str | None = "region", schema: Any = SCHEMA) -> Table:
        table = self.client.create_table(f"{NS}.{name}", schema=schema)
        if partition is not None:
            with table.update_spec() as spec:
                spec.add_field(partition, IdentityTransform(), partition)
        return self.client.load_table(f"{NS}.{name}")

    def load(self, name: str) -> Table:
        return self.client.load_table(f"{NS}.{name}")

    def manage(self, rt: Runtime, name: str, policy: dict[str, Any], kind: str) -> int:
        with transaction(rt.engine) as s:
            row = ManagedTable(catalog=self.catalog, namespace=NS, name=name, policy=policy)
            s.add(row)
            s.flush()
            task_id = repo.create_task(
                s, table_id=row.id, kind=kind, trigger={"reason": "test"}, actor="test"
            )
        assert task_id is not None
        return task_id


@pytest.fixture(scope="module")
def lake(spark_rt: Runtime, hdfs: LocalHdfs) -> Iterator[Lake]:
    name = f"hdfs_{uuid.uuid4().hex[:6]}"  # Spark keeps a catalog once used: one per module
    os.environ[URL_ENV] = spark_rt.db_url
    properties: dict[str, Any] = {
        "uri": {"env": URL_ENV},
        "warehouse": f"{hdfs.url}/warehouse/{name}",
        **CLIENT,
    }
    with transaction(spark_rt.engine) as s:
        s.add(CatalogRow(name=name, type="jdbc", properties=properties, version=1))
    spark_rt.catalogs.forget()
    client = spark_rt.catalogs.load(name)
    client.create_namespace(NS)
    try:
        yield Lake(name, client, hdfs)
    finally:
        with transaction(spark_rt.engine) as s:
            s.execute(delete(ManagedTable).where(ManagedTable.catalog == name))
            s.execute(delete(CatalogRow).where(CatalogRow.name == name))
        spark_rt.catalogs.forget()
        os.environ.pop(URL_ENV, None)


def _planned(rt: Runtime, task_id: int) -> dict[str, Any]:
    assert Worker(rt).run_once()
    task = task_of(rt, task_id)
    assert task.state == "planned" and task.plan is not None, (task.state, task.reason)
    return task.plan


def _attempts_committed(table: Table, task_id: int) -> set[str]:
    """Which attempts of the task committed (a compaction with partial progress commits
    one snapshot per partition, each tagged with the task and the attempt)."""
    return {
        s.summary.get(ATTEMPT_KEY, "")
        for s in table.snapshots()
        if s.summary is not None and s.summary.get(TASK_KEY) == str(task_id)
    }


def _run_metrics(rt: Runtime, task_id: int) -> list[dict[str, Any]]:
    with transaction(rt.engine) as s:
        runs = s.scalars(select(JobRun).where(JobRun.task_id == task_id).order_by(JobRun.id))
        return [dict(r.metrics or {}) for r in runs]


def test_the_tables_io_is_hdfs_native(lake: Lake) -> None:
    table = append_batches(lake.table("io"), 1)
    assert isinstance(table.io, HdfsFileIO)
    assert table.location().startswith(f"{lake.hdfs.url}/warehouse/")
    assert table.scan().to_arrow().num_rows == 10


def test_compaction_is_validated_and_keeps_every_row(
    scheduler: Scheduler, spark_rt: Runtime, lake: Lake
) -> None:
    table = append_batches(lake.table("compacted"), 3)
    before = fingerprint(table)
    assert before.data_files == 6
    task_id = lake.manage(
        spark_rt,
        "compacted",
        {"compaction": {"min_small_files": 2, "min_input_files": 2}},
        "compaction",
    )
    _planned(spark_rt, task_id)
    assert run_one(scheduler) == "succeeded"
    table = lake.load("compacted")
    after = fingerprint(table)
    assert after.data_files == 2  # one per partition, on HDFS
    assert (after.rows, after.checksum) == (before.rows, before.checksum)
    assert all(f.startswith(lake.hdfs.url) for f in table.inspect.files()["file_path"].to_pylist())
    (metrics,) = _run_metrics(spark_rt, task_id)
    assert metrics["validation"]["status"] == "passed"
    summary = current(table).summary
    assert summary is not None and summary[TASK_KEY] == str(task_id)


def test_a_corrupted_rewrite_is_never_published(
    scheduler: Scheduler, spark_rt: Runtime, lake: Lake, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = append_batches(lake.table("undone"), 3)
    rows, before = fingerprint(table), current(table).snapshot_id
    task_id = lake.manage(
        spark_rt,
        "undone",
        {"compaction": {"min_small_files": 2, "min_input_files": 2}},
        "compaction",
    )
    _planned(spark_rt, task_id)
    monkeypatch.setattr(spark_rt.settings, "failpoint", "corrupt-rewrite")
    monkeypatch.setattr(spark_rt.settings, "failpoints_enabled", True)
    assert run_one(scheduler) == "failed"
    (metrics,) = _run_metrics(spark_rt, task_id)
    assert metrics["validation"]["publish"]["action"] == "not_published"
    table = lake.load("undone")
    assert current(table).snapshot_id == before and list(table.metadata.refs) == ["main"]
    assert fingerprint(table) == rows


@pytest.mark.parametrize("kind, columns", [("zorder", ["a", "b"]), ("clustering", ["a"])])
def test_layout_rewrites(
    scheduler: Scheduler, spark_rt: Runtime, lake: Lake, kind: str, columns: list[str]
) -> None:
    import random

    schema = pa.schema([pa.field("a", pa.int64(), False), pa.field("b", pa.int64(), False)])
    table = lake.table(f"laid_{kind}", partition=None, schema=schema)
    rng = random.Random(kind)
    for _ in range(8):  # every file spans the whole range of a and b
        values = [[rng.randrange(1000) for _ in range(200)] for _ in range(2)]
        table.append(pa.table({"a": values[0], "b": values[1]}, schema=schema))
        table = table.refresh()
    before = fingerprint(table)
    total = sum(f.file_size_in_bytes for f in (t.file for t in table.scan().plan_files()))
    policy = {kind: {"enabled": True, "columns": columns, "target_file_size_bytes": total // 4}}
    task_id = lake.manage(spark_rt, f"laid_{kind}", policy, kind)
    _planned(spark_rt, task_id)
    assert run_one(scheduler) == "succeeded"
    after = fingerprint(lake.load(f"laid_{kind}"))
    assert (after.rows, after.checksum) == (before.rows, before.checksum)
    done = task_of(spark_rt, task_id)
    assert done.result is not None and done.result["rewritten_data_files"] == 8
    assert done.result["committed_snapshot_id"] == after.snapshot_id


def _events(lake: Lake, name: str, *, partitioned: bool, days: int = 6) -> Table:
    """Rows every four hours over `days` days, one commit per day."""
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("ts", pa.timestamp("us", tz="UTC"), nullable=False),
        ]
    )
    table = lake.client.create_table(f"{NS}.{name}", schema=schema)
    if partitioned:
        with table.update_spec() as spec:
            spec.add_field("ts", DayTransform(), "ts_day")
    now, next_id = datetime.now(UTC), 0
    for d in range(days, -1, -1):
        day = (now - timedelta(days=d)).replace(hour=0, minute=0, second=0, microsecond=0)
        stamps = [s for s in (day + timedelta(hours=h) for h in range(0, 24, 4)) if s <= now]
        ids = list(range(next_id, next_id + len(stamps)))
        lake.load(name).append(pa.table({"id": ids, "ts": stamps}, schema=schema))
        next_id += len(stamps)
    return lake.load(name)


@pytest.mark.parametrize("level", ["partition", "row"])
def test_ttl(scheduler: Scheduler, spark_rt: Runtime, lake: Lake, level: str) -> None:
    name = f"ttl_{level}"
    table = _events(lake, name, partitioned=level == "partition")
    before = table.scan().to_arrow().to_pylist()
    policy = {"ttl": {"enabled": True, "column": "ts", "retention_days": 2.5, "max_fraction": 0.9}}
    task_id = lake.manage(spark_rt, name, policy, "ttl")
    plan = _planned(spark_rt, task_id)
    assert plan["level"] == level
    cutoff = datetime.fromisoformat(plan["cutoff"])
    assert run_one(scheduler) == "succeeded"
    after = lake.load(name).scan().to_arrow().to_pylist()
    kept = sorted(r["id"] for r in before if r["ts"] >= cutoff)
    assert sorted(r["id"] for r in after) == kept and len(after) < len(before)


def test_clean_expires_snapshots_removes_orphans_and_rewrites_manifests(
    scheduler: Scheduler, spark_rt: Runtime, lake: Lake
) -> None:
    """One clean on HDFS, all three actions: an old orphan found by a real HDFS listing
    (lakewarden.storage, through hdfs-native) and by Spark's, judged against the storage
    clock (a marker written to HDFS), removed; a young one kept; live files kept."""
    table = append_batches(lake.table("cleaned"), 12)
    ids = [s.snapshot_id for s in sorted(table.snapshots(), key=lambda s: s.timestamp_ms)]
    table.delete(equal_to("region", "a"))  # region a's files: now only in older snapshots
    table = table.refresh()
    before = fingerprint(table)
    live = sorted({f.file_path for s in table.snapshots() for f in _files(table, s.snapshot_id)})
    fs = filesystem("hdfs", lake.hdfs.netloc, {})
    data_dir = live[0].removeprefix(lake.hdfs.url).rsplit("/", 1)[0]
    old, young = f"{data_dir}/old-orphan.parquet", f"{data_dir}/young-orphan.parquet"
    with fs.open_input_stream(live[0].removeprefix(lake.hdfs.url)) as f:
        parquet = f.read()
    for path in (old, young):
        with fs.open_output_stream(path) as out:
            out.write(parquet)
    ten_days_ago = int((time.time() - 10 * 86400) * 1000)
    from hdfs_native import Client

    native = Client(lake.hdfs.url)
    for path in [old, *(p.removeprefix(lake.hdfs.url) for p in live)]:
        native.set_times(path, ten_days_ago, ten_days_ago)

    store = storage.Storage(table)
    listing = store.walk(10_000)
    found = storage.summary(
        listing, storage.references(table, store), datetime.now(UTC), orphan_min_age_hours=72
    )
    assert (found["unreferenced_files"], found["unreferenced_older_files"]) == (2, 1)

    time.sleep(1)  # older than max_snapshot_age_hours below (0.36 s)
    task_id = lake.manage(
        spark_rt,
        "cleaned",
        {
            "clean": {
                "keep_last_snapshots": 3,
                "max_snapshot_age_hours": 0.0001,
                "allow_below_safety_floors": True,
                "orphan_min_age_hours": 72,
                "rewrite_manifests_min_count": 2,
            }
        },
        "clean",
    )
    plan = _planned(spark_rt, task_id)
    assert {a["name"] for a in plan["actions"]} == {
        "expire_snapshots",
        "remove_orphan_files",
        "rewrite_manifests",
    }
    assert run_one(scheduler) == "succeeded"

    assert not fs.get_file_info(old).is_file
    assert fs.get_file_info(young).is_file  # inside the safety window
    table = lake.load("cleaned")
    assert len(table.snapshots()) < len(ids)
    assert fingerprint(table).rows == before.rows == 60
    assert (fingerprint(table).checksum) == before.checksum
    result = task_of(spark_rt, task_id).result
    assert result is not None
    orphans = result["remove_orphan_files"]
    assert orphans["removed_count"] == 1 and orphans["removed_not_in_dry_run"] == []
    assert abs(orphans["storage_clock_behind_s"]) < 60  # the marker's time on HDFS
    assert result["expired_manifest_lists"] > 0 and result["rewritten_manifests"] > 1


def _files(table: Table, snapshot_id: int) -> list[Any]:
    return [t.file for t in table.scan(snapshot_id=snapshot_id).plan_files()]


def test_registration_names_a_namenode_that_does_not_answer(
    client: TestClient, rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing listens on the port: a 422 naming the NameNode, at once (no minute of the
    client's failover retries)."""
    monkeypatch.setenv(URL_ENV, rt.db_url)
    # localhost: an error quoting 8 characters of the secret URL (127.0.0.) is withheld
    warehouse = f"hdfs://localhost:{free_port()}/warehouse"
    started = time.monotonic()
    r = client.post(
        "/api/v1/catalogs",
        json={
            "name": "nowhere",
            "type": "jdbc",
            "properties": {"uri": {"env": URL_ENV}, "warehouse": warehouse},
        },
        headers=admin_headers(rt),
    )
    assert r.status_code == 422, r.text
    assert time.monotonic() - started < 5
    detail = r.json()["detail"]
    assert f"the NameNode of warehouse {warehouse}" in detail and "did not answer" in detail


# --- faults ------------------------------------------------------------------------------


def test_a_job_without_its_namenode_fails_is_retried_and_other_catalogs_are_served(
    scheduler: Scheduler, spark_rt: Runtime, lake: Lake
) -> None:
    """The NameNode is down when the job runs: the attempt fails with HDFS's error in its
    run (after Iceberg's 20 retries of the metadata read, ~90 s) and the task goes back to
    be planned again; a table of the default catalog (a local
    warehouse) is compacted meanwhile; with the NameNode back, the retry compacts the HDFS
    table once, every row kept."""
    table = append_batches(lake.table("faulted"), 3)
    before = fingerprint(table)
    policy = {"compaction": {"min_small_files": 2, "min_input_files": 2, "max_attempts": 3}}
    task_id = lake.manage(spark_rt, "faulted", policy, "compaction")
    _planned(spark_rt, task_id)
    local = append_batches(make_table(spark_rt, name="beside_hdfs"), 3)
    local_before = fingerprint(local)

    lake.hdfs.stop_namenode()
    try:
        started = time.monotonic()
        assert run_one(scheduler) == "pending"  # to be planned again, after a backoff
        failed_in_s = time.monotonic() - started
        task = task_of(spark_rt, task_id)
        assert (task.reason or "").startswith("attempt 1/3 failed, re-planning in"), task.reason
        with transaction(spark_rt.engine) as s:
            (run,) = s.scalars(select(JobRun).where(JobRun.task_id == task_id)).all()
            assert run.state == "failed"
            tail = run.log_tail or ""
        # Spark's own words, in the run: which file, on which NameNode, refused
        assert f"Failed to open input stream for file: {lake.hdfs.url}/" in tail, tail
        assert "Connection refused" in tail, tail
        print(f"the attempt without a NameNode failed in {failed_in_s:.1f} s")
        # The backoff as in production (the test runtime's is ~0.1 s, which a loaded machine
        # outlasts before the worker below runs: it then re-plans this task, not the other)
        with transaction(spark_rt.engine) as s:
            s.execute(
                update(Task)
                .where(Task.id == task_id)
                .values(not_before=func.now() + timedelta(minutes=10))
            )

        other = manage(spark_rt, "beside_hdfs", policy)
        assert Worker(spark_rt).run_once()  # planning another catalog's table is not held
        assert task_of(spark_rt, other).state == "planned"
        assert run_one(scheduler) == "succeeded"
        after = fingerprint(spark_rt.catalog.load_table("sales.beside_hdfs"))
        assert (after.rows, after.checksum) == (local_before.rows, local_before.checksum)
    finally:
        lake.hdfs.start_namenode()

    with transaction(spark_rt.engine) as s:  # the backoff, skipped
        s.execute(update(Task).where(Task.id == task_id).values(not_before=func.now()))
    _planned(spark_rt, task_id)
    assert run_one(scheduler) == "succeeded"
    table = lake.load("faulted")
    after = fingerprint(table)
    assert (after.rows, after.checksum) == (before.rows, before.checksum)
    assert after.data_files == 2
    assert _attempts_committed(table, task_id) == {"2"}  # the retry; the first committed nothing


def test_a_namenode_restarted_mid_job_loses_nothing_and_commits_once(
    scheduler: Scheduler, spark_rt: Runtime, lake: Lake
) -> None:
    """The NameNode goes down as the job starts and is back ~10 s later: the job either
    rides it out (Iceberg retries its metadata reads) or fails and is retried; either way
    the table ends compacted once, every row kept."""
    table = append_batches(lake.table("restarted"), 3)
    before = fingerprint(table)
    policy = {"compaction": {"min_small_files": 2, "min_input_files": 2, "max_attempts": 3}}
    task_id = lake.manage(spark_rt, "restarted", policy, "compaction")
    _planned(spark_rt, task_id)
    scheduler.renew()
    assert scheduler.dispatch_once()
    # Held now: the scheduler lets go of a job's entry when it ends, which may be before the
    # NameNode is back (a job that fails at once on it).
    (entry,) = scheduler.inflight.values()
    lake.hdfs.stop_namenode()
    time.sleep(2)
    lake.hdfs.start_namenode()
    state = str(entry.future.result(timeout=300))
    if state == "pending":  # it failed: the retry, its backoff skipped
        with transaction(spark_rt.engine) as s:
            s.execute(update(Task).where(Task.id == task_id).values(not_before=func.now()))
        _planned(spark_rt, task_id)
        state = run_one(scheduler)
    print(f"after the NameNode's restart: {len(_run_metrics(spark_rt, task_id))} attempt(s)")
    assert state == "succeeded", task_of(spark_rt, task_id).reason
    table = lake.load("restarted")
    after = fingerprint(table)
    assert (after.rows, after.checksum) == (before.rows, before.checksum)
    assert after.data_files == 2
    assert len(_attempts_committed(table, task_id)) == 1  # one attempt committed
