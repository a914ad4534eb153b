"""Every kind on tables in an S3 bucket (S3Proxy, benchmarks/s3_server.py), through the real
services: a worker plans through pyiceberg (pyarrow's S3 file system), the scheduler's
Spark runs through Iceberg's S3FileIO, and the results are read back by a pyiceberg client
of the test's own. The catalog is a JDBC catalog registered with an `s3://` warehouse and
its credentials as references (`{"env": …}`, `{"file": …}`)."""

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
from helpers import SCHEMA, append_batches, current, run_one, task_of
from pyarrow.fs import FileType
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table
from pyiceberg.transforms import DayTransform, IdentityTransform
from sqlalchemy import delete, select, update

from benchmarks.s3_server import S3Server
from lakewarden.db.models import Catalog as CatalogRow
from lakewarden.db.models import JobRun, ManagedTable
from lakewarden.db.session import transaction
from lakewarden.fingerprint import fingerprint
from lakewarden.health.files_per_lookup import files_per_lookup
from lakewarden.metadata import read_files
from lakewarden.runtime import Runtime
from lakewarden.settings import sqlalchemy_pg_url
from lakewarden.states import TaskState
from lakewarden.storage import Storage, references, summary
from lakewarden.tasks import repo
from services.scheduler.main import Scheduler
from services.worker.main import Worker

pytestmark = pytest.mark.spark

ACCESS_VAR = "LW_SECRET_TEST_S3_ACCESS_KEY"
URL_VAR = "LW_SECRET_TEST_S3_CATALOG_URL"
SECRET_FILE = "test-s3-secret-key"


@dataclass(frozen=True)
class S3Lake:
    name: str  # the registered catalog
    warehouse: str
    client: SqlCatalog  # the test's own pyiceberg client: the independent reader
    server: S3Server


def s3_properties(server: S3Server, warehouse: str) -> dict[str, Any]:
    """A catalog's S3 properties as an operator registers them: credentials by reference."""
    return {
        "warehouse": warehouse,
        "s3.endpoint": server.endpoint,
        "s3.region": "us-east-1",
        "s3.access-key-id": {"env": ACCESS_VAR},
        "s3.secret-access-key": {"file": SECRET_FILE},
    }


@pytest.fixture(scope="module")
def s3_lake(spark_rt: Runtime, s3_server: S3Server) -> Iterator[S3Lake]:
    """A JDBC catalog (in the Spark tests' database) whose warehouse is a bucket of the
    session's S3 server, registered as an operator would; one per module (Spark keeps a
    catalog's settings once it has used it)."""
    name = f"s3_{uuid.uuid4().hex[:6]}"
    warehouse = f"{s3_server.bucket('lw-tests')}/{name}"
    secrets = spark_rt.settings.secrets_path
    secrets.mkdir(parents=True, exist_ok=True)
    (secrets / SECRET_FILE).write_text(s3_server.secret_key)
    os.environ[ACCESS_VAR] = s3_server.access_key
    os.environ[URL_VAR] = spark_rt.db_url
    properties = {"uri": {"env": URL_VAR}, **s3_properties(s3_server, warehouse)}
    with transaction(spark_rt.engine) as s:
        s.add(CatalogRow(name=name, type="jdbc", properties=properties, version=1))
    spark_rt.catalogs.forget()
    client = SqlCatalog(
        name,
        uri=sqlalchemy_pg_url(spark_rt.db_url),
        warehouse=warehouse,
        **{
            "s3.endpoint": s3_server.endpoint,
            "s3.region": "us-east-1",
            "s3.access-key-id": s3_server.access_key,
            "s3.secret-access-key": s3_server.secret_key,
        },
    )
    client.create_namespace_if_not_exists("sales")
    try:
        yield S3Lake(name, warehouse, client, s3_server)
    finally:
        client.engine.dispose()
        with transaction(spark_rt.engine) as s:
            s.execute(delete(CatalogRow).where(CatalogRow.name == name))
        spark_rt.catalogs.forget()
        for var in (ACCESS_VAR, URL_VAR):
            os.environ.pop(var, None)


def _manage(rt: Runtime, lake: S3Lake, name: str, policy: dict[str, Any], kind: str) -> int:
    with transaction(rt.engine) as s:
        row = ManagedTable(catalog=lake.name, namespace="sales", name=name, policy=policy)
        s.add(row)
        s.flush()
        task_id = repo.create_task(
            s, table_id=row.id, kind=kind, trigger={"reason": "test"}, actor="test"
        )
    assert task_id is not None
    return task_id


def _again(rt: Runtime, task_id: int, policy: dict[str, Any], kind: str) -> int:
    """A new `kind` task on the table of `task_id`, now under `policy`."""
    with transaction(rt.engine) as s:
        table_id = task_of(rt, task_id).table_id
        s.execute(update(ManagedTable).where(ManagedTable.id == table_id).values(policy=policy))
        again = repo.create_task(s, table_id=table_id, kind=kind, trigger={}, actor="test")
    assert again is not None
    return again


def _run(scheduler: Scheduler, rt: Runtime, task_id: int) -> str:
    assert Worker(rt).run_once()  # planned through the registered catalog's pyiceberg
    planned = task_of(rt, task_id)
    assert planned.state == TaskState.PLANNED, planned.reason
    return run_one(scheduler)


def _table(lake: S3Lake, name: str, schema: pa.Schema = SCHEMA, by: Any = None) -> Table:
    if lake.client.table_exists(f"sales.{name}"):  # a parametrized rerun
        lake.client.drop_table(f"sales.{name}")
    table = lake.client.create_table(f"sales.{name}", schema=schema)
    if by is not None:
        with table.update_spec() as spec:
            spec.add_field(*by)
    return lake.client.load_table(f"sales.{name}")


def _metrics(rt: Runtime, task_id: int) -> dict[str, Any]:
    with transaction(rt.engine) as s:
        (run,) = s.scalars(select(JobRun).where(JobRun.task_id == task_id)).all()
        return dict(run.metrics or {})


def test_the_warehouse_is_in_the_bucket(s3_lake: S3Lake) -> None:
    table = append_batches(_table(s3_lake, "where", by=("region", IdentityTransform(), "r")), 1)
    assert table.location().startswith(f"{s3_lake.warehouse}/")
    files = table.inspect.files()["file_path"].to_pylist()
    assert files and all(s3_lake.server.object_path(f).is_file() for f in files)


def test_compaction_validated_then_a_corrupted_one_never_published(
    scheduler: Scheduler, spark_rt: Runtime, s3_lake: S3Lake, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = _table(s3_lake, "orders", by=("region", IdentityTransform(), "region"))
    table = append_batches(table, 3)
    before = fingerprint(table)
    assert before.data_files == 6
    policy = {"compaction": {"min_small_files": 2, "min_input_files": 2}}
    task_id = _manage(spark_rt, s3_lake, "orders", policy, "compaction")
    assert _run(scheduler, spark_rt, task_id) == TaskState.SUCCEEDED
    after = fingerprint(s3_lake.client.load_table("sales.orders"))
    assert after.data_files == 2  # one per partition
    assert (after.rows, after.checksum) == (before.rows, before.checksum)
    assert _metrics(spark_rt, task_id)["validation"]["status"] == "passed"

    # A rewrite corrupted on purpose fails its validation and is never published.
    table = append_batches(s3_lake.client.load_table("sales.orders"), 3, start=100)
    head, before = current(table).snapshot_id, fingerprint(table)
    monkeypatch.setattr(spark_rt.settings, "failpoint", "corrupt-rewrite")
    monkeypatch.setattr(spark_rt.settings, "failpoints_enabled", True)
    bad = _again(
        spark_rt, task_id, {**policy, "compaction": {**policy["compaction"]}}, "compaction"
    )
    assert _run(scheduler, spark_rt, bad) == TaskState.FAILED
    validation = _metrics(spark_rt, bad)["validation"]
    assert validation["status"] == "failed"
    assert validation["publish"]["action"] == "not_published"
    table = s3_lake.client.load_table("sales.orders")
    assert current(table).snapshot_id == head and list(table.metadata.refs) == ["main"]
    assert fingerprint(table) == before


def _random_ab(lake: S3Lake, name: str, seed: str) -> Table:
    import random

    ab = pa.schema([pa.field("a", pa.int64(), False), pa.field("b", pa.int64(), False)])
    table = _table(lake, name, schema=ab)
    rng = random.Random(seed)
    for _ in range(12):
        batch = {"a": [rng.randrange(1000) for _ in range(200)]}
        batch["b"] = [rng.randrange(1000) for _ in range(200)]
        table.append(pa.table(batch, schema=ab))
        table = table.refresh()
    return table


@pytest.mark.parametrize("kind, columns", [("zorder", ["a", "b"]), ("clustering", ["a"])])
def test_layout_rewrites(
    scheduler: Scheduler, spark_rt: Runtime, s3_lake: S3Lake, kind: str, columns: list[str]
) -> None:
    name = f"layout_{kind}"
    table = _random_ab(s3_lake, name, name)
    before = fingerprint(table)
    fpl_before = files_per_lookup(read_files(table, columns).data, columns)
    total = sum(f.size for f in read_files(table).data)
    policy = {kind: {"enabled": True, "columns": columns, "target_file_size_bytes": total // 6}}
    task_id = _manage(spark_rt, s3_lake, name, policy, kind)
    assert _run(scheduler, spark_rt, task_id) == TaskState.SUCCEEDED
    table = s3_lake.client.load_table(f"sales.{name}")
    after = fingerprint(table)
    fpl_after = files_per_lookup(read_files(table, columns).data, columns)
    assert (after.rows, after.checksum) == (before.rows, before.checksum)
    assert fpl_after is not None and fpl_before is not None and fpl_after < fpl_before
    assert (task_of(spark_rt, task_id).result or {})["rewritten_data_files"] == before.data_files


EVENTS = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("ts", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)


def _events(lake: S3Lake, name: str, partitioned: bool) -> Table:
    """Rows every three hours over six days, one commit per day."""
    table = _table(lake, name, EVENTS, ("ts", DayTransform(), "ts_day") if partitioned else None)
    now = datetime.now(UTC)
    for d in range(6, -1, -1):
        day = (now - timedelta(days=d)).replace(hour=0, minute=0, second=0, microsecond=0)
        stamps = [s for s in (day + timedelta(hours=h) for h in range(0, 24, 3)) if s <= now]
        ids = [d * 100 + i for i in range(len(stamps))]
        table.append(pa.table({"id": ids, "ts": stamps}, schema=EVENTS))
        table = table.refresh()
    return table


@pytest.mark.parametrize("level", ["partition", "row"])
def test_ttl(scheduler: Scheduler, spark_rt: Runtime, s3_lake: S3Lake, level: str) -> None:
    name = f"ttl_{level}"
    table = _events(s3_lake, name, partitioned=level == "partition")
    rows = table.scan().to_arrow().to_pylist()
    ttl = {"enabled": True, "column": "ts", "retention_days": 2.4, "max_fraction": 0.9}
    task_id = _manage(spark_rt, s3_lake, name, {"ttl": ttl}, "ttl")
    assert _run(scheduler, spark_rt, task_id) == TaskState.SUCCEEDED
    plan = task_of(spark_rt, task_id).plan or {}
    assert plan["level"] == level
    cutoff = datetime.fromisoformat(plan["cutoff"])
    left = s3_lake.client.load_table(f"sales.{name}").scan().to_arrow().to_pylist()
    assert sorted(r["id"] for r in left) == sorted(r["id"] for r in rows if r["ts"] >= cutoff)
    assert len(left) < len(rows)


def test_clean_rewrites_manifests_expires_snapshots_and_removes_orphans_in_the_bucket(
    scheduler: Scheduler, spark_rt: Runtime, s3_lake: S3Lake
) -> None:
    table = append_batches(_table(s3_lake, "churn", by=("region", IdentityTransform(), "r")), 12)
    before = fingerprint(table)
    assert len(current(table).manifests(table.io)) == 12
    no_orphans = {"keep_last_snapshots": 100, "remove_orphans": False}
    task_id = _manage(
        spark_rt,
        s3_lake,
        "churn",
        {"clean": {**no_orphans, "rewrite_manifests_min_count": 2}},
        "clean",
    )
    assert _run(scheduler, spark_rt, task_id) == TaskState.SUCCEEDED
    assert [a["name"] for a in (task_of(spark_rt, task_id).plan or {})["actions"]] == [
        "rewrite_manifests"
    ]
    table = s3_lake.client.load_table("sales.churn")
    assert len(current(table).manifests(table.io)) < 12
    assert fingerprint(table).checksum == before.checksum

    # Two orphans beside the data, as a failed writer leaves them: one aged ten days (its
    # backing file's mtime is what S3Proxy reports as LastModified), one young.
    live = table.inspect.files()["file_path"].to_pylist()
    data_dir = live[0].rsplit("/", 1)[0]
    old, young = f"{data_dir}/old-orphan.parquet", f"{data_dir}/young-orphan.parquet"
    storage = Storage(table)
    for orphan in (old, young):
        storage.fs.copy_file(storage.key(live[0]), storage.key(orphan))
    ten_days_ago = time.time() - 10 * 86400
    for path in (old, *live):  # old live files must stay too
        os.utime(s3_lake.server.object_path(path), (ten_days_ago, ten_days_ago))
    # lakewarden's own listing of the bucket sees them (health's storage figures)
    listing = storage.walk(10_000)
    seen = summary(listing, references(table, storage), datetime.now(UTC), 72)
    assert (seen["unreferenced_files"], seen["unreferenced_older_files"]) == (2, 1)

    time.sleep(1)  # older than max_snapshot_age_hours below (0.36 s)
    expire_and_orphans = {
        "keep_last_snapshots": 3,
        "max_snapshot_age_hours": 0.0001,
        "allow_below_safety_floors": True,
        "orphan_min_age_hours": 72,
        "rewrite_manifests_min_count": 1000,
    }
    again = _again(spark_rt, task_id, {"clean": expire_and_orphans}, "clean")
    assert _run(scheduler, spark_rt, again) == TaskState.SUCCEEDED
    plan = task_of(spark_rt, again).plan or {}
    assert [a["name"] for a in plan["actions"]] == ["expire_snapshots", "remove_orphan_files"]
    table = s3_lake.client.load_table("sales.churn")
    assert len(list(table.snapshots())) == 3
    assert fingerprint(table).checksum == before.checksum
    assert storage.fs.get_file_info(storage.key(old)).type == FileType.NotFound
    assert storage.fs.get_file_info(storage.key(young)).type == FileType.File
    assert all(s3_lake.server.object_path(p).is_file() for p in live)
    result = task_of(spark_rt, again).result or {}
    orphans = result["remove_orphan_files"]
    assert (orphans["dry_run_count"], orphans["removed_count"]) == (1, 1)
    # the storage clock: a marker object written to the bucket and listed (then deleted)
    assert abs(orphans["storage_clock_behind_s"]) < 60
    markers = list(s3_lake.server.object_path(table.location()).rglob(".lakewarden-clock-*"))
    assert markers == []
    assert [p.rsplit("/", 1)[1] for p in result["orphans_sample"]] == ["old-orphan.parquet"]
