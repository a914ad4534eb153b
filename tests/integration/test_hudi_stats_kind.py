"""Hudi's column-stats index as the stats kind (issue 32 §1), end to end through the real
services: a merge-on-read table whose writer keeps Hudi's metadata table but not its
column-stats index. Health shows the index missing; the registration opens a stats task;
the job (in the shared Hudi-family writer's warm JVM, the application's own code) builds it
with Hudi's async indexer. Checked without lakewarden's reader: `hoodie.properties` lists
the `column_stats` partition, its files are in the metadata table's folder, the index
definition names the policy's columns, the data timeline has the completed `indexing`
instant the run recorded, and hudi-rs reads the same rows. Then the writer: one that
keeps the index (`…column.stats.enable=true`) leaves it current (the kind skips, saying
so); one that turns it off drops it at its next commit, and the kind does not build it
again, saying why."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from helpers import run_hudi_pass
from spark_writer import SparkWriters

from lakewarden.formats.hudi.timeline import HudiTimeline
from lakewarden.formats.hudi.validation import digest
from lakewarden.kinds import hudi_stats

TABLES = "/api/v1/catalogs/hlake/tables"
MOR = {"type": "MERGE_ON_READ", "partitioned": True}
# The writer: Hudi's metadata table on (its files partition), no column-stats index (nor
# the partition-stats index, which needs it).
NO_INDEX = {
    "hoodie.metadata.enable": "true",
    "hoodie.metadata.index.column.stats.enable": "false",
    "hoodie.metadata.index.partition.stats.enable": "false",
}
KEEPS_INDEX = {
    **NO_INDEX,
    "hoodie.metadata.index.column.stats.enable": "true",
    "hoodie.metadata.index.column.stats.column.list": "id,v",
}


def _properties(path: Path) -> dict[str, str]:
    text = (path / ".hoodie" / "hoodie.properties").read_text()
    pairs = (line.split("=", 1) for line in text.splitlines() if "=" in line and line[0] != "#")
    return {k: v for k, v in pairs}


def _index_partitions(path: Path) -> set[str]:
    return set(
        filter(None, _properties(path).get("hoodie.table.metadata.partitions", "").split(","))
    )


def _stats_service(client: TestClient) -> dict[str, Any]:
    health = client.get(f"{TABLES}/lake/events/hudi").json()
    return {"index": health["column_stats_index"], **{s["service"]: s for s in health["services"]}}


def test_the_column_stats_index_is_built_where_the_writer_keeps_it(
    client: TestClient, db_url: str, spark_writers: SparkWriters, tmp_path: Path
) -> None:
    table = tmp_path / "wh" / "lake" / "events"
    steps = [
        {**MOR, "op": "insert", "ids": [0, 90], "value": 0, "options": NO_INDEX},
        {**MOR, "op": "upsert", "ids": [0, 30], "value": 1, "options": NO_INDEX},
    ]
    spark_writers.run("hudi", [{**s, "path": table.as_uri()} for s in steps])
    assert _index_partitions(table) == {"files"}  # what the job must change
    rows = digest(str(table))

    got = client.post(
        "/api/v1/catalogs",
        json={"name": "hlake", "type": "hudi", "properties": {"warehouse": str(tmp_path / "wh")}},
    )
    assert got.status_code == 201, got.text
    policy = {"stats": {"enabled": True, "columns": ["id", "v"]}}
    got = client.post(TABLES, json={"namespace": "lake", "name": "events", "policy": policy})
    assert got.status_code == 201, got.text
    seen = _stats_service(client)
    assert seen["index"]["metadata_table"] and not seen["index"]["exists"], seen["index"]
    assert seen["stats"]["due"] and "no column-stats index" in seen["stats"]["reason"]
    events = client.get(f"{TABLES}/lake/events/events").json()["items"]
    detail = events[0]["decision_detail"]
    assert detail["stats"]["decision"] == "task-created", detail

    plans, states, runs = run_hudi_pass(
        db_url, tmp_path, {"stats": int(detail["stats"]["task_id"])}, warm=spark_writers
    )
    assert (plans["stats"].plan or {})["action"] == "build_column_stats"
    run = runs["stats"]
    assert states == {"stats": "succeeded"}, (run.error, run.log_tail)
    metrics = run.metrics or {}
    instant = metrics[hudi_stats.BUILT]

    # Independently of lakewarden's reader: the table's properties, the metadata table's
    # folder, the index definition, the timeline's file names; hudi-rs' rows.
    assert _index_partitions(table) == {"files", "column_stats"}
    folder = table / ".hoodie" / "metadata" / "column_stats"
    assert [f for f in folder.iterdir() if f.name.endswith(".hfile")], list(folder.iterdir())
    defs = json.loads((table / _properties(table)["hoodie.table.index.defs.path"]).read_text())
    fields = defs["indexDefinitions"]["column_stats"]["sourceFields"]
    assert {"id", "v"} <= set(fields) and "region" not in fields, fields
    timeline = table / ".hoodie" / "timeline"
    assert [f.name for f in timeline.glob(f"{instant}_*.indexing")], sorted(timeline.iterdir())
    assert digest(str(table)) == rows

    seen = _stats_service(client)
    assert seen["index"]["exists"] and seen["index"]["current"], seen["index"]
    assert not seen["stats"]["due"] and "is current" in seen["stats"]["reason"]

    # A writer that keeps the index: it stays, current with the writer's commit.
    keep = {**MOR, "op": "upsert", "ids": [0, 10], "value": 2, "options": KEEPS_INDEX}
    spark_writers.run("hudi", [{**keep, "path": table.as_uri()}])
    seen = _stats_service(client)
    latest = HudiTimeline(str(table)).completed()[-1].requested
    assert seen["index"]["current"] and seen["index"]["latest_write"] == latest, seen["index"]
    # One that turns it off drops it at its next commit; lakewarden does not build it again.
    drop = {**MOR, "op": "upsert", "ids": [0, 10], "value": 3, "options": NO_INDEX}
    spark_writers.run("hudi", [{**drop, "path": table.as_uri()}])
    assert "column_stats" not in _index_partitions(table)
    seen = _stats_service(client)
    assert not seen["stats"]["due"], seen["stats"]
    assert f"lakewarden built (indexing {instant}) is gone" in seen["stats"]["reason"]
