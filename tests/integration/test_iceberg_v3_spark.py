"""Iceberg format v3 on real Spark (Iceberg 1.12, Spark 3.5; issue 32 §2): a v3 table whose
merge-on-read DELETE, UPDATE and MERGE write deletion vectors (Puffin) is registered and
measured (health counts its deletion vectors, explain says what v3 changes), a repair is
refused with the reason, and every rewrite kind lakewarden runs on it (Z-order,
clustering, compaction, TTL, clean) keeps each surviving row's `_row_id` and
`_last_updated_sequence_number`, read through Spark before and after; the rows are checked
with pyiceberg too (it applies deletion vectors), and compaction leaves no deletion vector.
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest import serve
from fastapi.testclient import TestClient
from helpers import run_one, task_of
from pyspark.sql import SparkSession
from sqlalchemy import select

from lakewarden.db.models import ManagedTable, Task
from lakewarden.db.session import transaction
from lakewarden.fingerprint import fingerprint
from lakewarden.metadata import read_files
from lakewarden.runtime import Runtime
from lakewarden.states import OPEN_TASK_STATES
from services.scheduler.main import Scheduler
from services.worker.main import Worker

pytestmark = pytest.mark.spark

NAME = "v3_lineage"
FULL = f"lake.sales.{NAME}"
TABLE = f"/api/v1/tables/sales/{NAME}"
LINEAGE = tuple[int, int]  # (_row_id, _last_updated_sequence_number)

POLICY: dict[str, Any] = {
    "compaction": {"min_small_files": 2, "min_input_files": 2, "delete_ratio_threshold": 0.05},
    "zorder": {"enabled": True, "columns": ["id", "k"]},
    "clustering": {"enabled": False, "columns": ["k"]},  # one layout kind at a time
    "ttl": {"enabled": True, "column": "day", "retention_days": 5.5, "max_fraction": 0.9},
    "clean": {
        "keep_last_snapshots": 1,
        "max_snapshot_age_hours": 0.0001,
        "allow_below_safety_floors": True,
        "remove_orphans": False,
        "rewrite_manifests_min_count": 2,
    },
}


def _insert(spark: SparkSession, start: int, stop: int, step: int) -> None:
    """Rows id in range(start, stop, step): k spread over 0..999 (every file spans it),
    two regions, days 0..9 ago."""
    spark.sql(
        f"INSERT INTO {FULL} SELECT id, CAST((id * 7919) % 1000 AS INT), "
        "CASE WHEN id % 2 = 0 THEN 'a' ELSE 'b' END, "
        "date_sub(current_date(), CAST(id % 10 AS INT)), CAST(id AS STRING) "
        f"FROM range({start}, {stop}, {step})"
    )


def _lineage(spark: SparkSession) -> dict[int, LINEAGE]:
    spark.sql(f"REFRESH TABLE {FULL}")
    rows = spark.sql(f"SELECT id, _row_id, _last_updated_sequence_number FROM {FULL}").collect()
    return {r["id"]: (r["_row_id"], r["_last_updated_sequence_number"]) for r in rows}


def _deletion_vectors(spark: SparkSession) -> tuple[int, int]:
    """(deletion vectors, rows they delete), as Iceberg's own metadata table lists them."""
    spark.sql(f"REFRESH TABLE {FULL}")
    row = spark.sql(
        f"SELECT count(*) AS n, coalesce(sum(record_count), 0) AS rows "
        f"FROM {FULL}.delete_files WHERE file_format = 'PUFFIN'"
    ).collect()[0]
    return int(row["n"]), int(row["rows"])


def _cancel_open_tasks(rt: Runtime, client: TestClient) -> None:
    """Cancel what registration opened (it judges the current snapshot at once), so that
    the worker plans the one task each step asks for."""
    with transaction(rt.engine) as s:
        ids = s.scalars(
            select(Task.id)
            .join(ManagedTable, ManagedTable.id == Task.table_id)
            .where(ManagedTable.name == NAME, Task.state.in_([str(x) for x in OPEN_TASK_STATES]))
        ).all()
    for task_id in ids:
        r = client.post(f"/api/v1/tasks/{task_id}/cancel")
        assert r.status_code == 200, r.text


def _run(rt: Runtime, client: TestClient, scheduler: Scheduler, kind: str) -> dict[str, Any]:
    """Ask for a `kind` task through the API, plan it, run it on Spark: its plan and result."""
    _cancel_open_tasks(rt, client)
    r = client.post(f"{TABLE}/tasks", json={"kind": kind})
    assert r.status_code == 201, r.text
    task_id = r.json()["id"]
    assert Worker(rt).run_once()
    planned = task_of(rt, task_id)
    assert planned.state == "planned", planned.reason
    assert run_one(scheduler) == "succeeded", task_of(rt, task_id).reason
    done = task_of(rt, task_id)
    assert done.plan is not None and done.result is not None
    return {"plan": done.plan, "result": done.result, "reason": planned.reason}


def _kept(before: dict[int, LINEAGE], after: dict[int, LINEAGE], kind: str) -> None:
    """Every row that is still there has the id and sequence number it had."""
    moved = {i: (before[i], after[i]) for i in after if after[i] != before.get(i)}
    assert not moved, (
        f"{kind} changed the lineage of {len(moved)} rows, e.g. {list(moved.items())[:3]}"
    )


@pytest.mark.timeout(1800)  # five jobs and a dozen Spark reads: ~10 min on a loaded 2-core box
def test_a_v3_table_keeps_its_row_lineage_through_every_rewrite_kind(
    scheduler: Scheduler, spark_rt: Runtime, spark: SparkSession
) -> None:
    spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.sales")
    spark.sql(
        f"CREATE TABLE {FULL} (id BIGINT, k INT, region STRING, day DATE, v STRING) "
        "USING iceberg PARTITIONED BY (region) TBLPROPERTIES ('format-version'='3', "
        "'write.delete.mode'='merge-on-read', 'write.update.mode'='merge-on-read', "
        "'write.merge.mode'='merge-on-read')"
    )
    for i in range(8):
        _insert(spark, i, 1600, 8)  # every commit spans every id and k: a poor layout
    spark.sql(f"DELETE FROM {FULL} WHERE id % 11 = 0")
    spark.sql(f"UPDATE {FULL} SET v = 'updated' WHERE id % 13 = 0")
    spark.sql(
        f"MERGE INTO {FULL} t USING (SELECT id FROM range(0, 1600, 17)) s ON t.id = s.id "
        "WHEN MATCHED THEN UPDATE SET v = 'merged'"
    )
    dvs, dv_rows = _deletion_vectors(spark)
    assert dvs > 0  # Iceberg 1.12 on Spark 3.5 writes deletion vectors, not delete files
    table = spark_rt.catalog.load_table(f"sales.{NAME}")
    assert table.metadata.format_version == 3
    files = read_files(table)
    assert sum(1 for d in files.deletes if d.is_deletion_vector) == len(files.deletes) == dvs
    # exact, not spread: each deletion vector removes its rows from the one file it names
    assert sum(f.deleted_records for f in files.data) == dv_rows
    lineage = _lineage(spark)
    assert None not in {rid for rid, _ in lineage.values()}
    assert len({rid for rid, _ in lineage.values()}) == len(lineage)  # ids are unique

    with serve(spark_rt) as client:
        r = client.post(
            "/api/v1/tables", json={"namespace": "sales", "name": NAME, "policy": POLICY}
        )
        assert r.status_code == 201, r.text

        health = client.get(f"{TABLE}/health")
        assert health.status_code == 200, health.text
        h = health.json()
        assert h["format_version"] == 3
        assert h["delete_files"]["deletion_vectors"] == h["delete_files"]["position"] == dvs
        assert h["delete_files"]["deletion_vector_rows"] == dv_rows
        assert h["records"] - h["deleted_records"] == len(lineage)

        explain = client.get(f"{TABLE}/explain")
        assert explain.status_code == 200, explain.text
        fmt = explain.json()["format"]
        assert (fmt["version"], fmt["row_lineage"]) == (3, True)
        assert fmt["next_row_id"] == table.metadata.next_row_id
        assert {"repair", "rollback", "publish", "scheduled tags"} <= set(fmt["refused"])

        # pyiceberg 0.12 cannot write v3 metadata: its commits refused, saying why
        head = table.current_snapshot()
        assert head is not None and head.parent_snapshot_id is not None
        refused = client.post(
            f"/api/v1/catalogs/{spark_rt.settings.catalog_name}/tables/sales/{NAME}/repair",
            json={"partition": {"region": "a"}, "to_snapshot": head.parent_snapshot_id},
        )
        assert refused.status_code == 422, refused.text
        assert "format v3" in refused.text and "pyiceberg" in refused.text
        rollback = client.post(
            f"/api/v1/catalogs/{spark_rt.settings.catalog_name}/tables/sales/{NAME}/rollback",
            json={"to_snapshot": head.parent_snapshot_id},
        )
        assert rollback.status_code == 422, rollback.text
        assert "a rollback of main is refused on an Iceberg format v3 table" in rollback.text
        tags = client.put(f"{TABLE}/policy", json={**POLICY, "tags": {"enabled": True}})
        assert tags.status_code == 422 and "tags.enabled" in tags.text, tags.text
        table = table.refresh()
        current = table.current_snapshot()
        assert current is not None and current.snapshot_id == head.snapshot_id

        # Z-order, on files that deletion vectors apply to
        before, rows = _lineage(spark), fingerprint(table)
        zorder = _run(spark_rt, client, scheduler, "zorder")
        assert zorder["result"]["validation"]["status"] == "passed"
        assert zorder["result"]["validation"]["row_lineage"] == [
            "_row_id",
            "_last_updated_sequence_number",
        ]
        _kept(before, _lineage(spark), "zorder")
        after = fingerprint(spark_rt.catalog.load_table(f"sales.{NAME}"))
        assert (after.rows, after.checksum) == (rows.rows, rows.checksum)

        # clustering, on new small files beside the Z-ordered ones
        layout = {"zorder": {"enabled": False}, "clustering": {"enabled": True, "columns": ["k"]}}
        r = client.put(f"{TABLE}/policy", json={**POLICY, **layout})
        assert r.status_code == 200, r.text
        for i in range(4):
            _insert(spark, 1600 + i, 2400, 4)
        before = _lineage(spark)
        clustering = _run(spark_rt, client, scheduler, "clustering")
        assert clustering["result"]["validation"]["status"] == "passed"
        _kept(before, _lineage(spark), "clustering")

        # compaction: the rewrite applies the deletion vectors and drops them
        written = _lineage(spark)
        spark.sql(f"DELETE FROM {FULL} WHERE id % 5 = 0")
        spark.sql(f"UPDATE {FULL} SET v = 'again' WHERE id % 7 = 0")
        dvs, _ = _deletion_vectors(spark)
        assert dvs > 0
        # files at the target size (the clustered ones) are rewritten for their deletes alone
        biggest = max(f.size for f in read_files(spark_rt.catalog.load_table(f"sales.{NAME}")).data)
        compaction_policy = {**POLICY["compaction"], "target_file_size_bytes": max(biggest, 1024)}
        r = client.put(
            f"{TABLE}/policy", json={**POLICY, **layout, "compaction": compaction_policy}
        )
        assert r.status_code == 200, r.text
        before = _lineage(spark)
        # Iceberg's own UPDATE (1.12, Spark 3.5): a row keeps its id, its sequence moves on
        updated = [i for i in before if i % 7 == 0]
        assert updated and all(before[i][0] == written[i][0] for i in updated)
        assert all(before[i][1] > written[i][1] for i in updated)
        rows = fingerprint(spark_rt.catalog.load_table(f"sales.{NAME}"))
        compaction = _run(spark_rt, client, scheduler, "compaction")
        plan = compaction["plan"]
        assert plan["deletion_vectors"] == dvs and plan["rewrite_position_deletes"] is False
        assert sum(p["files_with_deletes"] for p in plan["partitions"]) > 0
        assert "deletion vector(s) (format v3)" in compaction["reason"]
        assert compaction["result"]["validation"]["status"] == "passed"
        assert _deletion_vectors(spark) == (0, 0)
        _kept(before, _lineage(spark), "compaction")
        after = fingerprint(spark_rt.catalog.load_table(f"sales.{NAME}"))
        assert (after.rows, after.checksum) == (rows.rows, rows.checksum)

        # TTL: a row-level delete of the rows past retention (deletion vectors again)
        before = _lineage(spark)
        ttl = _run(spark_rt, client, scheduler, "ttl")
        assert ttl["plan"]["level"] == "row"
        left = _lineage(spark)
        assert 0 < len(left) < len(before)
        _kept(before, left, "ttl")

        # clean: snapshots expired, manifests rewritten
        before = _lineage(spark)
        clean = _run(spark_rt, client, scheduler, "clean")
        names = [a["name"] for a in clean["plan"]["actions"]]
        assert "expire_snapshots" in names and "rewrite_manifests" in names
        _kept(before, _lineage(spark), "clean")
        assert _lineage(spark).keys() == before.keys()

        health = client.get(f"{TABLE}/health").json()
        assert health["delete_files"]["deletion_vectors"] == _deletion_vectors(spark)[0] > 0
    spark.sql(f"DROP TABLE {FULL}")
