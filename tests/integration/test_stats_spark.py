"""The stats kind on a real table (issue 32 §1): a task planned by the worker, run by the
scheduler with Iceberg's `compute_table_stats` on Spark; the statistics file and its
distinct-count sketches read back with pyiceberg and checked against exact counts."""

from __future__ import annotations

import pyarrow as pa
import pytest
from helpers import manage, run_one, task_of

from lakewarden.health.measure import measure
from lakewarden.policy.model import Policy
from lakewarden.runtime import Runtime
from services.scheduler.main import Scheduler
from services.worker.main import Worker

pytestmark = pytest.mark.spark

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("city", pa.string(), nullable=True),
        pa.field("tags", pa.list_(pa.string()), nullable=True),  # not sketched: not primitive
    ]
)


def test_column_statistics_are_computed_and_read_back(
    scheduler: Scheduler, spark_rt: Runtime
) -> None:
    spark_rt.catalog.create_namespace_if_not_exists("sales")
    table = spark_rt.catalog.create_table("sales.lw_stats", schema=SCHEMA)
    for k in range(3):
        table.append(
            pa.table(
                {
                    "id": list(range(k * 1000, k * 1000 + 1000)),
                    "city": [f"city-{i % 37}" for i in range(1000)],
                    "tags": [["a"]] * 1000,
                },
                schema=SCHEMA,
            )
        )
    table = table.refresh()
    current = table.current_snapshot()
    assert current is not None and not table.metadata.statistics
    policy = Policy.model_validate({"stats": {"enabled": True}})
    assert measure(table, policy).statistics == {
        "snapshot_id": None,
        "current": False,
        "age_hours": None,
        "columns": [],
        "snapshots_since": 3,
        "rewrites_since": 0,
    }
    task_id = manage(spark_rt, "lw_stats", {"stats": {"enabled": True}}, kind="stats")

    assert Worker(spark_rt).run_once()
    planned = task_of(spark_rt, task_id)
    assert planned.state == "planned", planned.reason
    assert planned.plan is not None and planned.plan["columns"] == ["id", "city"]
    assert (planned.reason or "").startswith("the table has no column statistics")
    assert run_one(scheduler) == "succeeded"

    table = spark_rt.catalog.load_table("sales.lw_stats")
    assert table.current_snapshot() == current  # statistics commit no snapshot
    (stats,) = table.metadata.statistics
    assert stats.snapshot_id == current.snapshot_id
    ndv = {
        table.schema().find_field(blob.fields[0]).name: int((blob.properties or {})["ndv"])
        for blob in stats.blob_metadata
    }
    assert set(ndv) == {"id", "city"}
    assert ndv["city"] == 37  # theta sketches are exact below their size (4,096)
    assert abs(ndv["id"] - 3000) <= 3000 * 0.05  # estimated beyond it
    freshness = measure(table, policy).statistics
    assert freshness is not None
    assert (freshness["current"], freshness["columns"]) == (True, ["city", "id"])
    done = task_of(spark_rt, task_id)
    assert done.result is not None and done.result["statistics_file"] == stats.statistics_path

    # Fresh now: the next sweep's task is skipped, saying so.
    from lakewarden.db.session import transaction
    from lakewarden.tasks import repo

    with transaction(spark_rt.engine) as s:
        again = repo.create_task(
            s, table_id=done.table_id, kind="stats", trigger={"reason": "test"}, actor="test"
        )
    assert again is not None and Worker(spark_rt).run_once()
    skipped = task_of(spark_rt, again)
    assert skipped.state == "skipped"
    assert "is the current one" in (skipped.reason or ""), skipped.reason
