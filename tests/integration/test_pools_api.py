"""`GET /api/v1/pools` (`lakewarden pools`' source), the dashboard's pools page, the pool
metrics and a waiting task's `on_hold` (issue 32 §4): what each pool runs and queues, its
limit now, and an elastic pool's capacity and the leader's decisions with their reasons."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import make_test_runtime, serve
from fastapi.testclient import TestClient
from helpers import issue_token, lead
from sqlalchemy import text

from lakewarden import capacity
from lakewarden.db.models import ManagedTable, Task
from lakewarden.db.session import transaction
from lakewarden.runtime import Runtime

ELASTIC = {"big": {"min": 1, "max": 3, "scale_up_wait_s": 0}}


@pytest.fixture
def elastic(db_url: str, tmp_path: Path) -> Iterator[tuple[Runtime, TestClient]]:
    rt = make_test_runtime(
        db_url,
        tmp_path,
        pool_capacity=ELASTIC,
        pool_limits={"default": 4},
        pool_modes={"big": "application"},
    )
    with serve(rt) as client:
        yield rt, client
    rt.engine.dispose()


def _tasks(rt: Runtime, pool: str, states: list[str]) -> list[int]:
    ids = []
    with transaction(rt.engine) as s:
        for i, state in enumerate(states):
            row = ManagedTable(catalog="lake", namespace="p", name=f"{pool}{i}", policy={})
            s.add(row)
            s.flush()
            task = Task(table_id=row.id, kind="compaction", state=state, trigger={}, pool=pool)
            s.add(task)
            s.flush()
            ids.append(task.id)
    return ids


def test_pools_show_capacity_limits_and_why_it_scaled(
    elastic: tuple[Runtime, TestClient],
) -> None:
    rt, client = elastic
    ids = _tasks(rt, "big", ["running", "planned", "planned"])
    with rt.engine.begin() as conn:  # waited a minute: past scale_up_wait_s
        conn.execute(text("UPDATE tasks SET created_at = now() - interval '60 s'"))

    before = client.get("/api/v1/pools").json()["items"]
    assert [p["pool"] for p in before] == ["big", "default"]
    big = before[0]
    assert (big["mode"], big["running"], big["queued"], big["limit"]) == ("application", 1, 2, 1)
    assert big["elastic"]["capacity"] == 1 and big["elastic"]["reason"].startswith("no decision")
    assert before[1]["elastic"] is None and before[1]["limit"] == 4
    # The pool is full: its planned tasks say why they wait.
    on_hold = client.get(f"/api/v1/tasks/{ids[1]}").json()["on_hold"]
    assert (
        on_hold
        == "waiting: pool big runs 1 of its capacity 1 (elastic 1..3: grows after 0s of waiting)"
    )

    fence = lead(rt)
    for _ in range(2):  # its first decision (its minimum), then up
        with transaction(rt.engine) as s:
            capacity.apply(s, fence, rt.settings)
    big = client.get("/api/v1/pools").json()["items"][0]
    assert (big["limit"], big["elastic"]["capacity"]) == (2, 2)
    latest = big["elastic"]["decisions"][0]
    assert (latest["before"], latest["after"], latest["queued"], latest["running"]) == (1, 2, 2, 1)
    assert latest["reason"] == big["elastic"]["reason"]
    assert latest["reason"].startswith("scaled up: the oldest of 2 queued tasks waited 6")
    assert latest["leader_epoch"] == fence.epoch
    assert client.get(f"/api/v1/tasks/{ids[1]}").json()["on_hold"] is None  # a slot is free
    assert (
        len(
            client.get("/api/v1/pools", params={"decisions": 1}).json()["items"][0]["elastic"][
                "decisions"
            ]
        )
        == 1
    )

    html = client.get("/ui/pools")  # the dashboard's page: capacity against bounds, and why
    assert html.status_code == 200
    assert "2 (1..3)" in html.text and "scaled up: the oldest of 2 queued tasks" in html.text

    metrics = client.get("/metrics").text
    assert 'lakewarden_pool_capacity{pool="big"} 2.0' in metrics
    assert 'lakewarden_pool_capacity_max{pool="big"} 3.0' in metrics
    assert 'lakewarden_pool_queued{pool="big"} 2.0' in metrics
    assert 'lakewarden_pool_limit{pool="default"} 4.0' in metrics
    assert 'lakewarden_pool_capacity_changes_total{direction="up",pool="big"} 2.0' in metrics


def test_pools_need_a_viewer_grant_and_check_their_input(
    elastic: tuple[Runtime, TestClient],
) -> None:
    rt, client = elastic
    assert client.get("/api/v1/pools", params={"decisions": 101}).status_code == 422
    assert client.get("/api/v1/pools", headers={"Authorization": ""}).status_code == 401
    viewer = issue_token(rt, "viewer@lake/p")
    ok = client.get("/api/v1/pools", headers={"Authorization": f"Bearer {viewer}"})
    assert ok.status_code == 200
