"""Health and explain on real pyiceberg-written tables (no Spark): the numbers match what
was written, explain covers every kind and writes nothing."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from helpers import append_batches, make_table
from sqlalchemy import text

from lakewarden.kinds import REGISTRY
from lakewarden.runtime import Runtime
from services.api.app import create_app


@pytest.fixture
def client(rt: Runtime) -> Iterator[TestClient]:
    with TestClient(create_app(rt, background=False)) as c:
        yield c


def _register(client: TestClient, policy: dict) -> None:
    r = client.post(
        "/api/v1/tables", json={"namespace": "sales", "name": "orders", "policy": policy}
    )
    assert r.status_code == 201, r.text


def test_health_reports_what_was_written(client: TestClient, rt: Runtime) -> None:
    append_batches(make_table(rt), 6)  # 6 commits x 2 regions: 12 small files
    _register(
        client,
        {
            "compaction": {"min_small_files": 5, "min_input_files": 5},
            "clustering": {"enabled": True, "columns": ["id"]},
        },
    )
    h = client.get("/api/v1/tables/sales/orders/health").json()
    # files merge only within a partition: 6 files in each of 2 partitions, 5 + 5 reducible
    assert h["data_files"] == 12 and h["small_files"] == 12 and h["reducible_files"] == 10
    assert h["records"] == 60 and h["snapshots"]["count"] == 6
    assert [p["partition"] for p in h["partitions"]] == [{"region": "a"}, {"region": "b"}]
    assert all(p["data_files"] == 6 for p in h["partitions"])
    assert h["manifests"]["count"] >= 1 and h["delete_files"]["position"] == 0
    assert {(s["kind"], s["metric"]) for s in h["signals"]} >= {("compaction", "reducible_files")}
    assert 0 <= h["score"] < 100  # 10 of 12 files are reducible: a clear penalty
    assert h["layout"]["clustering"] is not None


def test_explain_covers_every_kind_and_writes_nothing(client: TestClient, rt: Runtime) -> None:
    append_batches(make_table(rt), 6)
    _register(client, {"compaction": {"min_small_files": 5, "min_input_files": 5}})
    client.post("/api/v1/tables/sales/orders/blockers", json={"holder": "flink", "ttl_s": 60})

    def counts() -> tuple[int, ...]:
        with rt.engine.connect() as conn:
            return tuple(
                conn.execute(text(f"SELECT count(*) FROM {t}")).scalar() or 0
                for t in ("tasks", "task_transitions", "timeline_events", "alerts")
            )

    before = counts()
    r = client.get("/api/v1/tables/sales/orders/explain")
    assert r.status_code == 200, r.text
    body = r.json()
    assert counts() == before
    assert set(body["kinds"]) == set(REGISTRY)
    comp = body["kinds"]["compaction"]
    assert comp["would_run"] is True and "rewrite 12 data files" in comp["reason"]
    assert comp["plan"]["expected_files_after"] == 2
    assert body["kinds"]["zorder"] == {
        "enabled": False,
        "trigger": "commits",
        "would_run": False,
        "reason": "zorder is disabled by policy",
    }
    assert body["kinds"]["clean"]["trigger"] == "sweep"
    assert [b["holder"] for b in body["blocked_by"]] == ["flink"]


def test_health_errors(client: TestClient, rt: Runtime) -> None:
    assert client.get("/api/v1/tables/sales/nope/health").status_code == 404
    assert client.get("/api/v1/tables/bad-ns/x/explain").status_code == 422
    make_table(rt)
    _register(client, {})
    rt.catalog.drop_table("sales.orders")
    r = client.get("/api/v1/tables/sales/orders/health")
    assert r.status_code == 409 and "gone from the catalog" in r.json()["detail"]
