"""GET /api/v1/tables: filters, both sorts paged across pages, the total, bad input (422
saying what to fix), and a scoped viewer seeing and counting only its tables. Rows are
inserted directly: a listing reads managed_tables, never the catalog."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from fastapi.testclient import TestClient
from helpers import bearer, issue_token

from lakewarden.db.models import ManagedTable, NamespacePolicy, Task
from lakewarden.db.session import transaction
from lakewarden.runtime import Runtime
from lakewarden.states import TaskState
from lakewarden.tables import effective_policy_for

OFF = {"compaction": {"enabled": False}}
ON = {"compaction": {"enabled": True}}

FAILED, OK, SKIPPED, CANCELLED = (
    TaskState.FAILED,
    TaskState.SUCCEEDED,
    TaskState.SKIPPED,
    TaskState.CANCELLED,
)
C = "compaction"

# (catalog, namespace, name, health_score, own policy, [(kind, state), ...] oldest first)
TABLES: list[tuple[str, str, str, int | None, dict[str, Any], list[tuple[str, TaskState]]]] = [
    ("lake", "sales", "orders", 80, {}, [(C, TaskState.PENDING)]),
    # failed, then a later success of the kind: no longer failing
    ("lake", "sales.eu", "fr", 10, OFF, [(C, FAILED), (C, OK)]),
    # failed, then cancelled: a cancellation says nothing, so still failing
    ("lake", "sales.eu", "de", None, {}, [("clean", FAILED), ("clean", CANCELLED)]),
    # succeeded, then failed: failing; its namespace's defaults disable compaction
    ("lake", "hr", "staff", 40, {}, [(C, OK), (C, FAILED)]),
    # failed, then skipped (ran, nothing to do): not failing; enables what hr disables
    ("lake", "hr", "pay", 10, ON, [(C, FAILED), (C, SKIPPED), ("clean", OK)]),
    ("other", "sales", "orders", 95, {}, []),
    ("lake", "ops", "new", None, {}, []),  # never measured, as `de`
]
TTL = {"ttl": {"enabled": True, "column": "id", "retention_days": 30}}
NAMESPACE_DEFAULTS: list[tuple[str, str, dict[str, Any]]] = [
    ("lake", "hr", OFF),
    ("lake", "ops", TTL),
]
ALL = ["orders", "fr", "de", "staff", "pay", "other:orders", "new"]


def _label(item: dict[str, Any]) -> str:
    return item["name"] if item["catalog"] == "lake" else f"{item['catalog']}:{item['name']}"


@pytest.fixture
def fleet(rt: Runtime) -> None:
    with transaction(rt.engine) as s:
        for catalog, namespace, name, health, policy, tasks in TABLES:
            row = ManagedTable(
                catalog=catalog, namespace=namespace, name=name, policy=policy, health_score=health
            )
            s.add(row)
            s.flush()
            for kind, state in tasks:
                s.add(Task(table_id=row.id, kind=kind, state=state, trigger={}))
                s.flush()  # ids in this order: "later" is a larger id
        # unregistered: never listed, never counted
        s.add(
            ManagedTable(
                catalog="lake",
                namespace="sales",
                name="gone",
                policy={},
                health_score=0,
                retired_at=datetime.now(UTC),
            )
        )
        for catalog, namespace, policy in NAMESPACE_DEFAULTS:
            s.add(NamespacePolicy(catalog=catalog, namespace=namespace, policy=policy))


def _list(client: TestClient, **params: Any) -> dict[str, Any]:
    r = client.get("/api/v1/tables", params=params)
    assert r.status_code == 200, r.text
    return r.json()


def _walk(client: TestClient, limit: int = 2, **params: Any) -> list[str]:
    """Every table of the list, `limit` per page; each page carries the same total."""
    seen: list[str] = []
    cursor = None
    totals = set()
    while True:
        page = _list(client, limit=limit, **params, **({"cursor": cursor} if cursor else {}))
        assert len(page["items"]) <= limit
        seen += [_label(t) for t in page["items"]]
        totals.add(page["total"])
        cursor = page["next_cursor"]
        if cursor is None:
            assert totals == {len(seen)}
            return seen


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({}, ALL),
        ({"catalog": "other"}, ["other:orders"]),
        ({"catalog": "nope"}, []),
        ({"namespace": "sales.*"}, ["fr", "de"]),  # not `sales` itself: the dot is literal
        ({"namespace": "sales*"}, ["orders", "fr", "de", "other:orders"]),
        ({"namespace": "s?les"}, ["orders", "other:orders"]),
        ({"namespace": "sales_eu"}, []),  # `_` is a character, not LIKE's wildcard
        ({"health_below": 40}, ["fr", "pay"]),  # not 40 itself, not the unmeasured
        ({"health_below": 0}, []),
        ({"has_open_tasks": "true"}, ["orders"]),
        ({"has_open_tasks": "false"}, ["fr", "de", "staff", "pay", "other:orders", "new"]),
        ({"has_failed_tasks": "true"}, ["de", "staff"]),
        ({"has_failed_tasks": "false"}, ["orders", "fr", "pay", "other:orders", "new"]),
        # table settings over namespace defaults over the built-in default (enabled)
        ({"kind_enabled": "compaction"}, ["orders", "de", "pay", "other:orders", "new"]),
        ({"kind_enabled": "zorder"}, []),  # off by default
        ({"kind_enabled": "ttl"}, ["new"]),  # off by default, on in its namespace
        ({"kind_enabled": "clean"}, ALL),
        ({"namespace": "sales*", "health_below": 50, "catalog": "lake"}, ["fr"]),
        ({"catalog": "lake", "has_failed_tasks": "true", "kind_enabled": "compaction"}, ["de"]),
    ],
)
def test_each_filter_and_the_total(
    client: TestClient, fleet: None, params: dict[str, Any], expected: list[str]
) -> None:
    page = _list(client, **params)
    assert [_label(t) for t in page["items"]] == expected
    assert page["total"] == len(expected)
    assert page["next_cursor"] is None


@pytest.mark.parametrize("limit", [1, 2, 3, 5, 6, 7, 8])
def test_both_sorts_page_across_pages(client: TestClient, fleet: None, limit: int) -> None:
    """Pages of every size, so that one ends exactly where the measured tables end (5), one
    crosses into the never measured, and one pages within them (1)."""
    assert _walk(client, limit) == ALL
    assert _walk(client, limit, sort="registered") == ALL
    # worst first, ties by registration, the never measured last (by registration)
    worst_first = ["fr", "pay", "staff", "orders", "other:orders", "de", "new"]
    assert _walk(client, limit, sort="health") == worst_first
    sales = ["fr", "orders", "other:orders", "de"]
    assert _walk(client, limit, sort="health", namespace="sales*") == sales
    assert _walk(client, limit, sort="health", has_open_tasks="false", health_below=90) == [
        "fr",
        "pay",
        "staff",
    ]
    assert _walk(client, limit, sort="health", has_failed_tasks="true") == ["staff", "de"]


def test_a_cursor_works_only_with_its_own_sort(client: TestClient, fleet: None) -> None:
    health = _list(client, sort="health", limit=2)["next_cursor"]
    registered = _list(client, limit=2)["next_cursor"]
    assert health and registered
    r = client.get("/api/v1/tables", params={"cursor": health})
    assert r.status_code == 422
    assert "sort=health" in r.json()["detail"]
    r = client.get("/api/v1/tables", params={"cursor": registered, "sort": "health"})
    assert r.status_code == 422
    assert "sort=registered" in r.json()["detail"]
    # the registered order's cursor is the plain id, as every other list's
    assert registered.isdigit()


@pytest.mark.parametrize(
    ("params", "says"),
    [
        ({"kind_enabled": "vacuum"}, "compaction"),
        ({"namespace": "sales[0]"}, "glob"),
        ({"namespace": ""}, "glob"),
        ({"namespace": "sales%"}, "glob"),
        ({"health_below": 101}, "100"),
        ({"health_below": -1}, "0"),
        ({"health_below": "low"}, "integer"),
        ({"has_open_tasks": "maybe"}, "boolean"),
        ({"sort": "name"}, "registered"),
        ({"limit": 501}, "500"),
        ({"namspace": "sales"}, "namspace"),  # a misspelt filter is not ignored
        ({"cursor": "abc"}, "next_cursor"),
        ({"cursor": "9223372036854775808"}, "next_cursor"),
        ({"cursor": "health:1", "sort": "health"}, "next_cursor"),
        ({"cursor": "health:1:x", "sort": "health"}, "next_cursor"),
        ({"cursor": "1_000"}, "next_cursor"),
    ],
)
def test_bad_input_is_a_422_that_says_what_to_fix(
    client: TestClient, fleet: None, params: dict[str, Any], says: str
) -> None:
    r = client.get("/api/v1/tables", params=params)
    assert r.status_code == 422, r.text
    assert says in r.text


def test_a_scoped_viewer_sees_and_counts_only_its_tables(
    rt: Runtime, client: TestClient, fleet: None
) -> None:
    hr = bearer(issue_token(rt, "viewer@lake/hr", name="hr"))
    page = client.get("/api/v1/tables", headers=hr).json()
    assert ([_label(t) for t in page["items"]], page["total"]) == (["staff", "pay"], 2)
    page = client.get("/api/v1/tables", params={"sort": "health", "limit": 1}, headers=hr).json()
    assert ([_label(t) for t in page["items"]], page["total"]) == (["pay"], 2)
    page = client.get("/api/v1/tables", params={"namespace": "sales*"}, headers=hr).json()
    assert (page["items"], page["total"]) == ([], 0)
    other = bearer(issue_token(rt, "viewer@other", name="other"))
    page = client.get("/api/v1/tables", params={"namespace": "*"}, headers=other).json()
    assert ([_label(t) for t in page["items"]], page["total"]) == (["other:orders"], 1)


def test_each_listed_table_has_its_own_effective_policy(
    rt: Runtime, client: TestClient, fleet: None
) -> None:
    """The list reads the namespaces' defaults once per page and validates each distinct
    policy once: each table still gets what `effective_policy_for` gives it alone, and a
    stored policy that no longer validates is reported on its own row only."""
    with transaction(rt.engine) as s:
        s.add(  # min_small_files must be at least 2: stored before a bound was tightened
            ManagedTable(
                catalog="lake",
                namespace="hr",
                name="old",
                policy={"compaction": {"min_small_files": 1}},
            )
        )
    items = _list(client, limit=500)["items"]
    assert len(items) == len(ALL) + 1
    with transaction(rt.engine) as s:
        for item in items:
            row = s.get(ManagedTable, item["id"])
            assert row is not None
            if row.name == "old":
                assert item["policy"] is None
                assert "hr.old" in item["policy_error"]
                assert "min_small_files" in item["policy_error"]
                continue
            assert item["policy"] == effective_policy_for(s, row).model_dump(mode="json")
            assert item["policy_error"] is None
            assert item["policy_overrides"] == row.policy
    by_name = {_label(t): t for t in items}
    assert by_name["staff"]["policy"]["compaction"]["enabled"] is False  # hr's default
    assert by_name["pay"]["policy"]["compaction"]["enabled"] is True  # its own setting
