"""Hudi and Delta tables on object stores and HDFS: a `delta` and a `hudi` catalog whose
warehouse is a bucket of S3Proxy (benchmarks/s3_server.py), their credentials given by
reference only (`{"env": …}`, `{"file": …}`); registering a table reads its log with them
(pyarrow's S3 file system for the listing, delta-rs' and hudi-rs' `object_store` options
for the files), its baseline judged, and the worker plans its compaction from what those
readers see. And a Delta table on HDFS (lakewarden.spark.local_hdfs), read through
hdfs-native. And Spark's Hudi jobs on S3: a compaction of an `s3a://` table."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from conftest import HudiTables
from deltalake import DeltaTable, write_deltalake
from fastapi.testclient import TestClient
from helpers import run_hudi_pass, task_of
from pyarrow import fs as pafs

from benchmarks.s3_server import S3Server
from lakewarden.formats.hudi.facts import read_facts
from lakewarden.formats.hudi.storage import table_storage
from lakewarden.formats.hudi.timeline import HudiTimeline
from lakewarden.formats.hudi.validation import digest
from lakewarden.kinds import hudi_compaction
from lakewarden.runtime import Runtime
from lakewarden.spark.local_hdfs import LocalHdfs
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
