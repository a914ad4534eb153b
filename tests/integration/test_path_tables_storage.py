"""Hudi and Delta tables on object stores and HDFS: a `delta` and a `hudi` catalog whose
warehouse is a bucket of S3Proxy (benchmarks/s3_server.py), their credentials given by
reference only (`{"env": …}`, `{"file": …}`); registering a table reads its log with them
(pyarrow's S3 file system for the listing, delta-rs' and hudi-rs' `object_store` options
for the files), its baseline judged, and the worker plans its compaction from what those
readers see. And a Delta table on HDFS (lakewarden.spark.local_hdfs), read through
hdfs-native."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from conftest import HudiTables
from deltalake import DeltaTable, write_deltalake
from fastapi.testclient import TestClient
from helpers import task_of
from pyarrow import fs as pafs

from benchmarks.s3_server import S3Server
from lakewarden.formats.hudi.facts import read_facts
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
    s3 = pafs.S3FileSystem(
        access_key=s3_server.access_key,
        secret_key=s3_server.secret_key,
        endpoint_override=s3_server.endpoint,
        scheme="http",
        region="us-east-1",
    )
    # the session's merge-on-read table with two log files per slice, copied into the bucket
    pafs.copy_files(hudi_tables.mor_logs, orders.removeprefix("s3://"), destination_filesystem=s3)

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
