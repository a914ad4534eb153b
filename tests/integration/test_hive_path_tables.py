"""Hudi and Delta tables adopted through a real Hive Metastore (issues 28 and 29): Hudi's own
Hive sync (HMS mode, from Spark's datasource writer) registers a merge-on-read table as its
`_ro`/`_rt` pair and a copy-on-write one as itself; Spark's Hive catalog registers a Delta
table (`USING delta`, `spark.sql.sources.provider=delta`). A `hive` catalog's poll adopts
each by rule as ONE table of its format beside an Iceberg table, reads its log at the
location the metastore gives (events ingested, kinds judged) and the worker plans its
compaction there; an opt-out holds, a drop retires, a rename is relisted from the
notification log. And the metastore's lock (`hudi.lock.provider=hive-metastore`): a Hudi
job waits for another holder of the table's lock, then takes and releases it."""

from __future__ import annotations

import shutil
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from conftest import HudiTables
from deltalake import write_deltalake
from fastapi.testclient import TestClient
from helpers import SCHEMA, run_hudi_pass, task_of, wait_for
from hive_metastore.ttypes import (
    FieldSchema,
    HeartbeatRequest,
    LockComponent,
    LockLevel,
    LockRequest,
    LockState,
    LockType,
    SerDeInfo,
    StorageDescriptor,
    UnlockRequest,
)
from hive_metastore.ttypes import Table as HiveTable
from pyiceberg.catalog.hive import HiveCatalog
from spark_writer import SparkWriters
from sqlalchemy import make_url, select, text

from lakewarden.catalogs.adoption import opt_out
from lakewarden.catalogs.catalog import TableRef
from lakewarden.db.models import ManagedTable, ManagementRule, Task, TimelineEvent
from lakewarden.db.session import transaction
from lakewarden.events.metastore import follow_catalog, follow_due
from lakewarden.events.poller import poll_catalog
from lakewarden.formats.delta.catalog import open_timeline as open_delta
from lakewarden.formats.hudi.catalog import open_timeline as open_hudi
from lakewarden.formats.hudi.timeline import HudiTimeline, NotAHudiTable
from lakewarden.formats.hudi.validation import digest
from lakewarden.metastore import listed_tables, metastore_client
from lakewarden.runtime import Runtime
from lakewarden.spark.local_metastore import Metastore
from services.worker.main import Worker

CATALOG = "hms"
# Compaction due on a few small files or two log files per slice; nothing else asked for.
POLICY = {"compaction": {"enabled": True, "min_small_files": 2, "min_input_files": 2}}


@dataclass
class Lake:
    metastore: Metastore
    namespace: str
    root: Path  # where this test's tables are written
    rule: int


@pytest.fixture
def lake(
    client: TestClient, rt: Runtime, hive_metastore: Metastore, tmp_path: Path
) -> Iterator[Lake]:
    """The session's metastore registered as catalog `hms` through the API, this test's
    database in it, and a rule managing that database."""
    warehouse = (tmp_path / "warehouse").as_uri()
    body = {
        "name": CATALOG,
        "type": "hive",
        "properties": {"uri": hive_metastore.uri, "warehouse": warehouse},
    }
    r = client.post("/api/v1/catalogs", json=body)
    assert r.status_code == 201, r.text
    namespace = f"p_{uuid.uuid4().hex[:8]}"
    HiveCatalog("writer", uri=hive_metastore.uri, warehouse=warehouse).create_namespace(namespace)
    with transaction(rt.engine) as s:
        row = ManagementRule(catalog=CATALOG, namespace=namespace, include=["*"], policy=POLICY)
        s.add(row)
        s.flush()
        rule = row.id
    yield Lake(hive_metastore, namespace, tmp_path / "lake", rule)


def _hive_sync(lake: Lake, name: str, partitioned: bool) -> dict[str, str]:
    """Hudi's Hive sync options, as a writer enables them: HMS mode, this test's database."""
    options = {
        "hoodie.datasource.hive_sync.enable": "true",
        "hoodie.datasource.hive_sync.mode": "hms",
        "hoodie.datasource.hive_sync.metastore.uris": lake.metastore.uri,
        "hoodie.datasource.hive_sync.database": lake.namespace,
        "hoodie.datasource.hive_sync.table": name,
    }
    if partitioned:
        options |= {
            "hoodie.datasource.hive_sync.partition_fields": "region",
            "hoodie.datasource.hive_sync.partition_extractor_class": (
                "org.apache.hudi.hive.MultiPartKeysValueExtractor"
            ),
        }
    else:
        options["hoodie.datasource.hive_sync.partition_extractor_class"] = (
            "org.apache.hudi.hive.NonPartitionedExtractor"
        )
    return options


def write_hudi_synced(
    writers: SparkWriters, lake: Lake, name: str, table_type: str, upserts: int
) -> str:
    """A Hudi table written by Spark's datasource with Hive sync on: an insert, then
    `upserts` upserts (a merge-on-read table's go to log files); its base path."""
    path = str(lake.root / name)
    partitioned = table_type == "MERGE_ON_READ"
    base = {
        "path": (lake.root / name).as_uri(),
        "type": table_type,
        "partitioned": partitioned,
        "options": _hive_sync(lake, name, partitioned),
    }
    steps: list[dict[str, Any]] = [{**base, "op": "insert", "ids": [0, 60], "value": 0}]
    steps += [
        {**base, "op": "upsert", "ids": [10 * i, 10 * i + 30], "value": i + 1}
        for i in range(upserts)
    ]
    writers.run("hudi", steps, timeout=300)
    return path


def write_delta_registered(lake: Lake, name: str, batches: int) -> str:
    """A Delta table of `batches` small appends (delta-rs), registered in the metastore as
    Spark's Hive catalog registers one (`CREATE TABLE … USING delta LOCATION`, a table Hive
    cannot read: provider `delta`, the path in the storage properties, a placeholder
    location); its path. Spark's own CREATE TABLE registers it so here, but its session then
    never answered on the shared 2-core machine (load 17-19), so the test writes the same
    table object through Thrift."""
    path = str(lake.root / name)
    for i in range(batches):
        batch = pa.table({"id": pa.array(range(10 * i, 10 * i + 10), pa.int64())})
        write_deltalake(path, batch, mode="append")
    placeholder = (lake.root.parent / f"{name}-__PLACEHOLDER__").as_uri()
    table = HiveTable(
        dbName=lake.namespace,
        tableName=name,
        owner="spark",
        tableType="EXTERNAL_TABLE",
        partitionKeys=[],
        parameters={"EXTERNAL": "TRUE", "spark.sql.sources.provider": "delta"},
        sd=StorageDescriptor(
            cols=[FieldSchema("col", "array<string>", "from deserializer")],
            location=placeholder,
            inputFormat="org.apache.hadoop.mapred.SequenceFileInputFormat",
            outputFormat="org.apache.hadoop.hive.ql.io.HiveSequenceFileOutputFormat",
            serdeInfo=SerDeInfo(
                serializationLib="org.apache.hadoop.hive.serde2.lazy.LazySimpleSerDe",
                parameters={"path": Path(path).as_uri(), "serialization.format": "1"},
            ),
        ),
    )
    with metastore_client(lake.metastore.uri) as hms:
        hms.create_table(table)
    return path


def _rows(rt: Runtime, namespace: str) -> dict[str, ManagedTable]:
    with transaction(rt.engine) as s:
        rows = s.scalars(
            select(ManagedTable).where(
                ManagedTable.catalog == CATALOG, ManagedTable.namespace == namespace
            )
        ).all()
        for row in rows:
            s.expunge(row)
    return {row.name: row for row in rows}


def _events(rt: Runtime, table_id: int) -> list[TimelineEvent]:
    with transaction(rt.engine) as s:
        events = s.scalars(
            select(TimelineEvent)
            .where(TimelineEvent.table_id == table_id)
            .order_by(TimelineEvent.id)
        ).all()
        for e in events:
            s.expunge(e)
    return list(events)


def _open_task(rt: Runtime, table_id: int, kind: str) -> int | None:
    with transaction(rt.engine) as s:
        return s.scalar(
            select(Task.id).where(
                Task.table_id == table_id, Task.kind == kind, Task.state == "pending"
            )
        )


def test_hudi_and_delta_tables_are_adopted_through_the_metastore_and_planned_at_its_location(
    rt: Runtime, lake: Lake, spark_writers: SparkWriters
) -> None:
    mor = write_hudi_synced(spark_writers, lake, "orders", "MERGE_ON_READ", upserts=2)
    cow = write_hudi_synced(spark_writers, lake, "users", "COPY_ON_WRITE", upserts=1)
    delta = write_delta_registered(lake, "clicks", batches=4)
    iceberg = HiveCatalog("writer", uri=lake.metastore.uri, warehouse=(lake.root / "wh").as_uri())
    iceberg.create_table((lake.namespace, "plain"), SCHEMA)

    # What the writers registered: Hudi 1.2's sync, a MOR table as its two views and, beside
    # them, a snapshot table of its own name, all three at its base path.
    with metastore_client(lake.metastore.uri) as hms:
        names = set(hms.get_all_tables(lake.namespace))
        assert names == {"orders", "orders_ro", "orders_rt", "users", "clicks", "plain"}, names
        listed, _ = listed_tables(hms)
    mine = {name: t for (ns, name), t in listed.items() if ns == lake.namespace}
    assert {n: t.format for n, t in mine.items()} == {
        "orders": "hudi",
        "users": "hudi",
        "clicks": "delta",
        "plain": "iceberg",
    }

    entry = rt.catalogs.entry(CATALOG)
    result = poll_catalog(rt, entry)
    assert result.errors == [], result.errors
    rows = _rows(rt, lake.namespace)
    assert {n: r.format for n, r in rows.items()} == {
        "orders": "hudi",
        "users": "hudi",
        "clicks": "delta",
        "plain": "iceberg",
    }
    assert all(r.managed_by == f"rule:{lake.rule}" for r in rows.values())

    # Each read at the metastore's location by the format's own path code.
    ref = TableRef(lake.namespace, "orders")
    assert open_hudi(entry, ref).base_path == mor
    assert open_hudi(entry, TableRef(lake.namespace, "users")).base_path == cow
    assert open_delta(entry, TableRef(lake.namespace, "clicks")).path == delta
    with pytest.raises(NotAHudiTable, match="has no Hudi table"):
        open_hudi(entry, TableRef(lake.namespace, "clicks"))

    # Every completed instant and version is an event; the newest judged.
    orders = _events(rt, rows["orders"].id)
    assert [e.operation for e in orders] == ["deltacommit"] * 3
    assert rows["orders"].metadata_location is not None
    clicks = _events(rt, rows["clicks"].id)
    assert [e.commit_id for e in clicks] == ["0", "1", "2", "3"]
    assert clicks[-1].operation == "WRITE"

    # Compaction is due on both (two log files per slice; four small files): the worker
    # plans each at the location the metastore gave.
    hudi_task = _open_task(rt, rows["orders"].id, "compaction")
    delta_task = _open_task(rt, rows["clicks"].id, "compaction")
    assert hudi_task is not None and delta_task is not None
    worker = Worker(rt)
    for _ in range(4):  # every pending task (the copy-on-write table's too)
        worker.run_once()
    assert (task_of(rt, hudi_task).plan or {})["base_path"] == mor
    assert (task_of(rt, delta_task).plan or {})["path"] == delta

    # A second poll reads the logs again and ingests nothing twice.
    again = poll_catalog(rt, entry)
    assert again.errors == [] and again.refreshed == 0
    assert len(_events(rt, rows["orders"].id)) == 3

    # An opted-out table stays out; one dropped from the metastore retires.
    with transaction(rt.engine) as s:
        opt_out(s, CATALOG, TableRef(lake.namespace, "users"), by="test")
    with metastore_client(lake.metastore.uri) as hms:
        for view in ("orders", "orders_ro", "orders_rt"):
            hms.drop_table(lake.namespace, view, False)
    poll_catalog(rt, entry)
    rows = _rows(rt, lake.namespace)
    assert rows["users"].opt_out and rows["users"].retired_at is not None
    assert rows["orders"].retired_at is not None
    assert rows["clicks"].retired_at is None and rows["plain"].retired_at is None


def test_a_hudi_table_synced_after_the_log_is_followed_has_the_catalog_polled_at_once(
    rt: Runtime, lake: Lake, spark_writers: SparkWriters
) -> None:
    entry = rt.catalogs.entry(CATALOG)
    follow_due(rt)  # the first follow: the cursor starts at the log's newest event
    with transaction(rt.engine) as s:
        cursor = s.execute(
            text("SELECT notification_id FROM catalog_polls WHERE catalog = :c"), {"c": CATALOG}
        ).scalar_one()
    write_hudi_synced(spark_writers, lake, "late", "COPY_ON_WRITE", upserts=0)
    followed = follow_catalog(rt, entry, cursor)
    # Hudi's sync created it (and stamped its last synced commit): a poll now, no note.
    assert followed.poll_now and followed.notes == 0
    poll_catalog(rt, entry)
    assert _rows(rt, lake.namespace)["late"].format == "hudi"


def _register_hudi(lake: Lake, name: str, path: Path) -> None:
    """A Hudi table at `path` registered in the metastore as Hudi's Hive sync registers a
    copy-on-write one (a Spark datasource table, provider `hudi`), written through Thrift:
    the lock test needs the entry, not a second sync."""
    table = HiveTable(
        dbName=lake.namespace,
        tableName=name,
        owner="spark",
        tableType="EXTERNAL_TABLE",
        partitionKeys=[],
        parameters={"EXTERNAL": "TRUE", "spark.sql.sources.provider": "hudi"},
        sd=StorageDescriptor(
            cols=[FieldSchema("id", "bigint", None)],
            location=path.as_uri(),
            inputFormat="org.apache.hudi.hadoop.HoodieParquetInputFormat",
            outputFormat="org.apache.hadoop.hive.ql.io.parquet.MapredParquetOutputFormat",
            serdeInfo=SerDeInfo(
                serializationLib="org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe",
                parameters={"path": path.as_uri()},
            ),
        ),
    )
    with metastore_client(lake.metastore.uri) as hms:
        hms.create_table(table)


def _metastore_db(lake: Lake) -> str:
    return (
        make_url(lake.metastore.db_url)
        .set(drivername="postgresql")
        .render_as_string(hide_password=False)
    )


def _next_lock_id(lake: Lake) -> int:
    """The metastore's next lock id (its own table): every lock request takes one."""
    with psycopg.connect(_metastore_db(lake)) as conn:
        row = conn.execute("SELECT nl_next FROM next_lock_id").fetchone()
    assert row is not None
    return int(row[0])


def _locks_on(lake: Lake, name: str) -> list[tuple[int, str]]:
    """The metastore's locks on the table now: (id, state), from its HIVE_LOCKS."""
    with psycopg.connect(_metastore_db(lake)) as conn:
        rows = conn.execute(
            "SELECT hl_lock_ext_id, hl_lock_state FROM hive_locks WHERE hl_db = %s"
            " AND hl_table = %s",
            (lake.namespace, name),
        ).fetchall()
    return [(int(i), str(s)) for i, s in rows]


@pytest.mark.timeout(1500)
def test_a_hudi_job_takes_the_metastores_lock_on_its_table_and_waits_for_another_holder(
    client: TestClient,
    rt: Runtime,
    db_url: str,
    lake: Lake,
    hudi_tables: HudiTables,
    tmp_path: Path,
) -> None:
    """`hudi.lock.provider=hive-metastore` on the hive catalog: lakewarden's compaction of a
    Hudi table in the metastore takes Hudi's HiveMetastoreBasedLockProvider's lock on the
    table's own entry (`<database>.<name>`), the lock a writer with the same Hive sync names
    takes. Proved against another holder: while the test holds an exclusive metastore lock
    on the table, the job's requests are refused (new lock ids, no compaction committed);
    once it lets go, the job takes the lock, compacts and releases it (no lock left on the
    table in the metastore's own HIVE_LOCKS). Rows and checksum by hudi-rs, unchanged."""
    table = lake.root / "orders"
    shutil.copytree(hudi_tables.mor_logs, table)  # two log files per slice: compaction due
    rows_before = digest(str(table))
    _register_hudi(lake, "orders", table)
    lock_props = {"hudi.lock.provider": "hive-metastore"}
    patched = client.patch(f"/api/v1/catalogs/{CATALOG}", json={"properties": lock_props})
    assert patched.status_code == 200, patched.text

    result = poll_catalog(rt, rt.catalogs.entry(CATALOG))
    assert result.errors == [], result.errors
    row = _rows(rt, lake.namespace)["orders"]
    task = _open_task(rt, row.id, "compaction")
    assert task is not None
    shown = client.get(f"/api/v1/catalogs/{CATALOG}/tables/{lake.namespace}/orders/hudi")
    assert shown.status_code == 200, shown.text
    lock = shown.json()["lock"]
    assert lock["provider"] == "hive-metastore" and lock["shared_with_other_writers"], lock
    assert lock["hive_metastore"] == {"database": lake.namespace, "table": "orders"}

    # Another holder: an exclusive lock on the table's entry, as a writer's commit takes it.
    component = LockComponent(
        type=LockType.EXCLUSIVE, level=LockLevel.TABLE, dbname=lake.namespace, tablename="orders"
    )
    with metastore_client(lake.metastore.uri) as hms:
        held = hms.lock(LockRequest(component=[component], user="writer", hostname="test"))
    assert held.state == LockState.ACQUIRED, held
    first_free = _next_lock_id(lake)
    pool = ThreadPoolExecutor(1, "hudi-pass")
    job = pool.submit(
        run_hudi_pass, db_url, tmp_path, {"compaction": task}, secrets_dir=rt.settings.secrets_path
    )
    try:

        def refused_twice() -> bool:
            with metastore_client(lake.metastore.uri) as hms:  # keep ours (Hive expires idle ones)
                hms.heartbeat(HeartbeatRequest(lockid=held.lockid))
            if job.done():
                raise AssertionError(f"the job ended while the lock was held: {job.result()}")
            time.sleep(1.0)
            return _next_lock_id(lake) >= first_free + 2

        wait_for(refused_twice, 900, "the job's lock requests")
        # Refused: the compaction committed nothing while another held the lock.
        assert not [i for i in HudiTimeline(str(table)).completed() if i.action == "commit"]
        # Ours is the one lock held there (a request of the job's may be waiting a moment).
        locks = _locks_on(lake, "orders")
        assert (held.lockid, "a") in locks and {s for _, s in locks} <= {"a", "w"}, locks
        assert [i for i, s in locks if s == "a"] == [held.lockid], locks
    finally:
        with metastore_client(lake.metastore.uri) as hms:
            hms.unlock(UnlockRequest(lockid=held.lockid))
    refused = _next_lock_id(lake) - first_free
    _, states, runs = job.result(timeout=900)
    pool.shutdown()
    run = runs["compaction"]
    assert states == {"compaction": "succeeded"}, (run.error, run.log_tail)
    metrics = run.metrics or {}
    assert metrics["hudi_lock"]["provider"] == "hive-metastore", metrics
    assert metrics["hudi_lock"]["hive_metastore"]["table"] == "orders"
    assert metrics["validation"]["status"] == "passed", metrics["validation"]
    # Taken after we let go (more lock ids), and released: no lock left on the table.
    taken = _next_lock_id(lake) - first_free - refused
    assert taken >= 1, (refused, taken)
    assert _locks_on(lake, "orders") == []
    timeline = HudiTimeline(str(table))
    assert timeline.completed()[-1].action == "commit" and timeline.pending() == []
    assert digest(str(table)) == rows_before  # independent reader: same rows, same checksum
    print("HMS-LOCK hudi", {"refused_requests": refused, "requests_after": taken})
