"""Health and explain on real pyiceberg-written tables and a real Postgres (no Spark, except
the one marked test with merge-on-read delete files): the numbers match what was written,
explain covers every kind and writes nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest
from fastapi.testclient import TestClient
from helpers import append_batches, current, make_table
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from lakewarden.db.session import session_factory
from lakewarden.kinds import REGISTRY
from lakewarden.runtime import Runtime
from services.api.routes.health import _read_only
from services.scheduler.health_watch import measure_due_tables

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

MiB = 1024 * 1024


def _register(client: TestClient, policy: dict[str, Any], name: str = "orders") -> None:
    r = client.post("/api/v1/tables", json={"namespace": "sales", "name": name, "policy": policy})
    assert r.status_code == 201, r.text


def _fingerprint(rt: Runtime) -> dict[str, tuple[int, str]]:
    """Row count and a digest of every row of every table in the database (the Iceberg
    catalog's tables included): any insert, update or delete changes it."""
    with rt.engine.connect() as conn:
        tables = conn.execute(
            text("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        ).scalars()
        return {
            t: tuple(
                conn.execute(
                    text(
                        f"SELECT count(*), md5(coalesce(string_agg(x::text, '|' "
                        f"ORDER BY x::text), '')) FROM \"{t}\" x"
                    )
                ).one()
            )
            for t in list(tables)
        }


def test_health_reports_what_was_written(client: TestClient, rt: Runtime) -> None:
    append_batches(make_table(rt), 6)  # 6 commits x 2 regions: 12 small files
    _register(
        client,
        {
            "compaction": {"min_small_files": 5, "min_input_files": 5},
            "clustering": {"enabled": True, "columns": ["id"]},
        },
    )
    r = client.get("/api/v1/tables/sales/orders/health")
    assert r.status_code == 200, r.text
    h = r.json()
    assert h["table"] == "sales.orders" and h["policy_version"] == 1
    assert (h["data_files"], h["records"], h["small_files"], h["small_file_ratio"]) == (
        12,
        60,
        12,
        1.0,
    )
    assert h["small_file_threshold_bytes"] == 96 * MiB  # 128 MiB x 0.75
    sizes = h["file_size"]
    assert 0 < sizes["min"] <= sizes["p50"] <= sizes["max"] < MiB
    # files merge only within a partition: 6 files in each of 2 partitions, 5 + 5 reducible
    assert h["reducible_files"] == 10
    assert h["snapshots"]["count"] == 6 and h["snapshots"]["expirable"] == 0
    assert 0 <= h["snapshots"]["newest_age_s"] <= h["snapshots"]["oldest_age_s"] < 600
    assert h["manifests"]["count"] == 6 and h["manifests"]["data"] == 6  # one per append
    assert h["manifests"]["total_bytes"] > 0
    assert h["delete_files"] == {
        "position": 0,
        "equality": 0,
        "position_rows": 0,
        "equality_rows": 0,
        "deletion_vectors": 0,
        "deletion_vector_rows": 0,
    }
    assert h["deleted_row_ratio"] == 0.0

    parts = h["partitions"]
    assert [p["partition"] for p in parts] == [{"region": "a"}, {"region": "b"}]
    for p in parts:
        assert (p["data_files"], p["records"], p["small_file_ratio"], p["reducible_files"]) == (
            6,
            30,
            1.0,
            5,
        )
        assert p["file_size"]["min"] <= p["file_size"]["p50"] <= p["file_size"]["max"]
        # ids were written in order: each file holds a disjoint range within its partition
        assert p["files_per_lookup"]["clustering"] == 1.0
    assert h["layout_columns"] == {"clustering": ["id"]}
    assert h["layout"]["clustering"] is not None

    assert h["penalties"]["small_files"] == 33.33  # 40 x 10 / 12
    assert h["score"] == 67
    assert [(s["kind"], s["metric"], s["value"], s["threshold"]) for s in h["signals"]] == [
        ("compaction", "reducible_files", 10, 5)
    ]
    assert h["ttl"]["column"] is None

    # The leader's health watch stores the same signals with the score; the tables list
    # (the fleet overview's and `lakewarden tables`' source) returns them.
    def listed() -> dict[str, Any]:
        (row,) = client.get("/api/v1/tables", params={"sort": "health"}).json()["items"]
        return row

    assert (listed()["health_score"], listed()["health_signals"]) == (None, None)
    assert measure_due_tables(rt, datetime.now(UTC)) == 1
    row = listed()
    assert row["health_score"] == 67 and row["health_signals"] == h["signals"]


def test_health_of_the_ttl_column(client: TestClient, rt: Runtime) -> None:
    from pyiceberg.transforms import DayTransform

    schema = pa.schema(
        [pa.field("id", pa.int64(), nullable=False), pa.field("ts", pa.timestamp("us", "UTC"))]
    )
    rt.catalog.create_namespace_if_not_exists("sales")
    table = rt.catalog.create_table("sales.events", schema=schema)
    with table.update_spec() as spec:
        spec.add_field("ts", DayTransform(), "ts_day")
    table = rt.catalog.load_table("sales.events")
    now = datetime.now(UTC).replace(microsecond=0)
    days = [30] * 10 + [20] * 10 + [1] * 80  # 20% of the rows older than 7 days
    table.append(
        pa.table(
            {"id": list(range(100)), "ts": [now - timedelta(days=d) for d in days]}, schema=schema
        )
    )
    _register(
        client, {"ttl": {"enabled": True, "column": "ts", "retention_days": 7}}, name="events"
    )

    h = client.get("/api/v1/tables/sales/events/health").json()
    assert h["ttl"]["column"] == "ts"
    assert datetime.fromisoformat(h["ttl"]["oldest"]) == now - timedelta(days=30)
    assert datetime.fromisoformat(h["ttl"]["newest"]) == now - timedelta(days=1)
    assert h["ttl"]["files_past_retention"] == 2 == h["ttl"]["files_entirely_past_retention"]
    parts = sorted(h["partitions"], key=lambda p: p["partition"]["ts_day"])
    assert [p["past_retention"] for p in parts] == [True, True, False]
    assert datetime.fromisoformat(parts[0]["oldest_ttl_value"]) == now - timedelta(days=30)
    assert ("ttl", "files_past_retention") in {(s["kind"], s["metric"]) for s in h["signals"]}

    ttl = client.get("/api/v1/tables/sales/events/explain").json()["kinds"]["ttl"]
    assert ttl["enabled"] and ttl["would_run"], ttl
    assert ttl["expected_gain"]["estimated_rows"] == 20
    assert [t["source"] for t in ttl["triggers"]] == ["sweep"]


def test_explain_covers_every_kind_and_writes_nothing(client: TestClient, rt: Runtime) -> None:
    table = append_batches(make_table(rt), 6)
    # registering evaluates the current snapshot: 10 reducible files >= 5 opens a task
    _register(client, {"compaction": {"min_small_files": 5, "min_input_files": 5}})
    r = client.post("/api/v1/tables/sales/orders/blockers", json={"holder": "flink", "ttl_s": 60})
    assert r.status_code == 201, r.text

    before = _fingerprint(rt)
    r = client.get("/api/v1/tables/sales/orders/explain")
    assert r.status_code == 200, r.text
    assert _fingerprint(rt) == before
    assert rt.catalog.load_table("sales.orders").metadata_location == table.metadata_location

    body = r.json()
    assert list(body["kinds"]) == list(REGISTRY)
    assert body["snapshot_id"] == current(table).snapshot_id
    assert [b["holder"] for b in body["blocked_by"]] == ["flink"]
    assert body["summary"].startswith("would run now: compaction, clean; blocked by flink")

    comp = body["kinds"]["compaction"]
    assert comp["enabled"] and comp["would_run"]
    assert comp["open_task"]["state"] == "pending" and "reducible" in comp["open_task"]["reason"]
    assert f"open task {comp['open_task']['id']} (pending) covers it" in comp["reason"]
    assert comp["planner_reason"].startswith("rewrite 12 data files in 2 partition(s)")
    assert comp["plan"]["expected_files_after"] == 2
    assert comp["expected_gain"]["data_files_removed"] == 10
    (trigger,) = comp["triggers"]
    assert trigger["source"] == "commits" and trigger["would_create_task"] is False
    assert "already covers it" in trigger["reason"]

    zorder = body["kinds"]["zorder"]
    assert (zorder["enabled"], zorder["would_run"], zorder["plan"], zorder["open_task"]) == (
        False,
        False,
        None,
        None,
    )
    assert zorder["reason"] == (
        "zorder is disabled by policy; not planned: the section is incomplete "
        "(needs at least 2 column(s) when enabled)"
    )
    assert zorder["triggers"][0]["would_create_task"] is False
    assert body["kinds"]["ttl"]["enabled"] is False and not body["kinds"]["ttl"]["would_run"]

    clean = body["kinds"]["clean"]
    assert clean["enabled"] and clean["would_run"] and clean["open_task"] is None
    assert clean["triggers"] == [
        {
            "source": "sweep",
            "would_create_task": True,
            "reason": "no clean task yet: the next sweep creates one",
            "metrics": None,
        }
    ]
    assert clean["expected_gain"]["snapshots_before"] == 6


def test_explain_says_why_compaction_would_not_run(client: TestClient, rt: Runtime) -> None:
    append_batches(make_table(rt), 2)  # 2 files per partition: under min_input_files
    _register(client, {"zorder": {"columns": ["id", "amount"]}})
    body = client.get("/api/v1/tables/sales/orders/explain").json()
    assert body["blocked_by"] == [] and "compaction" not in body["summary"]
    comp = body["kinds"]["compaction"]
    assert comp["would_run"] is False and comp["plan"] is None and comp["open_task"] is None
    assert comp["reason"].startswith("no partition has >= 5 files under 100663296 bytes")
    (trigger,) = comp["triggers"]
    assert trigger["would_create_task"] is False
    assert "3 reducible files < min_small_files 12" in trigger["reason"]
    # a disabled kind whose section is complete is planned as if enabled
    zorder = body["kinds"]["zorder"]
    assert zorder["would_run"] is False
    assert zorder["reason"].startswith("zorder is disabled by policy; if enabled, its planner")


def test_an_empty_table(client: TestClient, rt: Runtime) -> None:
    make_table(rt)
    _register(client, {})
    h = client.get("/api/v1/tables/sales/orders/health").json()
    assert (h["snapshot_id"], h["data_files"], h["score"], h["signals"]) == (None, 0, 100, [])
    assert h["snapshots"]["count"] == 0 and h["manifests"]["count"] == 0
    body = client.get("/api/v1/tables/sales/orders/explain").json()
    assert body["summary"] == "nothing would run now"
    # Its region, and that no scheduler leads it here (none runs in this test).
    assert (body["region"], body["region_leader"]) == ("default", False)
    assert body["kinds"]["compaction"]["reason"] == "table has no snapshot: nothing to compact"
    assert body["kinds"]["compaction"]["triggers"][0]["reason"] == "no commit yet"


def test_the_routes_transaction_refuses_writes(rt: Runtime) -> None:
    with session_factory(rt.engine)() as s, s.begin():
        s.execute(text("SELECT count(*) FROM managed_tables"))  # as the table lookup does
        _read_only(s)
        with pytest.raises(DBAPIError, match="read-only transaction"):
            s.execute(text("DELETE FROM tasks"))


@pytest.mark.parametrize("view", ["health", "explain"])
def test_errors(client: TestClient, rt: Runtime, view: str) -> None:
    r = client.get(f"/api/v1/tables/sales/nope/{view}")
    assert r.status_code == 404 and "not managed" in r.json()["detail"]
    assert client.get(f"/api/v1/tables/bad-ns/x/{view}").status_code == 422
    assert client.get(f"/api/v1/tables/sales/{'x' * 200}/{view}").status_code == 422

    make_table(rt, name=f"gone_{view}")
    _register(client, {}, name=f"gone_{view}")
    rt.catalog.drop_table(f"sales.gone_{view}")
    r = client.get(f"/api/v1/tables/sales/gone_{view}/{view}")
    assert r.status_code == 409 and "gone from the catalog" in r.json()["detail"]


@pytest.mark.spark
def test_delete_files_per_partition_on_a_merge_on_read_table(
    spark_rt: Runtime,
    spark: SparkSession,
) -> None:
    from lakewarden.health.measure import measure
    from lakewarden.policy.model import Policy

    spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.sales")
    spark.sql("DROP TABLE IF EXISTS lake.sales.health_mor")
    spark.sql(
        "CREATE TABLE lake.sales.health_mor (id BIGINT, region STRING) USING iceberg "
        "PARTITIONED BY (region) TBLPROPERTIES ("
        "'format-version'='2', 'write.delete.mode'='merge-on-read')"
    )
    spark.range(0, 300).selectExpr(
        "id", "CASE WHEN id < 150 THEN 'a' ELSE 'b' END AS region"
    ).coalesce(1).writeTo("lake.sales.health_mor").append()
    spark.sql("DELETE FROM lake.sales.health_mor WHERE region = 'a' AND id % 3 = 0")

    h = measure(spark_rt.catalog.load_table("sales.health_mor"), Policy())
    assert h.delete_files == {
        "position": 1,
        "equality": 0,
        "position_rows": 50,
        "equality_rows": 0,
        "deletion_vectors": 0,  # a v2 table's position-delete file
        "deletion_vector_rows": 0,
    }
    assert h.manifests["deletes"] == 1
    assert h.deleted_row_ratio == round(50 / 300, 4)
    pa_, pb = h.partitions
    assert pa_.partition == {"region": "a"} and pa_.delete_files["position"] == 1
    assert (pa_.deleted_records, pa_.deleted_row_ratio) == (50.0, round(50 / 150, 4))
    assert pb.delete_files["position"] == 0 and pb.deleted_row_ratio == 0.0
    assert h.penalties["deletes"] == round(40 * (50 / 300) / 0.2, 2)
    spark.sql("DROP TABLE lake.sales.health_mor")
