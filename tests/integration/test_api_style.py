"""One API style: every body is a model of services/api/schemas/ under its own short name;
operationIds read well; the core's refusals are answered by the handlers of
services/api/errors.py, not caught route by route; every list pages the same way."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from helpers import append_batches, make_table
from pydantic import BaseModel

import services.api
from lakewarden.alerts.store import fire
from lakewarden.db.session import transaction
from lakewarden.runtime import Runtime
from services.api import schemas
from services.api.app import create_app

API = Path(services.api.__file__).parent

# The operationIds are part of the contract: generated clients name their methods by them.
OPERATION_IDS = {
    ("GET", "/healthz"): "getLiveness",
    ("GET", "/readyz"): "getReadiness",
    ("GET", "/api/v1/scheduler/leader"): "getSchedulerLeader",
    ("GET", "/api/v1/catalogs"): "listCatalogs",
    ("POST", "/api/v1/catalogs"): "registerCatalog",
    ("GET", "/api/v1/catalogs/{name}"): "getCatalog",
    ("PATCH", "/api/v1/catalogs/{name}"): "updateCatalog",
    ("DELETE", "/api/v1/catalogs/{name}"): "removeCatalog",
    ("POST", "/api/v1/catalogs/{catalog}/tables"): "registerTable",
    ("GET", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}"): "getTable",
    ("DELETE", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}"): "unregisterTable",
    ("PUT", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/policy"): "putTablePolicy",
    ("GET", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/events"): "listTableEvents",
    (
        "GET",
        "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/policy/versions",
    ): "listPolicyVersions",
    (
        "POST",
        "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/policy/versions/{version}/restore",
    ): "restorePolicyVersion",
    ("GET", "/api/v1/catalogs/{catalog}/namespaces/{namespace}/policy"): "getNamespacePolicy",
    ("PUT", "/api/v1/catalogs/{catalog}/namespaces/{namespace}/policy"): "putNamespacePolicy",
    ("GET", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/health"): "getTableHealth",
    ("GET", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/explain"): "explainTable",
    ("GET", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/hudi"): "hudiTableHealth",
    ("GET", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/delta"): "deltaTableHealth",
    ("GET", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/refs"): "listTableRefs",
    ("POST", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/rollback"): "rollbackTable",
    ("POST", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/repair"): "repairPartition",
    ("POST", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/revert"): "revertRange",
    ("POST", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/cherry-pick"): "cherryPick",
    ("GET", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/publish"): "listPublishAudits",
    ("GET", "/api/v1/tasks"): "listTasks",
    ("GET", "/api/v1/tasks/{task_id}"): "getTask",
    ("POST", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/tasks"): "triggerTask",
    ("POST", "/api/v1/tasks/{task_id}/cancel"): "cancelTask",
    ("POST", "/api/v1/tasks/{task_id}/retry"): "retryTask",
    ("POST", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/pause"): "pauseTable",
    ("POST", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/resume"): "resumeTable",
    ("POST", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/kinds/{kind}/resume"): (
        "resumeKind"
    ),
    ("GET", "/api/v1/maintenance"): "getMaintenance",
    ("POST", "/api/v1/maintenance/freeze"): "freezeMaintenance",
    ("POST", "/api/v1/maintenance/unfreeze"): "unfreezeMaintenance",
    ("POST", "/api/v1/events"): "postEvent",
    ("POST", "/api/v1/events/batch"): "postEventsBatch",
    ("POST", "/api/v1/events/hudi"): "postHudiCommit",
    ("GET", "/api/v1/alerts"): "listAlerts",
    ("POST", "/api/v1/alerts/{alert_id}/ack"): "ackAlert",
    ("GET", "/metrics"): "getMetrics",
    ("POST", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/blockers"): "addBlocker",
    ("GET", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/blockers"): "listBlockers",
    (
        "DELETE",
        "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/blockers/{blocker_id}",
    ): "removeBlocker",
    ("POST", "/api/v1/tokens"): "createToken",
    ("GET", "/api/v1/tokens"): "listTokens",
    ("DELETE", "/api/v1/tokens/{token_id}"): "revokeToken",
    ("GET", "/api/v1/audit"): "listAudit",
    ("GET", "/api/v1/costs"): "listCosts",
    ("GET", "/api/v1/pools"): "listPools",
    ("GET", "/api/v1/scheduler/regions"): "listSchedulerRegions",
    ("GET", "/api/v1/catalogs/{catalog}/rules"): "listRules",
    ("POST", "/api/v1/catalogs/{catalog}/rules"): "createRule",
    ("GET", "/api/v1/catalogs/{catalog}/rules/{rule_id}"): "getRule",
    ("PATCH", "/api/v1/catalogs/{catalog}/rules/{rule_id}"): "updateRule",
    ("DELETE", "/api/v1/catalogs/{catalog}/rules/{rule_id}"): "deleteRule",
    ("PUT", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/opt-out"): "optOutTable",
    ("DELETE", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/opt-out"): "clearTableOptOut",
    ("GET", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/partitions"): "listPartitions",
    ("POST", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/watermark"): "postWatermark",
    ("POST", "/api/v1/catalogs/{catalog}/tables/{namespace}/{name}/heartbeat"): "postHeartbeat",
    ("POST", "/api/v1/tables"): "registerDefaultCatalogTable",
    ("GET", "/api/v1/tables"): "listTables",
}
PAGED = {"listTables", "listTableEvents", "listTasks", "listAlerts", "listAudit", "listPartitions"}


@pytest.fixture(scope="module")
def spec() -> dict[str, Any]:
    return create_app(Runtime.__new__(Runtime), background=False).openapi()


def _operations(spec: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in spec["paths"].items():
        for method, op in item.items():
            yield method.upper(), path, op


def test_operation_ids_are_camel_case_unique_and_stable(spec: dict[str, Any]) -> None:
    ids = {(method, path): op["operationId"] for method, path, op in _operations(spec)}
    assert all(re.fullmatch(r"[a-z]+(?:[A-Z][a-z]*)*", i) for i in ids.values()), ids
    assert len(set(ids.values())) == len(ids)
    assert ids == OPERATION_IDS


def test_component_names_are_short_and_each_is_a_schemas_model(spec: dict[str, Any]) -> None:
    names = set(spec["components"]["schemas"])
    assert all(re.fullmatch(r"[A-Z][A-Za-z]*", n) for n in names), sorted(names)
    # the policy models are request bodies of their own module (lakewarden.policy.model)
    policy = importlib.import_module("lakewarden.policy.model")
    assert {n for n in names if not hasattr(schemas, n)} <= set(vars(policy))
    assert "BlockerOut" in names and "TablePage" in names


def test_every_api_model_lives_in_the_schemas_module() -> None:
    elsewhere = []
    for info in pkgutil.walk_packages([str(API)], "services.api."):
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if (
                inspect.isclass(obj)
                and issubclass(obj, BaseModel)
                and obj.__module__ == info.name
                and not info.name.startswith(schemas.__name__ + ".")
            ):
                elsewhere.append(f"{info.name}.{name}")
    assert elsewhere == []


# Where a refusal is answered item by item (a batch: one bad item must not refuse the
# others), by the function named here, with the status the handler would give.
PER_ITEM = {("routes/events.py", "_table_of")}


def test_routes_leave_the_core_refusals_to_the_handlers() -> None:
    """No route or dependency catches what services/api/errors.py answers."""
    handled = {"InvalidIdentifier", "NoSuchTableError", "TransitionRejected"}
    caught = []
    for path in sorted(API.rglob("*.py")):
        tree = ast.parse(path.read_text())
        allowed = {
            id(node)
            for fn in ast.walk(tree)
            if isinstance(fn, ast.FunctionDef) and (str(path.relative_to(API)), fn.name) in PER_ITEM
            for node in ast.walk(fn)
        }
        for node in ast.walk(tree):
            if id(node) in allowed:
                continue
            if isinstance(node, ast.ExceptHandler) and node.type is not None:
                names = {
                    n.attr if isinstance(n, ast.Attribute) else getattr(n, "id", "")
                    for n in ast.walk(node.type)
                }
                if names & handled:
                    caught.append(f"{path.relative_to(API)}:{node.lineno}")
    assert caught == []


def test_the_handlers_answer_what_to_fix_with_the_status_of_old(
    client: TestClient, rt: Runtime
) -> None:
    make_table(rt, "sec", "t1", partitioned=False)
    assert client.post("/api/v1/tables", json={"namespace": "sec", "name": "t1"}).status_code == 201
    # InvalidIdentifier: 422 with what a valid name looks like, from a path, a body, a query
    for r in (
        client.get("/api/v1/tables/sec/9bad"),
        client.post("/api/v1/tables", json={"namespace": "sec", "name": "9bad"}),
        client.post("/api/v1/events", json={"namespace": "9bad", "name": "t1"}),
    ):
        assert r.status_code == 422, r.text
        assert "letters, digits and underscores" in r.json()["detail"]
    r = client.get("/api/v1/tasks", params={"table": "nodots"})
    assert r.status_code == 422 and "namespace.name" in r.json()["detail"]
    # NoSuchTableError: 404 naming the catalog and the table
    r = client.post("/api/v1/tables", json={"namespace": "sec", "name": "missing"})
    assert r.status_code == 404
    assert r.json()["detail"] == f"catalog {rt.settings.catalog_name!r} has no table sec.missing"
    rt.catalog.drop_table(("sec", "t1"))
    r = client.post("/api/v1/events", json={"namespace": "sec", "name": "t1"})
    assert r.status_code == 404 and "has no table sec.t1" in r.json()["detail"]
    # ... but a managed table gone from the catalog is a 409 where it is read
    r = client.get("/api/v1/tables/sec/t1/health")
    assert r.status_code == 409 and "gone from the catalog" in r.json()["detail"]
    # TransitionRejected: 404 no such task, 409 it already ended
    r = client.post("/api/v1/tasks/424242/cancel")
    assert r.status_code == 404 and r.json()["detail"] == "task 424242 does not exist"
    make_table(rt, "sec", "t2", partitioned=False)
    client.post("/api/v1/tables", json={"namespace": "sec", "name": "t2"})
    task = client.post("/api/v1/tables/sec/t2/tasks", json={"kind": "compaction"}).json()
    assert client.post(f"/api/v1/tasks/{task['id']}/cancel").status_code == 200
    r = client.post(f"/api/v1/tasks/{task['id']}/cancel")
    assert r.status_code == 409
    assert r.json()["detail"] == f"task {task['id']} already ended (cancelled)"


def test_every_list_pages_the_same_way(spec: dict[str, Any]) -> None:
    for _, _, op in _operations(spec):
        ok = op["responses"].get("200", op["responses"].get("201", {}))
        ref = ok.get("content", {}).get("application/json", {}).get("schema", {}).get("$ref", "")
        params = {p["name"]: p["schema"] for p in op.get("parameters", [])}
        if op["operationId"] in PAGED:
            assert ref.endswith("Page"), op["operationId"]
            assert params["limit"] == params["limit"] | {"minimum": 1, "maximum": 500}
            assert "cursor" in params
            page = spec["components"]["schemas"][ref.rsplit("/", 1)[1]]
            # the tables list also says how many match its filters
            assert set(page["properties"]) - {"total"} == {"items", "next_cursor"}
        else:
            assert not ref.endswith("Page") and "cursor" not in params, op["operationId"]


def _walk(client: TestClient, path: str, params: dict[str, str]) -> list[int]:
    """Every id of a list, page by page (two at a time)."""
    ids: list[int] = []
    cursor = None
    while True:
        more: dict[str, int] = {} if cursor is None else {"cursor": cursor}
        page = client.get(path, params=params | {"limit": 2} | more).json()
        assert len(page["items"]) <= 2
        ids += [item["id"] for item in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            return ids


def test_paging_through_each_list_gives_every_item_once(client: TestClient, rt: Runtime) -> None:
    for i in range(5):
        table = make_table(rt, "pg", f"t{i}", partitioned=False)
        assert client.post("/api/v1/tables", json={"namespace": "pg", "name": f"t{i}"}).is_success
        for kind in ("compaction", "clean"):
            client.post(f"/api/v1/tables/pg/t{i}/tasks", json={"kind": kind})
    append_batches(table, 4)  # four commits of pg.t4, reported
    assert client.post("/api/v1/events", json={"namespace": "pg", "name": "t4"}).is_success
    with transaction(rt.engine) as s:
        for i in range(5):
            fire(s, "test", f"k{i}", severity="warning", summary="s", details={}, runbook="r")

    lists: list[tuple[str, dict[str, str], bool]] = [  # path, filters, newest first
        ("/api/v1/tables", {}, False),
        ("/api/v1/tables/pg/t4/events", {}, True),
        ("/api/v1/tasks", {}, True),
        ("/api/v1/tasks", {"kind": "compaction", "state": "pending"}, True),
        ("/api/v1/alerts", {}, True),
        ("/api/v1/audit", {}, True),  # the changes above, each audited
        ("/api/v1/audit", {"action": "triggerTask"}, True),
    ]
    for path, params, newest_first in lists:
        r = client.get(path, params=params | {"limit": "500"})
        everything = [item["id"] for item in r.json()["items"]]
        assert len(everything) >= 3, (path, params)
        assert everything == sorted(everything, reverse=newest_first), (path, params)
        assert _walk(client, path, params) == everything, (path, params)
