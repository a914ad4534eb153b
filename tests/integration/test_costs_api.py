"""`GET /api/v1/costs` (issue 32 §3): runs' Spark metrics rolled up per table, namespace,
kind, pool and day, within the caller's grants, as JSON and CSV. The runs here carry the
`metrics.cost` a session-run job records (`lakewarden.spark.cost`; the Spark tests check
that a real job records it)."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta

from fastapi.testclient import TestClient
from helpers import issue_token

from lakewarden.db.models import JobRun, ManagedTable, Task, TimelineEvent
from lakewarden.db.session import transaction
from lakewarden.runtime import Runtime


def _run(
    rt: Runtime, table: str, kind: str, cpu: float, finished: datetime, wrote: int = 0
) -> None:
    namespace, name = table.split(".")
    with transaction(rt.engine) as s:
        row = s.query(ManagedTable).filter_by(namespace=namespace, name=name).one_or_none()
        if row is None:
            row = ManagedTable(catalog="lake", namespace=namespace, name=name, policy={})
            s.add(row)
            s.flush()
        task = Task(table_id=row.id, kind=kind, state="succeeded", trigger={}, pool="default")
        s.add(task)
        s.flush()
        cost = {
            "executor_cpu_s": cpu,
            "executor_run_s": cpu * 2,
            "input_bytes": 1000,
            "output_bytes": 500,
            "output_records": 10,
            "shuffle_write_bytes": 0,
        }
        committed = None
        if wrote:  # the run committed a snapshot, ingested as the table's event
            committed = 1000 + task.id
            s.add(
                TimelineEvent(
                    table_id=row.id,
                    snapshot_id=committed,
                    operation="replace",
                    summary={"added-files-size": str(wrote), "added-data-files": "2"},
                    source="poll",
                )
            )
        s.add(
            JobRun(
                committed_snapshot_id=committed,
                task_id=task.id,
                attempt=1,
                state="succeeded",
                scheduler_id="t",
                leader_epoch=1,
                started_at=finished - timedelta(seconds=3),
                finished_at=finished,
                duration_ms=3000,
                metrics={"cost": cost},
            )
        )


def test_costs_roll_up_per_group_in_the_caller_s_scope(client: TestClient, rt: Runtime) -> None:
    now = datetime.now(UTC)
    _run(rt, "sales.orders", "compaction", 4.0, now - timedelta(hours=1), wrote=70_000)
    _run(rt, "sales.orders", "clean", 1.0, now - timedelta(hours=2))
    _run(rt, "sales.items", "compaction", 2.5, now - timedelta(hours=1))
    _run(rt, "hr.people", "compaction", 9.0, now - timedelta(days=2))
    _run(rt, "hr.people", "compaction", 100.0, now - timedelta(days=30))  # before the window

    by_table = client.get("/api/v1/costs", params={"by": "table"}).json()
    assert [(r["key"], r["runs"], r["executor_cpu_s"]) for r in by_table["items"]] == [
        ("lake.hr.people", 1, 9.0),
        ("lake.sales.orders", 2, 5.0),
        ("lake.sales.items", 1, 2.5),
    ]
    orders = by_table["items"][1]
    assert (orders["executor_run_s"], orders["input_bytes"], orders["wall_s"]) == (10.0, 2000, 6.0)
    assert (orders["written_bytes"], orders["files_written"]) == (70_000, 2)
    by_kind = client.get("/api/v1/costs", params={"by": "kind"}).json()["items"]
    assert {r["key"]: r["executor_cpu_s"] for r in by_kind} == {"compaction": 15.5, "clean": 1.0}
    since = (now - timedelta(days=60)).isoformat()
    by_day = client.get("/api/v1/costs", params={"by": "day", "since": since}).json()["items"]
    assert sum(r["executor_cpu_s"] for r in by_day) == 116.5 and len(by_day) >= 3

    got = client.get("/api/v1/costs", params={"by": "namespace", "format": "csv"})
    assert got.status_code == 200 and got.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(got.text)))
    assert [(r["namespace"], float(r["executor_cpu_s"])) for r in rows] == [
        ("lake.hr", 9.0),
        ("lake.sales", 7.5),
    ]

    # A viewer of one namespace sees its groups only.
    token = issue_token(rt, "viewer@lake/sales", name="sales-viewer")
    mine = client.get(
        "/api/v1/costs", params={"by": "namespace"}, headers={"Authorization": f"Bearer {token}"}
    ).json()["items"]
    assert [r["key"] for r in mine] == ["lake.sales"]

    for bad in ({"by": "planet"}, {"since": "yesterday"}, {"format": "xml"}):
        r = client.get("/api/v1/costs", params=bad)
        assert r.status_code == 422, (bad, r.text)
    later = client.get("/api/v1/costs", params={"since": (now + timedelta(days=1)).isoformat()})
    assert later.status_code == 200 and later.json()["items"] == []  # no run there yet
