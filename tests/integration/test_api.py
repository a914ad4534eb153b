"""The REST API on a real Postgres and a real Iceberg catalog: status codes that say what to fix."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from helpers import append_batches, make_table
from sqlalchemy import text

from lakewarden.runtime import Runtime


def test_health_and_readiness(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json() == {"status": "ready"}
    assert client.get("/openapi.json").status_code == 200


def test_register_unknown_table_is_404(client: TestClient) -> None:
    r = client.post("/api/v1/tables", json={"namespace": "nope", "name": "missing"})
    assert r.status_code == 404
    assert "has no table nope.missing" in r.json()["detail"]


@pytest.mark.parametrize(
    "body, field",
    [
        ({"namespace": "bad-ns", "name": "t"}, None),
        ({"namespace": "ns", "name": "t; drop"}, None),
        ({"namespace": "ns"}, "name"),
        ({"namespace": "ns", "name": "t", "extra": 1}, "extra"),
        (
            {"namespace": "ns", "name": "t", "policy": {"compaction": {"min_small_files": 0}}},
            "policy.compaction.min_small_files",
        ),
        (
            {"namespace": "ns", "name": "t", "policy": {"compaction": {"target": 5}}},
            "policy.compaction.target",
        ),
    ],
)
def test_malformed_registration_is_422_saying_what_to_fix(
    client: TestClient, body: dict, field: str | None
) -> None:
    r = client.post("/api/v1/tables", json=body)
    assert r.status_code == 422, r.text
    payload = r.json()
    if field is None:
        assert "invalid table" in payload["detail"]
    else:
        assert field in [e["field"] for e in payload["errors"]]


def test_register_read_update_delete(client: TestClient, rt: Runtime) -> None:
    table = append_batches(make_table(rt), 2)
    r = client.post(
        "/api/v1/tables",
        json={
            "namespace": "sales",
            "name": "orders",
            "policy": {"compaction": {"min_small_files": 50}},
        },
    )
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["policy"]["compaction"]["min_small_files"] == 50
    assert body["policy"]["compaction"]["target_file_size_bytes"] == 128 * 1024 * 1024
    assert body["current_snapshot_id"] == table.current_snapshot().snapshot_id

    assert (
        client.post("/api/v1/tables", json={"namespace": "sales", "name": "orders"}).status_code
        == 409
    )
    r = client.put(
        "/api/v1/tables/sales/orders/policy", json={"compaction": {"min_small_files": 20}}
    )
    assert r.status_code == 200 and r.json()["policy_version"] == 2
    assert (
        client.put(
            "/api/v1/tables/sales/orders/policy", json={"compaction": {"min_small_files": "many"}}
        ).status_code
        == 422
    )

    events = client.get("/api/v1/tables/sales/orders/events").json()["items"]
    assert [e["source"] for e in events] == ["register"]  # history is not replayed
    assert events[0]["decision"] == "no-action"

    assert client.get("/api/v1/tables/sales/missing").status_code == 404
    assert client.get("/api/v1/tables/bad-ns/x").status_code == 422
    assert client.delete("/api/v1/tables/sales/orders").status_code == 204
    assert client.get("/api/v1/tables/sales/orders").status_code == 404


def test_list_endpoints_paginate(client: TestClient, rt: Runtime) -> None:
    for i in range(5):
        make_table(rt, "pg", f"t{i}", partitioned=False)
        assert (
            client.post("/api/v1/tables", json={"namespace": "pg", "name": f"t{i}"}).status_code
            == 201
        )
    seen, cursor = [], None
    while True:
        params = {"limit": 2} | ({"cursor": cursor} if cursor else {})
        page = client.get("/api/v1/tables", params=params).json()
        seen += [t["name"] for t in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == [f"t{i}" for i in range(5)]
    assert client.get("/api/v1/tables", params={"limit": 0}).status_code == 422


def test_manual_task_then_cancel(client: TestClient, rt: Runtime) -> None:
    make_table(rt)
    client.post("/api/v1/tables", json={"namespace": "sales", "name": "orders"})
    r = client.post("/api/v1/tables/sales/orders/tasks", json={"kind": "compaction"})
    assert r.status_code == 201, r.text
    task = r.json()
    assert task["state"] == "pending" and task["trigger"]["source"] == "manual"
    again = client.post("/api/v1/tables/sales/orders/tasks", json={"kind": "compaction"})
    assert again.status_code == 409 and str(task["id"]) in again.json()["detail"]
    assert (
        client.post("/api/v1/tables/sales/orders/tasks", json={"kind": "vacuum"}).status_code == 422
    )

    listed = client.get("/api/v1/tasks", params={"table": "sales.orders", "state": "pending"})
    assert [t["id"] for t in listed.json()["items"]] == [task["id"]]
    assert client.get("/api/v1/tasks", params={"state": "bogus"}).status_code == 422
    assert client.get("/api/v1/tasks", params={"table": "nodots"}).status_code == 422

    r = client.post(f"/api/v1/tasks/{task['id']}/cancel")
    assert r.status_code == 200
    detail = r.json()
    assert detail["state"] == "cancelled"
    assert [(h["from_state"], h["to_state"]) for h in detail["history"]] == [
        (None, "pending"),
        ("pending", "cancelled"),
    ]
    assert client.post(f"/api/v1/tasks/{task['id']}/cancel").status_code == 409
    assert client.get("/api/v1/tasks/999999").status_code == 404
    assert client.post("/api/v1/tasks/999999/cancel").status_code == 404


def test_leader_endpoint_without_and_with_a_leader(client: TestClient, rt: Runtime) -> None:
    from lakewarden.db.locks import DBLocks
    from lakewarden.leader import acquire_or_renew

    assert client.get("/api/v1/scheduler/leader").json() == {
        "holder": None,
        "epoch": None,
        "acquired_at": None,
        "renewed_at": None,
        "expires_at": None,
        "live": False,
    }
    with rt.engine.begin() as conn:
        acquire_or_renew(conn, DBLocks.SCHEDULER_LEASE, "sched-a", 15)
    body = client.get("/api/v1/scheduler/leader").json()
    assert body["holder"] == "sched-a" and body["epoch"] == 1 and body["live"] is True


def test_namespace_defaults_are_inherited_and_table_settings_win(
    client: TestClient, rt: Runtime
) -> None:
    make_table(rt)
    r = client.put(
        "/api/v1/namespaces/sales/policy",
        json={"compaction": {"min_small_files": 40, "priority": 5}},
    )
    assert r.status_code == 200 and r.json()["version"] == 1
    r = client.post(
        "/api/v1/tables",
        json={"namespace": "sales", "name": "orders", "policy": {"compaction": {"priority": 9}}},
    )
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["policy_overrides"] == {"compaction": {"priority": 9}}
    assert body["policy"]["compaction"]["min_small_files"] == 40  # inherited
    assert body["policy"]["compaction"]["priority"] == 9  # the table's own setting wins
    client.put("/api/v1/namespaces/sales/policy", json={"compaction": {"min_small_files": 60}})
    got = client.get("/api/v1/tables/sales/orders").json()["policy"]["compaction"]
    assert got["min_small_files"] == 60 and got["priority"] == 9
    assert client.get("/api/v1/namespaces/sales/policy").json()["version"] == 2
    assert client.put("/api/v1/namespaces/bad-ns/policy", json={}).status_code == 422


def test_policy_columns_must_exist_and_layouts_must_not_conflict(
    client: TestClient, rt: Runtime
) -> None:
    make_table(rt)
    r = client.post(
        "/api/v1/tables",
        json={
            "namespace": "sales",
            "name": "orders",
            "policy": {"zorder": {"enabled": True, "columns": ["id", "nope"]}},
        },
    )
    assert r.status_code == 422 and "nope" in r.json()["detail"]
    r = client.post(
        "/api/v1/tables",
        json={
            "namespace": "sales",
            "name": "orders",
            "policy": {"zorder": {"enabled": True, "columns": ["id"]}},
        },
    )
    assert r.status_code == 422  # z-order needs two columns
    r = client.post(
        "/api/v1/tables",
        json={
            "namespace": "sales",
            "name": "orders",
            "policy": {"ttl": {"enabled": True, "column": "amount"}},
        },
    )
    assert r.status_code == 422 and "retention_days" in r.text
    assert (
        client.post(
            "/api/v1/tables",
            json={
                "namespace": "sales",
                "name": "orders",
                "policy": {"zorder": {"enabled": True, "columns": ["id", "amount"]}},
            },
        ).status_code
        == 201
    )
    # Namespace defaults that would break a managed table's policy are refused.
    r = client.put(
        "/api/v1/namespaces/sales/policy", json={"clustering": {"enabled": True, "columns": ["id"]}}
    )
    assert r.status_code == 422 and "sales.orders" in r.json()["detail"]
    assert client.get("/api/v1/namespaces/sales/policy").json()["policy"] == {}  # rolled back


@pytest.mark.parametrize(
    "method, path",
    [
        ("get", "/api/v1/tasks/109945152511238045696"),
        ("post", "/api/v1/tasks/2082849554240051256988151054336/cancel"),
        ("get", "/api/v1/tasks?cursor=80651118432589996277527610392576"),
        ("get", "/api/v1/tables?cursor=9223372036854775808"),
        ("get", "/api/v1/tasks/0"),
    ],
)
def test_ids_beyond_bigint_are_422_not_500(client: TestClient, method: str, path: str) -> None:
    # found by schemathesis: such ids reached Postgres and failed there
    assert getattr(client, method)(path).status_code == 422


def test_alert_ack_with_an_impossible_id(client: TestClient) -> None:
    r = client.post("/api/v1/alerts/-9223372036854775809/ack", json={"by": "x"})
    assert r.status_code == 422


def _store(rt: Runtime, sql: str, policy: dict) -> None:  # type: ignore[type-arg]
    """Write a policy the API would refuse today, as if stored before a bound was tightened."""
    with rt.engine.begin() as conn:
        conn.execute(text(sql), {"policy": json.dumps(policy)})


@pytest.mark.parametrize(
    "sql, policy, where",
    [
        (
            "UPDATE managed_tables SET policy = CAST(:policy AS jsonb) WHERE name = 'orders'",
            {"clean": {"interval_minutes": 1e13}},
            "clean.interval_minutes",
        ),
        (
            "INSERT INTO namespace_policies (catalog, namespace, policy, version) "
            "SELECT catalog, namespace, CAST(:policy AS jsonb), 1 FROM managed_tables",
            {"ttl": {"retention_days": 1e-9}},
            "ttl",
        ),
    ],
)
def test_a_stored_policy_that_no_longer_validates_is_reported_not_a_500(
    client: TestClient,
    rt: Runtime,
    sql: str,
    policy: dict,
    where: str,  # type: ignore[type-arg]
) -> None:
    table = append_batches(make_table(rt), 1)
    overrides = {"compaction": {"min_small_files": 30}}
    r = client.post(
        "/api/v1/tables", json={"namespace": "sales", "name": "orders", "policy": overrides}
    )
    assert r.status_code == 201 and r.json()["policy_error"] is None, r.text
    _store(rt, sql, policy)
    append_batches(table, 1)  # a commit to notify about: judging it needs the policy

    listed = client.get("/api/v1/tables")
    assert listed.status_code == 200, listed.text
    for body in (listed.json()["items"][0], client.get("/api/v1/tables/sales/orders").json()):
        assert body["policy"] is None
        assert f"{where}: " in body["policy_error"]
        assert "PUT /api/v1/tables/sales/orders/policy" in body["policy_error"]
        assert body["policy_overrides"] == (overrides if "namespace" in sql else policy)
    # What needs the policy says why it cannot go on (409), and nothing is written.
    for method, path in (
        ("GET", "/api/v1/tables/sales/orders/health"),
        ("GET", "/api/v1/tables/sales/orders/explain"),
        ("POST", "/api/v1/tables/sales/orders/tasks"),
    ):
        r = client.request(method, path, json={} if method == "POST" else None)
        assert r.status_code == 409, (path, r.text)
        assert f"{where}: " in r.json()["detail"]
    # A commit is still taken in (nothing lost), and its decision says why nothing is judged.
    r = client.post("/api/v1/events", json={"namespace": "sales", "name": "orders"})
    assert r.status_code == 202, r.text
    event = r.json()["event"]
    assert event["decision"] == "policy-invalid"
    assert f"{where}: " in event["decision_detail"]["reason"]
    assert client.get("/api/v1/tasks").json()["items"] == []
    # A valid policy put over it heals the table (a broken namespace default: fix that one).
    if "namespace" in sql:
        r = client.put("/api/v1/namespaces/sales/policy", json={})
    else:
        r = client.put("/api/v1/tables/sales/orders/policy", json=overrides)
    assert r.status_code == 200, r.text
    healed = client.get("/api/v1/tables/sales/orders").json()
    assert healed["policy_error"] is None
    assert healed["policy"]["compaction"]["min_small_files"] == 30
