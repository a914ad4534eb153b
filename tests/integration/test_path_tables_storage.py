"""Hudi and Delta tables on object stores and HDFS: a `delta` and a `hudi` catalog whose
warehouse is a bucket of S3Proxy (benchmarks/s3_server.py), their credentials given by
reference only (`{"env": …}`, `{"file": …}`); registering a table reads its log with them
(pyarrow's S3 file system for the listing, delta-rs' and hudi-rs' `object_store` options
for the files), its baseline judged, and the worker plans its compaction from what those
readers see. And a Delta table on HDFS (lakewarden.spark.local_hdfs), read through
hdfs-native. And Spark's Hudi jobs on S3: a compaction of an `s3a://` table, and one beside
a live writer, both taking ZooKeeper's lock (lakewarden.spark.local_zookeeper); a clean
of a table with Hudi's metadata table in the bucket."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from conftest import HudiTables
from deltalake import DeltaTable, write_deltalake
from fastapi.testclient import TestClient
from helpers import run_hudi_pass, task_of, wait_for
from hudi import HudiTable
from kazoo.client import KazooClient
from pyarrow import fs as pafs
from spark_writer import SparkWriters

from benchmarks.s3_server import S3Server
from lakewarden.formats.hudi import lock as hudi_lock
from lakewarden.formats.hudi.facts import read_facts
from lakewarden.formats.hudi.file_versions import list_file_groups
from lakewarden.formats.hudi.storage import table_storage
from lakewarden.formats.hudi.timeline import HudiTimeline
from lakewarden.formats.hudi.validation import digest
from lakewarden.kinds import hudi_clean, hudi_compaction
from lakewarden.object_store import hadoop_s3a, reader_options
from lakewarden.runtime import Runtime
from lakewarden.spark.local_hdfs import LocalHdfs
from lakewarden.spark.local_zookeeper import ZooKeeper
from services.worker.main import Worker

ACCESS_VAR = "LW_SECRET_TEST_PATHS_S3_ACCESS_KEY"
SECRET_FILE = "test-paths-s3-secret-key"
POLICY = {"compaction": {"enabled": True, "min_small_files": 2, "min_input_files": 2}}


@pytest.fixture
def warehouse(rt: Runtime, s3_server: S3Server) -> Iterator[str]:
    """A prefix of the session's S3 server for this test, its credentials where a catalog's
    references find them."""
    secrets = rt.settings.secrets_path
    secrets.mkdir(parents=True, exist_ok=True)
    (secrets / SECRET_FILE).write_text(s3_server.secret_key)
    os.environ[ACCESS_VAR] = s3_server.access_key
    yield f"{s3_server.bucket('lw-paths')}/{uuid.uuid4().hex[:8]}"
    os.environ.pop(ACCESS_VAR, None)


def _properties(server: S3Server, warehouse: str) -> dict[str, Any]:
    return {
        "warehouse": warehouse,
        "s3.endpoint": server.endpoint,
        "s3.region": "us-east-1",
        "s3.access-key-id": {"env": ACCESS_VAR},
        "s3.secret-access-key": {"file": SECRET_FILE},
    }


def _writer_options(server: S3Server) -> dict[str, str]:
    """The writer's own credentials (delta-rs writing straight to the bucket)."""
    return {
        "AWS_ENDPOINT_URL": server.endpoint,
        "AWS_ACCESS_KEY_ID": server.access_key,
        "AWS_SECRET_ACCESS_KEY": server.secret_key,
        "AWS_REGION": "us-east-1",
        "AWS_ALLOW_HTTP": "true",
        "AWS_S3_ALLOW_UNSAFE_RENAME": "true",
    }


def _plain_credentials(server: S3Server) -> dict[str, str]:
    """The test's own reads of the bucket (the catalog's properties, resolved)."""
    return {"s3.access-key-id": server.access_key, "s3.secret-access-key": server.secret_key}


def _s3(server: S3Server) -> pafs.S3FileSystem:
    return pafs.S3FileSystem(
        access_key=server.access_key,
        secret_key=server.secret_key,
        endpoint_override=server.endpoint,
        scheme="http",
        region="us-east-1",
    )


def _register(client: TestClient, catalog: str, kind: str, properties: dict[str, Any]) -> None:
    got = client.post(
        "/api/v1/catalogs", json={"name": catalog, "type": kind, "properties": properties}
    )
    assert got.status_code == 201, got.text


def _compaction_task(client: TestClient, catalog: str, name: str) -> int:
    tables = f"/api/v1/catalogs/{catalog}/tables"
    got = client.post(tables, json={"namespace": "lake", "name": name, "policy": POLICY})
    assert got.status_code == 201, got.text
    event = client.get(f"{tables}/lake/{name}/events").json()["items"][0]
    assert event["decision"] == "task-created", event
    return int(event["decision_detail"]["compaction"]["task_id"])


def test_delta_and_hudi_tables_on_s3_are_read_and_planned_with_the_catalogs_credentials(
    client: TestClient,
    rt: Runtime,
    s3_server: S3Server,
    warehouse: str,
    hudi_tables: HudiTables,
) -> None:
    clicks = f"{warehouse}/lake/clicks"
    for i in range(4):  # four small files
        batch = pa.table({"id": pa.array(range(10 * i, 10 * i + 10), pa.int64())})
        write_deltalake(clicks, batch, mode="append", storage_options=_writer_options(s3_server))
    orders = f"{warehouse}/lake/orders"
    # the session's merge-on-read table with two log files per slice, copied into the bucket
    pafs.copy_files(
        hudi_tables.mor_logs, orders.removeprefix("s3://"), destination_filesystem=_s3(s3_server)
    )

    properties = _properties(s3_server, warehouse)
    _register(client, "s3delta", "delta", properties)
    _register(client, "s3hudi", "hudi", properties)
    delta_task = _compaction_task(client, "s3delta", "clicks")
    hudi_task = _compaction_task(client, "s3hudi", "orders")

    worker = Worker(rt)
    for _ in range(2):
        worker.run_once()
    delta_plan = task_of(rt, delta_task).plan or {}
    hudi_plan = task_of(rt, hudi_task).plan or {}
    assert delta_plan["path"] == clicks, delta_plan
    assert hudi_plan["base_path"] == orders, hudi_plan

    # What the planner saw is what an independent read of the bucket sees.
    independent = DeltaTable(clicks, storage_options=_writer_options(s3_server))
    assert len(independent.file_uris()) == 4
    local = read_facts(hudi_tables.mor_logs)
    assert hudi_plan["log_files"] == local.log_files > 0, hudi_plan

    # The credentials stayed references: the stored catalog and its API view hold no key.
    shown = client.get("/api/v1/catalogs/s3delta").json()
    assert s3_server.secret_key not in str(shown) and s3_server.access_key not in str(shown)


def test_a_delta_table_on_hdfs_is_read_and_planned_through_hdfs_native(
    client: TestClient, rt: Runtime, hdfs: LocalHdfs
) -> None:
    """delta-rs reads HDFS (its hdfs-native store) and the log is listed through lakewarden's
    hdfs-native file system; hudi-rs 0.5 has no HDFS store, so a Hudi table there is not
    planned on the Python side (docs/hudi.md)."""
    warehouse = f"{hdfs.url}/paths-{uuid.uuid4().hex[:8]}"
    clicks = f"{warehouse}/lake/clicks"
    for i in range(4):
        batch = pa.table({"id": pa.array(range(10 * i, 10 * i + 10), pa.int64())})
        write_deltalake(clicks, batch, mode="append")
    _register(client, "hdelta", "delta", {"warehouse": warehouse})
    task = _compaction_task(client, "hdelta", "clicks")
    assert Worker(rt).run_once()
    plan = task_of(rt, task).plan or {}
    assert plan["path"] == clicks, plan
    assert len(DeltaTable(clicks).file_uris()) == 4  # the independent read


def test_a_hudi_table_on_s3a_is_compacted_by_a_spark_job(
    client: TestClient,
    rt: Runtime,
    db_url: str,
    s3_server: S3Server,
    warehouse: str,
    hudi_tables: HudiTables,
    tmp_path: Path,
) -> None:
    """Spark's Hudi jobs on S3 (`s3a://`, Hadoop's S3A from jars.lock's `s3a` group): a
    compaction as a Hudi-family application given the catalog's credentials by reference;
    hudi-rs reads the bucket after with the same."""
    s3a = warehouse.replace("s3://", "s3a://", 1)
    orders = f"{s3a}/lake/orders"
    pafs.copy_files(
        hudi_tables.mor_logs, orders.removeprefix("s3a://"), destination_filesystem=_s3(s3_server)
    )
    properties = _properties(s3_server, s3a)
    _register(client, "s3ahudi", "hudi", properties)
    tables = "/api/v1/catalogs/s3ahudi/tables"
    got = client.post(tables, json={"namespace": "lake", "name": "orders", "policy": POLICY})
    assert got.status_code == 201, got.text
    detail = client.get(f"{tables}/lake/orders/events").json()["items"][0]["decision_detail"]
    assert detail["compaction"]["decision"] == "task-created", detail
    rows_before = digest(hudi_tables.mor_logs)  # the same table, read where it was written
    readable = {**_properties(s3_server, s3a), **_plain_credentials(s3_server)}

    _, states, runs = run_hudi_pass(
        db_url,
        tmp_path,
        {"compaction": detail["compaction"]["task_id"]},
        secrets_dir=rt.settings.secrets_path,
    )
    run = runs["compaction"]
    assert states == {"compaction": "succeeded"}, (run.error, run.log_tail)
    metrics = run.metrics or {}
    instant = metrics[hudi_compaction.PLANNED]
    assert metrics["log_files_after"] == 0 and metrics["validation"]["status"] == "passed"
    timeline = HudiTimeline(orders, readable)
    assert timeline.completed()[-1].requested == instant and timeline.pending() == []
    with table_storage(orders, readable):  # hudi-rs on the bucket, independently
        assert read_facts(orders).log_files == 0
        assert digest(orders) == rows_before


def _written(log: Path, keys: int) -> dict[int, int]:
    """Every key's value as the writer's own log says: its last committed round's."""
    want: dict[int, int] = {}
    for line in log.read_text().splitlines():
        entry = json.loads(line)
        for i in range(entry["start"], entry["start"] + entry["size"]):
            want[i % keys] = entry["round"]
    return want


def _rounds(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


@pytest.mark.spark
@pytest.mark.timeout(1200)
def test_a_hudi_compaction_on_s3_shares_zookeepers_lock_with_a_live_writer(
    client: TestClient,
    rt: Runtime,
    db_url: str,
    s3_server: S3Server,
    warehouse: str,
    zookeeper: ZooKeeper,
    spark_writers: SparkWriters,
    tmp_path: Path,
) -> None:
    """On S3 Hudi's lock file cannot serve (no atomic create): a catalog that names
    ZooKeeper's lock (`hudi.lock.*`) has lakewarden's compaction take the lock a writer
    of the table takes too. The writer (Spark's datasource in a process of its own)
    upserts rounds into the merge-on-read table in the bucket the whole time; after,
    hudi-rs reads every key once with the writer's last value (its own log) and nothing
    lakewarden planned is pending; both took the lock at the same ZooKeeper path."""
    keys, batch = 600, 100
    s3a = warehouse.replace("s3://", "s3a://", 1)
    table = f"{s3a}/lake/orders"
    locks = f"/lw-test-{uuid.uuid4().hex[:8]}/hudi-locks"
    readable = {**_properties(s3_server, s3a), **_plain_credentials(s3_server)}
    log, stop = tmp_path / "writer.jsonl", tmp_path / "stop"
    step = {
        "soak": "hudi",
        "path": table,
        "stop": str(stop),
        "seconds": 900,
        "keys": keys,
        "batch": batch,
        "log": str(log),
        # The writer's lock: ZooKeeper's at the same base path (its key: the table's name,
        # Hudi's default); its own S3A settings, as any writer of the bucket has them.
        "options": {
            "hoodie.write.lock.provider": hudi_lock.CLASSES["zookeeper"],
            "hoodie.write.lock.zookeeper.url": zookeeper.url,
            "hoodie.write.lock.zookeeper.port": str(zookeeper.port),
            "hoodie.write.lock.zookeeper.base_path": locks,
        },
        "hadoop": hadoop_s3a(readable, table),
    }
    pool = ThreadPoolExecutor(1, "hudi-writer")
    writer = pool.submit(spark_writers.run, "hudi", [step], 1200)
    try:
        # Every key inserted, then upserts: file slices with log files to compact.
        wait_for(lambda: writer.done() or _rounds(log) >= 4, 600, "the writer's first rounds")
        assert not writer.done(), writer.result()
        properties = {
            **_properties(s3_server, s3a),
            "hudi.lock.provider": "zookeeper",
            "hudi.lock.zookeeper.url": zookeeper.url,
            "hudi.lock.zookeeper.base-path": locks,
        }
        _register(client, "zkhudi", "hudi", properties)
        tables = "/api/v1/catalogs/zkhudi/tables"
        got = client.post(tables, json={"namespace": "lake", "name": "orders", "policy": POLICY})
        assert got.status_code == 201, got.text
        detail = client.get(f"{tables}/lake/orders/events").json()["items"][0]["decision_detail"]
        assert detail["compaction"]["decision"] == "task-created", detail
        shown = client.get(f"{tables}/lake/orders/hudi").json()["lock"]
        assert shown["provider"] == "zookeeper" and shown["shared_with_other_writers"], shown
        rounds_before = _rounds(log)

        _, states, runs = run_hudi_pass(
            db_url,
            tmp_path,
            {"compaction": detail["compaction"]["task_id"]},
            secrets_dir=rt.settings.secrets_path,
        )
        rounds_during = _rounds(log) - rounds_before
    finally:
        stop.touch()
        counts = writer.result(timeout=600)
        pool.shutdown()
    run = runs["compaction"]
    assert states == {"compaction": "succeeded"}, (run.error, run.log_tail)
    metrics = run.metrics or {}
    assert metrics["hudi_lock"]["provider"] == "zookeeper", metrics
    assert metrics["hudi_lock"]["zookeeper"]["base_path"] == locks
    assert rounds_during > 0, "the writer committed nothing while lakewarden compacted"
    assert metrics["validation"]["status"] == "passed", metrics["validation"]

    want = _written(log, keys)
    with table_storage(table, readable):
        from hudi import HudiTable

        read = pa.Table.from_batches(HudiTable(table, reader_options(readable, table)).read())
    ids, values = read.column("id").to_pylist(), read.column("v").to_pylist()
    got_values = dict(zip(ids, values, strict=True))
    report = {"writer": counts, "rounds_during_compaction": rounds_during, "metrics": metrics}
    assert len(ids) == len(set(ids)) == keys, report  # every key once
    assert got_values == want, report  # with the writer's last value
    timeline = HudiTimeline(table, readable)
    instant = metrics[hudi_compaction.PLANNED]
    assert instant in {i.requested for i in timeline.completed()}
    assert [i for i in timeline.pending() if i.action != "deltacommit"] == [], report
    # The lock both took: ZooKeeper's node for the table's key, under the catalog's path.
    zk = KazooClient(hosts=zookeeper.url)
    zk.start(timeout=30)
    try:
        node = zk.exists(f"{locks}/orders")
    finally:
        zk.stop()
        zk.close()
    assert node is not None and node.cversion > 0, node  # locks were taken there
    print("ZK-LOCK hudi", json.dumps({**report, "lock_node_cversion": node.cversion}, default=str))


@pytest.mark.spark
@pytest.mark.timeout(1500)
def test_a_hudi_clean_on_s3_with_hudis_metadata_table_on(
    client: TestClient,
    rt: Runtime,
    db_url: str,
    s3_server: S3Server,
    warehouse: str,
    spark_writers: SparkWriters,
    tmp_path: Path,
) -> None:
    """Hudi's cleaner and archival as lakewarden's clean kind on a copy-on-write table in
    the bucket whose writer keeps Hudi's metadata table (Hudi 1.x's default): the old file
    versions are gone from the bucket, the metadata table stays and recorded the clean, and
    Spark (which lists the files through the metadata table) and hudi-rs (which lists the
    bucket) read the same rows as before."""
    s3a = warehouse.replace("s3://", "s3a://", 1)
    table = f"{s3a}/lake/events"
    readable = {**_properties(s3_server, s3a), **_plain_credentials(s3_server)}
    cow = {
        "path": table,
        "type": "COPY_ON_WRITE",
        "partitioned": False,
        "options": {"hoodie.metadata.enable": "true"},
        "hadoop": hadoop_s3a(readable, table),
    }
    # Two bulk inserts, then two upserts of the same keys: their file group rewritten
    # twice, its oldest version past a retention of one commit.
    spark_writers.run(
        "hudi",
        [
            {**cow, "op": "bulk_insert", "ids": [0, 60], "value": 0},
            {**cow, "op": "bulk_insert", "ids": [60, 120], "value": 0},
            {**cow, "op": "upsert", "ids": [0, 10], "value": 1},
            {**cow, "op": "upsert", "ids": [0, 5], "value": 2},
        ],
        timeout=1200,
    )
    timeline = HudiTimeline(table, readable)
    assert timeline.properties.get("hoodie.table.metadata.partitions")
    with table_storage(table, readable):
        rows_before = digest(table)
        versions_before = {
            (g.file_id, i) for g in list_file_groups(timeline).values() for i in g.base
        }
    policy = {
        "clean": {
            "keep_last_snapshots": 1,
            "max_snapshot_age_hours": 0.000001,  # as the clean kind's own test
            "allow_below_safety_floors": True,
        }
    }
    _register(client, "s3clean", "hudi", _properties(s3_server, s3a))
    tables = "/api/v1/catalogs/s3clean/tables"
    got = client.post(tables, json={"namespace": "lake", "name": "events", "policy": policy})
    assert got.status_code == 201, got.text
    detail = client.get(f"{tables}/lake/events/events").json()["items"][0]["decision_detail"]
    assert detail["clean"]["decision"] == "task-created", detail

    _, states, runs = run_hudi_pass(
        db_url,
        tmp_path,
        {"clean": detail["clean"]["task_id"]},
        secrets_dir=rt.settings.secrets_path,
    )
    run = runs["clean"]
    assert states == {"clean": "succeeded"}, (run.error, run.log_tail)
    metrics = run.metrics or {}
    timeline = HudiTimeline(table, readable)
    completed = {i.requested: i for i in timeline.completed()}
    # Hudi's cleaner ran (its instant recorded as ours) and deleted files; archival ran.
    assert metrics["files_deleted"] >= 1 and metrics[hudi_clean.CLEANED], metrics
    assert all(completed[i].action == "clean" for i in metrics[hudi_clean.CLEANED])
    assert metrics["archive_result"] == 0 and metrics["validation"]["status"] == "passed"
    assert timeline.pending() == []
    # The metadata table is still there and recorded the clean.
    assert timeline.properties.get("hoodie.table.metadata.partitions")
    metadata = HudiTimeline(f"{table}/.hoodie/metadata", readable)
    assert set(metrics[hudi_clean.CLEANED]) <= {i.requested for i in metadata.completed()}
    with table_storage(table, readable):  # hudi-rs and pyarrow on the bucket
        versions_after = {
            (g.file_id, i) for g in list_file_groups(timeline).values() for i in g.base
        }
        assert digest(table) == rows_before
        rows = pa.Table.from_batches(HudiTable(table, reader_options(readable, table)).read())
    gone = versions_before - versions_after
    assert gone and versions_after < versions_before, (versions_before, versions_after)
    by_hudi_rs = sorted(
        zip(rows.column("id").to_pylist(), rows.column("v").to_pylist(), strict=True)
    )
    [by_spark] = spark_writers.run("hudi", [{"read": table, "hadoop": cow["hadoop"]}])
    assert [tuple(r) for r in by_spark] == by_hudi_rs and len(by_hudi_rs) == 120
    print(
        "S3-CLEAN hudi",
        json.dumps(
            {
                "gone": len(gone),
                **{
                    k: metrics.get(k)
                    for k in ("files_deleted", "archive_result", hudi_clean.CLEANED)
                },
            },
            default=str,
        ),
    )
