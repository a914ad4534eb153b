"""A Hudi table whose writer keeps Hudi's metadata table (`hoodie.metadata.enable=true`,
Hudi 1.x's default; the other tests' fixtures turn it off) through lakewarden's compaction,
a Hudi-family application. The metadata table must stay, in step with the data table: a
write client that runs with the metadata table off on a table that has one deletes it
(Hudi's own rule), so every job runs with `hoodie.metadata.enable` as the table has it."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from helpers import run_hudi_pass
from spark_writer import SparkWriters

from lakewarden.formats.hudi.facts import read_facts
from lakewarden.formats.hudi.timeline import HudiTimeline
from lakewarden.formats.hudi.validation import digest
from lakewarden.kinds import hudi_compaction

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

TABLES = "/api/v1/catalogs/mlake/tables"
POLICY = {"compaction": {"min_input_files": 2, "min_small_files": 2}}


def _metadata_instants(base: Path) -> set[str]:
    """The instants the metadata table has recorded (its own timeline's completed
    deltacommits carry the data table's instant times)."""
    return {i.requested for i in HudiTimeline(str(base / ".hoodie" / "metadata")).completed()}


def test_a_table_with_hudis_metadata_table_keeps_it_through_compaction(
    client: TestClient, db_url: str, spark_writers: SparkWriters, tmp_path: Path
) -> None:
    base = tmp_path / "wh" / "lake" / "orders"
    table = {"path": base.as_uri(), "type": "MERGE_ON_READ", "partitioned": True}
    on = {"hoodie.metadata.enable": "true"}
    spark_writers.run(
        "hudi",
        [
            {**table, "op": "insert", "ids": [0, 60], "value": 0, "options": on},
            {**table, "op": "upsert", "ids": [0, 30], "value": 1, "options": on},
            {**table, "op": "upsert", "ids": [15, 45], "value": 2, "options": on},
        ],
        timeout=1200,  # a loaded 2-core box took over 600 s for these writes
    )
    path = str(base)
    assert HudiTimeline(path).properties.get("hoodie.table.metadata.partitions")
    rows_before = digest(path)

    got = client.post(
        "/api/v1/catalogs",
        json={"name": "mlake", "type": "hudi", "properties": {"warehouse": str(tmp_path / "wh")}},
    )
    assert got.status_code == 201, got.text
    got = client.post(TABLES, json={"namespace": "lake", "name": "orders", "policy": POLICY})
    assert got.status_code == 201, got.text
    detail = client.get(f"{TABLES}/lake/orders/events").json()["items"][0]["decision_detail"]
    assert detail["compaction"]["decision"] == "task-created", detail

    plans, states, runs = run_hudi_pass(
        db_url, tmp_path, {"compaction": detail["compaction"]["task_id"]}
    )
    run = runs["compaction"]
    assert states == {"compaction": "succeeded"}, (run.error, run.log_tail)
    assert (plans["compaction"].plan or {})["metadata_table"] is True
    instant = (run.metrics or {})[hudi_compaction.PLANNED]
    # The metadata table is still there and recorded the compaction.
    assert HudiTimeline(path).properties.get("hoodie.table.metadata.partitions")
    assert instant in _metadata_instants(base)
    assert read_facts(path).log_files == 0 and digest(path) == rows_before

    print(f"metadata table kept: compaction {instant} recorded in it")
