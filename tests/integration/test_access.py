"""Who may do what, on the real API and Postgres: every route against every role and scope
(401 without a credential, 403 without the grant), destructive settings only for admins,
an audit row for every change, policy history restored, revocation across replicas, rate
limits. The table of routes below must list every route the app has: a new route cannot
ship without saying who may call it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from conftest import make_test_runtime
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from helpers import append_batches, bearer, issue_token, make_table
from sqlalchemy import text

from lakewarden.alerts.store import fire
from lakewarden.db.session import transaction
from lakewarden.runtime import Runtime
from services.api.app import create_app

NS, OTHER = "sales", "hr"


@dataclass(frozen=True)
class Rule:
    role: str | None  # None: public
    # "table": the grant must cover the sales table's catalog/namespace; "any": the role
    # anywhere will do (lists, filtered to the caller's scope); "fleet": the role on everything
    scope: str = "table"
    # A thing the path names by id (a task, an alert, a rule): a caller who may not see its
    # table gets the 404 of an id that does not exist, not a 403 naming its scope.
    by_id: bool = False


# (method, route path) -> who may call it. Keep in step with the routes: the test fails on
# a route missing here (or listed here and gone).
RULES: dict[tuple[str, str], Rule] = {
    ("GET", "/healthz"): Rule(None),
    ("GET", "/readyz"): Rule(None),
    ("GET", "/api/v1/scheduler/leader"): Rule("viewer", "any"),
    ("GET", "/api/v1/scheduler/regions"): Rule("viewer", "any"),
    ("POST", "/api/v1/catalogs/{catalog}/tables"): Rule("operator"),
    ("POST", "/api/v1/tables"): Rule("operator"),  # the default catalog's
    ("GET", "/api/v1/tables"): Rule("viewer", "any"),
    ("GET", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}"): Rule("viewer"),
    ("PUT", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/policy"): Rule("operator"),
    ("DELETE", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}"): Rule("admin"),
    ("GET", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/events"): Rule("viewer"),
    ("GET", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/policy/versions"): Rule("viewer"),
    (
        "POST",
        "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/policy/versions/{version}/restore",
    ): Rule("operator"),
    ("GET", "/api/v1/catalogs/{catalog}/namespaces/{namespace}/policy"): Rule("viewer"),
    ("PUT", "/api/v1/catalogs/{catalog}/namespaces/{namespace}/policy"): Rule("operator"),
    ("GET", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/health"): Rule("viewer"),
    ("GET", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/explain"): Rule("viewer"),
    ("GET", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/hudi"): Rule("viewer"),
    ("GET", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/delta"): Rule("viewer"),
    ("GET", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/partitions"): Rule("viewer"),
    ("POST", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/watermark"): Rule("operator"),
    ("POST", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/heartbeat"): Rule("operator"),
    ("GET", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/refs"): Rule("viewer"),
    ("POST", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/rollback"): Rule("admin"),
    ("POST", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/repair"): Rule("admin"),
    ("POST", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/revert"): Rule("admin"),
    ("POST", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/cherry-pick"): Rule("admin"),
    ("GET", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/publish"): Rule("viewer"),
    ("GET", "/api/v1/tasks"): Rule("viewer", "any"),
    ("GET", "/api/v1/tasks/{task_id}"): Rule("viewer", by_id=True),
    ("POST", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/tasks"): Rule("operator"),
    ("POST", "/api/v1/tasks/{task_id}/cancel"): Rule("operator", by_id=True),
    ("POST", "/api/v1/tasks/{task_id}/retry"): Rule("operator", by_id=True),
    ("POST", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/pause"): Rule("operator"),
    ("POST", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/resume"): Rule("operator"),
    ("POST", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/kinds/{kind}/resume"): Rule(
        "operator"
    ),
    ("GET", "/api/v1/maintenance"): Rule("viewer", "any"),
    # every table at once: the role on everything
    ("POST", "/api/v1/maintenance/freeze"): Rule("operator", "fleet"),
    ("POST", "/api/v1/maintenance/unfreeze"): Rule("operator", "fleet"),
    ("POST", "/api/v1/events"): Rule("operator"),
    # operator somewhere; each notification needs it on its table (refused item by item)
    ("POST", "/api/v1/events/batch"): Rule("operator", "any"),
    # operator somewhere, then on the namespace its base path names (no hudi catalog here: a
    # 404 for whoever may push; test_path_events_push checks the namespace's 403)
    ("POST", "/api/v1/events/hudi"): Rule("operator", "any"),
    ("GET", "/api/v1/alerts"): Rule("viewer", "any"),
    ("POST", "/api/v1/alerts/{alert_id}/ack"): Rule("operator", by_id=True),
    ("GET", "/metrics"): Rule("viewer", "fleet"),
    ("POST", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/blockers"): Rule("operator"),
    ("GET", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/blockers"): Rule("viewer"),
    ("DELETE", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/blockers/{blocker_id}"): Rule(
        "operator"
    ),
    ("POST", "/api/v1/tokens"): Rule("admin"),  # grants within the caller's: sales here
    ("GET", "/api/v1/tokens"): Rule("admin", "fleet"),
    ("DELETE", "/api/v1/tokens/{token_id}"): Rule("admin", "fleet"),
    ("GET", "/api/v1/audit"): Rule("admin", "any"),
    ("GET", "/api/v1/costs"): Rule("viewer", "any"),
    ("GET", "/api/v1/pools"): Rule("viewer", "any"),
    ("GET", "/api/v1/catalogs"): Rule("viewer", "any"),
    ("GET", "/api/v1/catalogs/{name}"): Rule("viewer", "any"),
    ("POST", "/api/v1/catalogs"): Rule("admin", "fleet"),
    ("PATCH", "/api/v1/catalogs/{name}"): Rule("admin", "fleet"),
    ("DELETE", "/api/v1/catalogs/{name}"): Rule("admin", "fleet"),
    ("GET", "/api/v1/catalogs/{catalog}/rules"): Rule("viewer", "any"),
    ("POST", "/api/v1/catalogs/{catalog}/rules"): Rule("admin"),
    ("GET", "/api/v1/catalogs/{catalog}/rules/{rule_id}"): Rule("viewer", by_id=True),
    ("PATCH", "/api/v1/catalogs/{catalog}/rules/{rule_id}"): Rule("admin", by_id=True),
    ("DELETE", "/api/v1/catalogs/{catalog}/rules/{rule_id}"): Rule("admin", by_id=True),
    ("PUT", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/opt-out"): Rule("admin"),
    ("DELETE", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/opt-out"): Rule("operator"),
}

ROLES = ("viewer", "operator", "admin")
RANK = {r: i for i, r in enumerate(ROLES)}
# scope label -> (grant suffix, covers the sales table, is everything)
SCOPES = {
    "everything": ("", True, True),
    "catalog": ("@lake", True, False),
    "namespace": (f"@lake/{NS}", True, False),
    "glob": ("@lake/sa*", True, False),
    "elsewhere": (f"@lake/{OTHER}", False, False),
}


def expected_allowed(rule: Rule, role: str, scope: str) -> bool:
    _, covers_table, everything = SCOPES[scope]
    if rule.role is None:
        return True
    if RANK[role] < RANK[rule.role]:
        return False
    return {"table": covers_table, "any": True, "fleet": everything}[rule.scope]


def app_routes(app: Any) -> set[tuple[str, str]]:
    """Every (method, path) the app serves, from its routers (not the OpenAPI, which a
    route can leave)."""

    def walk(routes: Any) -> Iterator[APIRoute]:
        for route in routes:
            if isinstance(route, APIRoute):
                yield route
            elif hasattr(route, "original_router"):  # FastAPI's included router
                yield from walk(route.original_router.routes)

    return {(m, r.path) for r in walk(app.routes) for m in r.methods or ()}


@pytest.fixture
def world(rt: Runtime) -> Iterator[dict[str, Any]]:
    """Two managed tables (sales.orders, hr.staff), a task, an alert, a blocker and a
    second policy version on sales.orders."""
    admin = issue_token(rt, "admin", name="setup")
    for ns, name in ((NS, "orders"), (OTHER, "staff"), (NS, "gone")):
        append_batches(make_table(rt, ns, name), 1)
    with TestClient(create_app(rt, background=False), raise_server_exceptions=False) as c:
        c.headers.update(bearer(admin))
        for ns, name in ((NS, "orders"), (OTHER, "staff"), (NS, "gone")):
            assert c.post("/api/v1/tables", json={"namespace": ns, "name": name}).status_code == 201
        r = c.put(f"/api/v1/tables/{NS}/orders/policy", json={"slo": {"min_score": 40}})
        assert r.status_code == 200, r.text
        task = c.post(f"/api/v1/tables/{NS}/orders/tasks", json={"kind": "compaction"})
        assert task.status_code == 201, task.text
        blocker = c.post(
            f"/api/v1/tables/{NS}/orders/blockers", json={"holder": "writer", "ttl_s": 600}
        )
        assert blocker.status_code == 201, blocker.text
        with transaction(rt.engine) as session:
            fire(
                session,
                "task_failed",
                f"{NS}.orders:compaction",
                severity="critical",
                summary="failed",
                details={"table": f"{NS}.orders"},
                runbook="-",
            )
        alerts = c.get("/api/v1/alerts").json()["items"]
        rule = c.post("/api/v1/catalogs/lake/rules", json={"namespace": NS})
        assert rule.status_code == 201, rule.text
        c.headers.pop("Authorization")
        yield {
            "admin": admin,
            "rule_id": rule.json()["id"],
            "client": c,
            "task_id": task.json()["id"],
            "blocker_id": blocker.json()["id"],
            "alert_id": alerts[0]["id"],
        }


def request_for(method: str, path: str, w: dict[str, Any], rt: Runtime) -> dict[str, Any]:
    """A request to the route that would succeed for a caller allowed to make it."""
    target = (
        path.replace("{catalog}", "lake")
        .replace("{namespace}", NS)
        .replace("{name}", _table_for(method, path))
        .replace("{task_id}", str(w["task_id"]))
        .replace("{blocker_id}", str(w["blocker_id"]))
        .replace("{alert_id}", str(w["alert_id"]))
        .replace("{version}", "1")
        .replace("{kind}", "compaction")
    )
    bodies: dict[tuple[str, str], Any] = {
        ("POST", "/api/v1/catalogs/{catalog}/tables"): {"namespace": NS, "name": "orders"},
        ("POST", "/api/v1/tables"): {"namespace": NS, "name": "orders"},
        ("PUT", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/policy"): {
            "slo": {"min_score": 45}
        },
        ("PUT", "/api/v1/catalogs/{catalog}/namespaces/{namespace}/policy"): {
            "slo": {"window_minutes": 30}
        },
        ("POST", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/tasks"): {
            "kind": "compaction"
        },
        ("POST", "/api/v1/events"): {"namespace": NS, "name": "orders"},
        ("POST", "/api/v1/events/batch"): {"events": [{"namespace": NS, "name": "orders"}]},
        ("POST", "/api/v1/events/hudi"): {"commitTime": "1", "basePath": f"/nowhere/{NS}/orders"},
        ("POST", "/api/v1/alerts/{alert_id}/ack"): {"by": "oncall"},
        ("POST", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/blockers"): {
            "holder": "w",
            "ttl_s": 60,
        },
        ("POST", "/api/v1/tokens"): {"name": "made", "grants": [f"viewer@lake/{NS}"]},
        ("POST", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/watermark"): {
            "watermark": "2026-01-01T00:00:00Z"
        },
        ("POST", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/heartbeat"): {
            "partition": "2026-01-01"
        },
        # no such tag: a 404 for whoever may roll back
        ("POST", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/rollback"): {
            "to_tag": "none"
        },
        # no such snapshot: a 404 (a dry run) for whoever may repair
        ("POST", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/repair"): {
            "partition": {"day": "2026-01-01"},
            "to_snapshot": 1,
        },
        ("POST", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/revert"): {
            "from_snapshot": 1,
            "to_snapshot": 2,
        },
        ("POST", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/cherry-pick"): {
            "snapshot": 1
        },
        # nothing answers there: a quick 422 for whoever may register it
        ("POST", "/api/v1/catalogs"): {
            "name": "other",
            "type": "jdbc",
            "properties": {"uri": "postgresql://127.0.0.1:1/none"},
        },
        ("PATCH", "/api/v1/catalogs/{name}"): {"poll_interval_s": 60},
        ("POST", "/api/v1/catalogs/{catalog}/rules"): {"namespace": NS},
        ("PATCH", "/api/v1/catalogs/{catalog}/rules/{rule_id}"): {},
    }
    if "{rule_id}" in path:  # a rule on sales; each DELETE removes a throwaway one
        rule = w["rule_id"] if method != "DELETE" else _throwaway_rule_id(w)
        target = target.replace("{rule_id}", str(rule))
    if path == "/api/v1/tokens/{token_id}":
        target = path.replace("{token_id}", str(_throwaway_token_id(rt)))
    return {"method": method, "url": target, "json": bodies.get((method, path))}


def _table_for(method: str, path: str) -> str:
    """sales.orders, but a table of its own for what takes one out of management."""
    if path.endswith("/opt-out"):
        return "optout"
    return "gone" if method == "DELETE" and path.endswith("{name}") else "orders"


def _throwaway_rule_id(w: dict[str, Any]) -> int:
    r = w["client"].post(
        "/api/v1/catalogs/lake/rules", json={"namespace": NS}, headers=bearer(w["admin"])
    )
    assert r.status_code == 201, r.text
    return int(r.json()["id"])


def _throwaway_token_id(rt: Runtime) -> int:
    issue_token(rt, "viewer", name="throwaway")
    with rt.engine.connect() as conn:
        return int(conn.execute(text("SELECT max(id) FROM api_tokens")).scalar_one())


def test_every_route_is_in_the_table(rt: Runtime) -> None:
    assert app_routes(create_app(rt, background=False)) == set(RULES), (
        "a route was added or removed: say in RULES who may call it"
    )


def test_every_role_and_scope_against_every_route(rt: Runtime, world: dict[str, Any]) -> None:
    client: TestClient = world["client"]
    tokens = {
        (role, scope): issue_token(rt, role + suffix, name=f"{role}-{scope}")
        for role in ROLES
        for scope, (suffix, _, _) in SCOPES.items()
    }
    wrong: list[str] = []
    mutations = 0
    for (method, path), rule in sorted(RULES.items()):
        # Refusals first: a later allowed call may change what the route finds (a 404).
        cases = sorted(tokens.items(), key=lambda kv: expected_allowed(rule, kv[0][0], kv[0][1]))
        req = request_for(method, path, world, rt)
        r = client.request(**req)
        mutations += method != "GET"
        if rule.role is not None and r.status_code != 401:
            wrong.append(f"{method} {path} without a credential: {r.status_code}, not 401")
        r = client.request(**req, headers=bearer("lw_not-a-real-token"))
        mutations += method != "GET"
        if rule.role is not None and r.status_code != 401:
            wrong.append(f"{method} {path} with an unknown token: {r.status_code}, not 401")
        for (role, scope), secret in cases:
            req = request_for(method, path, world, rt)
            r = client.request(**req, headers=bearer(secret))
            mutations += method != "GET"
            allowed = expected_allowed(rule, role, scope)
            if allowed and r.status_code in (401, 403):
                wrong.append(f"{method} {path} as {role} on {scope}: {r.status_code} {r.text}")
            if not allowed:
                hidden = rule.by_id and not SCOPES[scope][1]  # it may not even see the table
                if hidden and r.status_code != 404:  # test_api_leaks: as for a missing id
                    wrong.append(f"{method} {path} as {role} on {scope}: {r.status_code}, not 404")
                elif not hidden and r.status_code != 403:
                    wrong.append(f"{method} {path} as {role} on {scope}: {r.status_code}, not 403")
                elif not hidden and "needs the" not in r.json()["detail"]:
                    wrong.append(f"{method} {path}: a 403 that does not say what is missing")
            if r.status_code >= 500:
                wrong.append(f"{method} {path} as {role} on {scope}: {r.status_code}")
    assert not wrong, "\n".join(wrong)
    # Every mutating request, allowed or refused, left exactly one audit row.
    with rt.engine.connect() as conn:
        setup_rows = conn.execute(
            text("SELECT count(*) FROM audit_log WHERE actor = 'token:setup'")
        )
        total = conn.execute(text("SELECT count(*) FROM audit_log")).scalar_one()
    assert total - setup_rows.scalar_one() == mutations


def test_a_scoped_viewer_lists_only_its_namespace(rt: Runtime, world: dict[str, Any]) -> None:
    client: TestClient = world["client"]
    hr_viewer = bearer(issue_token(rt, f"viewer@lake/{OTHER}"))
    names = [
        t["namespace"] for t in client.get("/api/v1/tables", headers=hr_viewer).json()["items"]
    ]
    assert names == [OTHER]
    assert client.get("/api/v1/tasks", headers=hr_viewer).json()["items"] == []
    assert client.get("/api/v1/alerts", headers=hr_viewer).json()["items"] == []
    sales_viewer = bearer(issue_token(rt, f"viewer@lake/{NS}"))
    assert len(client.get("/api/v1/tasks", headers=sales_viewer).json()["items"]) == 1
    assert len(client.get("/api/v1/alerts", headers=sales_viewer).json()["items"]) == 1


TTL_ON = {"ttl": {"enabled": True, "column": "id", "retention_days": 30}}


@pytest.mark.parametrize(
    ("before", "change", "says"),
    [
        ({}, TTL_ON, "enables ttl"),
        (TTL_ON, {"ttl": {**TTL_ON["ttl"], "retention_days": 10}}, "lowers ttl.retention_days"),
        (TTL_ON, {"ttl": {**TTL_ON["ttl"], "max_fraction": 0.9}}, "raises ttl.max_fraction"),
        ({"clean": {"remove_orphans": False}}, {}, "enables clean.remove_orphans"),
        ({}, {"clean": {"orphan_min_age_hours": 24}}, "lowers clean.orphan_min_age_hours"),
    ],
)
def test_destructive_settings_need_admin_on_the_scope(
    rt: Runtime, world: dict[str, Any], before: dict[str, Any], change: dict[str, Any], says: str
) -> None:
    client: TestClient = world["client"]
    url = f"/api/v1/tables/{NS}/orders/policy"
    admin = bearer(issue_token(rt, f"admin@lake/{NS}"))
    assert client.put(url, json=before, headers=admin).status_code == 200
    operator = bearer(issue_token(rt, "operator"))  # operator everywhere is not enough
    other_admin = bearer(issue_token(rt, "operator", f"admin@lake/{OTHER}"))
    for who in (operator, other_admin):
        r = client.put(url, json=change, headers=who)
        assert r.status_code == 403, r.text
        assert says in r.json()["detail"] and "admin" in r.json()["detail"]
    # The same change through the namespace's defaults is refused too.
    r = client.put(f"/api/v1/namespaces/{NS}/policy", json=change, headers=operator)
    if change:
        assert r.status_code == 403, r.text
    assert client.put(url, json=change, headers=admin).status_code == 200
    # Going back is not destructive: an operator may.
    assert client.put(url, json=before, headers=operator).status_code == 200


def test_unregister_needs_admin_and_keeps_history(rt: Runtime, world: dict[str, Any]) -> None:
    client: TestClient = world["client"]
    url = f"/api/v1/tables/{NS}/orders"
    assert client.delete(url, headers=bearer(issue_token(rt, "operator"))).status_code == 403
    assert (
        client.delete(url, headers=bearer(issue_token(rt, f"admin@lake/{NS}"))).status_code == 204
    )
    with rt.engine.connect() as conn:
        kept = conn.execute(
            text(
                "SELECT m.retired_at IS NOT NULL, (SELECT count(*) FROM tasks t "
                "WHERE t.table_id = m.id) FROM managed_tables m WHERE m.name = 'orders'"
            )
        ).one()
    assert kept == (True, 1)


def test_a_policy_is_restored_from_its_history(rt: Runtime, world: dict[str, Any]) -> None:
    client: TestClient = world["client"]
    operator = bearer(issue_token(rt, "operator", name="restorer"))
    base = f"/api/v1/tables/{NS}/orders/policy"
    versions = client.get(base + "/versions", headers=operator).json()
    assert [v["version"] for v in versions] == [2, 1]
    assert versions[0]["policy"] == {"slo": {"min_score": 40}} and versions[0]["current"]
    assert versions[0]["author"] == "token:setup"
    r = client.post(base + "/versions/1/restore", headers=operator)
    assert r.status_code == 200, r.text
    assert r.json()["policy_version"] == 3 and r.json()["policy_overrides"] == {}
    latest = client.get(base + "/versions", headers=operator).json()[0]
    assert (latest["version"], latest["author"], latest["policy"]) == (3, "token:restorer", {})
    assert client.post(base + "/versions/9/restore", headers=operator).status_code == 404
    audit = client.get(
        "/api/v1/audit",
        params={"action": "restorePolicyVersion"},
        headers=bearer(issue_token(rt, "admin")),
    ).json()["items"]
    assert [(a["actor"], a["outcome"], a["status"]) for a in audit] == [
        ("token:restorer", "failed", 404),  # newest first
        ("token:restorer", "ok", 200),
    ]
    ok = next(a for a in audit if a["outcome"] == "ok")
    assert ok["change"]["policy"]["slo.min_score"] == [40, 50]


def test_the_audit_row_of_a_policy_change_has_the_diff(rt: Runtime, world: dict[str, Any]) -> None:
    client: TestClient = world["client"]
    admin = bearer(issue_token(rt, "admin", name="auditor"))
    r = client.put(f"/api/v1/tables/{NS}/orders/policy", json=TTL_ON, headers=admin)
    assert r.status_code == 200, r.text
    entry = client.get("/api/v1/audit", params={"actor": "token:auditor"}, headers=admin).json()
    row = entry["items"][0]
    assert (row["method"], row["action"], row["status"], row["outcome"]) == (
        "PUT",
        "putTablePolicy",
        200,
        "ok",
    )
    assert (row["catalog"], row["namespace"], row["target"]) == ("lake", NS, f"{NS}.orders")
    assert row["change"]["policy"]["ttl.enabled"] == [False, True]
    assert row["source"]
    with pytest.raises(Exception, match="append-only"), transaction(rt.engine) as session:
        session.execute(text("UPDATE audit_log SET actor = 'someone else'"))
    with pytest.raises(Exception, match="append-only"), transaction(rt.engine) as session:
        session.execute(text("DELETE FROM audit_log"))


def test_a_revoked_token_is_refused_by_another_replica_at_once(
    rt: Runtime, world: dict[str, Any], tmp_path: Any
) -> None:
    """Two API replicas, each with its own engine: no cache stands between a revocation
    and the next request."""
    one: TestClient = world["client"]
    rt2 = make_test_runtime(rt.db_url, tmp_path / "replica2", role="api")
    admin = bearer(issue_token(rt, "admin"))
    secret = issue_token(rt, "viewer", name="leaver")
    with TestClient(create_app(rt2, background=False)) as two:
        assert two.get("/api/v1/tables", headers=bearer(secret)).status_code == 200
        token_id = next(
            t["id"]
            for t in one.get("/api/v1/tokens", headers=admin).json()
            if t["name"] == "leaver"
        )
        revoked_at = time.monotonic()
        assert one.delete(f"/api/v1/tokens/{token_id}", headers=admin).status_code == 200
        r = two.get("/api/v1/tables", headers=bearer(secret))
        assert r.status_code == 401 and time.monotonic() - revoked_at < 2
    listed = one.get("/api/v1/tokens", params={"include_revoked": True}, headers=admin).json()
    leaver = next(t for t in listed if t["id"] == token_id)
    assert leaver["revoked_by"].startswith("token:") and leaver["last_used_at"] is not None
    assert "secret" not in leaver and secret not in str(listed)
    rt2.engine.dispose()


def test_a_token_is_shown_once_and_stored_hashed(rt: Runtime, world: dict[str, Any]) -> None:
    client: TestClient = world["client"]
    admin = bearer(issue_token(rt, "admin"))
    r = client.post(
        "/api/v1/tokens", json={"name": "ci", "grants": ["operator@lake/sales"]}, headers=admin
    )
    assert r.status_code == 201, r.text
    secret = r.json()["secret"]
    assert client.get(f"/api/v1/tables/{NS}/orders", headers=bearer(secret)).status_code == 200
    with rt.engine.connect() as conn:
        dump = str(conn.execute(text("SELECT * FROM api_tokens")).all())
    assert secret not in dump and secret[3:] not in dump
    # A scoped admin hands out only what it holds.
    scoped = bearer(issue_token(rt, f"admin@lake/{NS}"))
    r = client.post("/api/v1/tokens", json={"name": "x", "grants": ["admin"]}, headers=scoped)
    assert r.status_code == 403 and "handing out admin needs" in r.json()["detail"]
    r = client.post("/api/v1/tokens", json={"name": "x", "grants": ["root"]}, headers=admin)
    assert r.status_code == 422 and "unknown role" in r.json()["detail"]


def test_an_expired_token_is_refused(rt: Runtime, world: dict[str, Any]) -> None:
    client: TestClient = world["client"]
    secret = issue_token(rt, "viewer", name="old")
    with transaction(rt.engine) as session:
        session.execute(text("UPDATE api_tokens SET expires_at = now() WHERE name = 'old'"))
    r = client.get("/api/v1/tables", headers=bearer(secret))
    assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")


def test_mutations_are_rate_limited_per_token(
    db_url: str, tmp_path: Any, world: dict[str, Any]
) -> None:
    limited = make_test_runtime(db_url, tmp_path / "limited", mutations_per_minute=3)
    one, two = issue_token(limited, "operator"), issue_token(limited, "operator")
    url = f"/api/v1/tables/{NS}/orders/blockers"
    body = {"holder": "w", "ttl_s": 60}
    with TestClient(create_app(limited, background=False)) as c:
        for _ in range(3):
            assert c.post(url, json=body, headers=bearer(one)).status_code == 201
        r = c.post(url, json=body, headers=bearer(one))
        assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
        assert "at most 3 a minute" in r.json()["detail"]
        assert c.get(url, headers=bearer(one)).status_code == 200  # reads are not limited
        assert c.post(url, json=body, headers=bearer(two)).status_code == 201  # per token
    limited.engine.dispose()
