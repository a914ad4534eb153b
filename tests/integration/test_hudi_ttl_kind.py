"""TTL on Hudi tables, end to end through the real services in one scheduler pass: two
copy-on-write tables written by the Hudi-family writer (`spark_writers`, Spark SQL), 60
rows over six days 0, 10, ... 50 days ago, one partitioned by the day (`dt`), one not.
Under a 25-day TTL each registration's baseline event opens a TTL task; the worker plans
both from the rows hudi-rs reads (no JVM); the leader submits each as a Hudi-family
application. The partitioned table loses its three expired partitions by Hudi's
`delete_partition`, its pre-TTL savepoint kept; the other's row delete is made to
miscount (the test-only failpoint), so its exact-count guard restores the savepoint and
fails the task. Checked with hudi-rs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from fastapi.testclient import TestClient
from helpers import run_hudi_pass
from spark_writer import SparkWriters
from test_hudi_services_kinds import TABLES, _register

from lakewarden.formats.hudi.timeline import HudiTimeline
from lakewarden.kinds import hudi_ttl
from lakewarden.kinds.hudi_ttl import PARTITION, read_rows

POLICY = {
    "ttl": {"enabled": True, "column": "dt", "retention_days": 25, "max_fraction": 0.6},
}


def _create(name: str, location: Path, partitioned: bool) -> list[dict[str, str]]:
    """Spark SQL steps: the table, then 60 rows, `dt` = today - (id % 6) * 10 days."""
    return [
        {
            "sql": f"CREATE TABLE {name} (id BIGINT, v BIGINT, ts BIGINT, dt DATE) USING hudi "
            f"LOCATION '{location.as_uri()}' "
            + ("PARTITIONED BY (dt) " if partitioned else "")
            + "TBLPROPERTIES (primaryKey = 'id', preCombineField = 'ts', type = 'cow', "
            "'hoodie.metadata.enable' = 'false', 'hoodie.clean.automatic' = 'false', "
            "'hoodie.embed.timeline.server' = 'false')"
        },
        {
            "sql": f"INSERT INTO {name} SELECT id, id * 10, 0, "
            "date_sub(current_date(), CAST(id % 6 AS INT) * 10) FROM range(0, 60)"
        },
    ]


def test_ttl_drops_expired_partitions_and_its_guard_undoes_a_miscounted_delete(
    client: TestClient, db_url: str, spark_writers: SparkWriters, tmp_path: Path
) -> None:
    wh = tmp_path / "wh" / "lake"
    spark_writers.run(
        "hudi",
        [*_create("ttl_days", wh / "days", True), *_create("ttl_flat", wh / "flat", False)],
    )
    days, flat = str(wh / "days"), str(wh / "flat")
    head = HudiTimeline(flat).completed()[-1].requested

    detail = _register(client, tmp_path, "days", POLICY)
    assert detail["ttl"]["decision"] == "task-created", detail
    assert "30 of 60 rows (50.0%, exact), 3 partition(s) dropped whole" in detail["ttl"]["reason"]
    got = client.post(TABLES, json={"namespace": "lake", "name": "flat", "policy": POLICY})
    assert got.status_code == 201, got.text
    flat_detail = client.get(f"{TABLES}/lake/flat/events").json()["items"][0]["decision_detail"]
    assert "(row level; retention 25 days); 30 of 60 rows" in flat_detail["ttl"]["reason"]
    # The explain says the same (no JVM)
    services = {s["service"]: s for s in client.get(f"{TABLES}/lake/days/hudi").json()["services"]}
    assert services["ttl"]["due"] and services["ttl"]["metrics"]["level"] == "partition"

    task_ids = {"days": detail["ttl"]["task_id"], "flat": flat_detail["ttl"]["task_id"]}
    plans, states, runs = run_hudi_pass(
        db_url, tmp_path, task_ids, failpoint="ttl-miscount-row", failpoints_enabled=True
    )
    assert states == {"days": "succeeded", "flat": "failed"}, {
        k: (r.error, r.log_tail) for k, r in runs.items()
    }
    cutoff = datetime.now(UTC).date() - timedelta(days=25)

    # Partition level: Hudi's delete_partition of the three expired days, exactly counted.
    plan, metrics = plans["days"].plan or {}, runs["days"].metrics or {}
    assert plan["level"] == "partition" and len(plan["partitions"]) == 3
    assert metrics["counted_rows"] == metrics["deleted_records"] == 30, metrics
    timeline = HudiTimeline(days)
    done = {i.requested: i for i in timeline.completed()}
    instant = metrics[hudi_ttl.INSTANT]
    assert timeline.read_instant(done[instant])["operationType"] == "DELETE_PARTITION"
    assert hudi_ttl.marked(timeline, f"task-{task_ids['days']}") == instant  # a retry's look
    # its undo point: savepointed before, recorded, kept (undo_retention_days)
    savepoint = metrics[hudi_ttl.SAVEPOINT]
    assert [s for s, _ in hudi_ttl.pre_ttl_savepoints(timeline)] == [savepoint]
    assert metrics["undo"]["retain_days"] == 7
    rows = read_rows(days, "dt")
    assert rows.num_rows == 30
    assert min(rows.column("dt").to_pylist()) > cutoff
    assert sorted(set(rows.column(PARTITION).to_pylist())) == sorted(
        f"dt={datetime.now(UTC).date() - timedelta(days=n)}" for n in (0, 10, 20)
    )

    # Row level: Hudi's delete ran, the (failpoint's) miscount was caught and undone.
    run = runs["flat"]
    metrics = run.metrics or {}
    assert "restored to savepoint" in (run.error or ""), run.error
    assert metrics["undo"]["restored"] and metrics["undo"]["rows_as_before"], metrics
    assert metrics[hudi_ttl.SAVEPOINT] == head
    timeline = HudiTimeline(flat)
    assert metrics[hudi_ttl.INSTANT] not in {i.requested for i in timeline.completed()}
    assert "restore" in {i.action for i in timeline.completed()}
    assert read_rows(flat, "dt").num_rows == 60
