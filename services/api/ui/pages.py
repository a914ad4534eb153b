"""The dashboard's pages (GET). Each authenticates as any API call does (`authenticate`: the
bearer header or the login cookie), reads what the API answers through `Api`, and what no
route answers from `queries`, within the caller's grants. Action buttons are shown only
where the caller's grants allow the action (the API checks again when it is used)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, TypeVar
from urllib.parse import quote, urlencode

import anyio
from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, Response
from sqlalchemy.orm import Session

from lakewarden.auth.grants import Role
from lakewarden.db.models import ManagedTable
from lakewarden.db.session import transaction
from lakewarden.policy.model import KINDS
from lakewarden.runtime import Runtime
from lakewarden.tasks import costs, repo
from services.api.access import Access, authenticate
from services.api.deps import Id, RuntimeDep
from services.api.ui import queries, svg
from services.api.ui.api import Api
from services.api.ui.render import is_fragment, page

router = APIRouter()
T = TypeVar("T")

# The overview's filters, passed on to GET /api/v1/tables (which validates them).
TABLE_FILTERS = ("namespace", "catalog", "health_below", "has_open_tasks", "has_failed_tasks")
OPEN_STATES = ("pending", "planning", "planned", "running")
RETRYABLE_STATES = ("failed", "cancelled", "skipped")
READINESS_ROWS = 50  # the table page's readiness panel: the newest recorded partitions


def ui_access(request: Request, rt: RuntimeDep) -> Access:
    """The caller, authenticated as every API request is (`authenticate`), in a transaction
    that ends at once: the page then calls the API with the same credential, whose own
    authentication may update the token's row (last_used_at); a transaction of the page's
    held open meanwhile would hold that row, and the two would wait for each other."""
    with transaction(rt.engine) as session:
        return Access(request, authenticate(request, rt, session))


UiAccessDep = Annotated[Access, Depends(ui_access)]


async def _read(rt: Runtime, fn: Callable[[Session], T]) -> T:
    """`fn` in a short transaction of its own, off the event loop."""

    def run() -> T:
        with transaction(rt.engine) as session:
            return fn(session)

    return await anyio.to_thread.run_sync(run)


def _table_path(catalog: str, namespace: str, name: str) -> str:
    return f"/api/v1/catalogs/{quote(catalog)}/tables/{quote(namespace)}/{quote(name)}"


@router.get("/", response_class=HTMLResponse)
async def overview(request: Request, access: UiAccessDep, rt: RuntimeDep) -> HTMLResponse:
    """Tables worst health first (a page, filtered in the database), the backlog, the
    leader, the live processes and the open alerts."""
    api = Api(request)
    params = {k: v for k, v in request.query_params.items() if k in TABLE_FILTERS and v}
    params["sort"] = "health"
    params["limit"] = request.query_params.get("limit") or "50"
    if request.query_params.get("cursor"):
        params["cursor"] = request.query_params["cursor"]
    listing = await api.get("/api/v1/tables", params)
    now = datetime.now(UTC)
    ids = [t["id"] for t in listing["items"]]
    facts = await _read(rt, lambda s: queries.table_facts(s, ids, now))
    rows = [{**t, "facts": facts[t["id"]]} for t in listing["items"]]
    following = listing["next_cursor"]
    context: dict[str, Any] = {
        "rows": rows,
        "total": listing["total"],
        "filters": params,
        "next_url": "?" + urlencode({**params, "cursor": following}) if following else None,
        "failed_hours": int(queries.FAILED_WINDOW.total_seconds() // 3600),
    }
    if is_fragment(request):
        return page(request, "_tables.html", context)
    visible = access.scope(Role.viewer, ManagedTable.catalog, ManagedTable.namespace)
    live_s = 3 * rt.settings.heartbeat_interval_s
    backlog = await _read(rt, lambda s: queries.backlog(s, visible))
    procs = await _read(rt, lambda s: queries.processes(s, now, live_s))
    leader, regions, alerts, maintenance = await asyncio.gather(
        api.get_or_none("/api/v1/scheduler/leader"),
        api.get_or_none("/api/v1/scheduler/regions"),
        api.get_or_none("/api/v1/alerts?limit=20"),
        api.get_or_none("/api/v1/maintenance"),
    )
    kinds = sorted({k for k, _, _ in backlog})
    cells = {(k, s): n for k, s, n in backlog}
    context |= {
        # Only the states some task is in: four columns do not fit a card.
        "backlog": {
            "kinds": kinds,
            "states": [s for s in OPEN_STATES if any((k, s) in cells for k in kinds)],
            "cells": cells,
        },
        "leader": leader,
        # Each region's leader: a stale one (a data center's outage) stands out.
        "regions": regions or [],
        "processes": procs,
        "alerts": (alerts or {}).get("items", []),
        "maintenance": maintenance,
        "can_freeze": access.caller.may_everywhere(Role.operator),
    }
    return page(request, "overview.html", context)


@router.get("/t/{catalog}/{namespace}/{name}", response_class=HTMLResponse)
async def table_page(
    request: Request, catalog: str, namespace: str, name: str, access: UiAccessDep
) -> HTMLResponse:
    """One table: its policy (with where each value comes from, and its versions), the
    commit timeline with decisions, tasks with transitions and runs, blockers; health and
    explain load after the page (they read the table's metadata)."""
    api = Api(request)
    path = _table_path(catalog, namespace, name)
    table = await api.get(path)  # 404 / 403 as the API says
    versions, events, tasks, blockers, ns_policy, partitions, published = await asyncio.gather(
        api.get(f"{path}/policy/versions"),
        api.get(f"{path}/events", {"limit": 30}),
        api.get("/api/v1/tasks", {"table": f"{namespace}.{name}", "catalog": catalog, "limit": 20}),
        api.get(f"{path}/blockers"),
        api.get_or_none(f"/api/v1/catalogs/{quote(catalog)}/namespaces/{quote(namespace)}/policy"),
        api.get_or_none(f"{path}/partitions?limit={READINESS_ROWS}"),
        api.get_or_none(f"{path}/publish"),
    )
    details = await asyncio.gather(
        *(api.get(f"/api/v1/tasks/{t['id']}") for t in tasks["items"][:10])
    )
    context = {
        "table": table,
        "base": f"/ui/t/{quote(catalog)}/{quote(namespace)}/{quote(name)}",
        "policy_rows": policy_sources(
            table.get("policy") or {},
            table.get("policy_overrides") or {},
            (ns_policy or {}).get("policy") or {},
        ),
        "versions": versions,
        "events": events["items"],
        "tasks": list(details) + tasks["items"][10:],
        "blockers": blockers,
        # Shown when the policy enables readiness, or rows remain from when it did.
        "readiness": (partitions or {}).get("items", []),
        "readiness_enabled": ((table.get("policy") or {}).get("readiness") or {}).get("enabled"),
        # Shown when the policy enables write-audit-publish, or audits remain from when it did.
        "publish": published
        if published and (published["enabled"] or published["audits"])
        else None,
        "kinds": KINDS,
        "can_operate": access.caller.may(Role.operator, catalog, namespace),
        "can_admin": access.caller.may(Role.admin, catalog, namespace),
        "retryable": RETRYABLE_STATES,
        "open_states": OPEN_STATES,
    }
    return page(request, "table.html", context)


def _flatten(value: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, v in value.items():
        if isinstance(v, dict) and v:
            out |= _flatten(v, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = v
    return out


def policy_sources(
    effective: dict[str, Any], table: dict[str, Any], namespace: dict[str, Any]
) -> list[tuple[str, Any, str]]:
    """Each effective setting (dotted), its value, and where it comes from: the table's own
    settings, its namespace's defaults, or the built-in default."""
    own, inherited = _flatten(table), _flatten(namespace)
    return [
        (key, value, "table" if key in own else "namespace" if key in inherited else "default")
        for key, value in sorted(_flatten(effective).items())
    ]


@router.get("/t/{catalog}/{namespace}/{name}/health", response_class=HTMLResponse)
async def table_health(
    request: Request, catalog: str, namespace: str, name: str, access: UiAccessDep
) -> HTMLResponse:
    """The health panel: score and signals, the file-size histogram, the partitions' file
    counts and each partition's detail."""
    health = await Api(request).get(f"{_table_path(catalog, namespace, name)}/health")
    buckets = health.get("file_size_buckets") or []
    partitions = sorted(health.get("partitions") or [], key=lambda p: -p["data_files"])
    return page(
        request,
        "_health.html",
        {
            "health": health,
            "partitions": partitions,
            "histogram": svg.bar_chart(
                [
                    svg.Bar(b["label"], b["files"], f"{b['label']}: {b['files']} files")
                    for b in buckets
                ],
                "data files by size",
            )
            if buckets
            else None,
            "partition_plot": svg.bar_chart(
                [
                    svg.Bar(partition_label(p["partition"]), p["data_files"])
                    for p in partitions[:30]
                ],
                "data files per partition",
            )
            if partitions
            else None,
        },
    )


def partition_label(partition: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in partition.items()) or "(unpartitioned)"


@router.get("/t/{catalog}/{namespace}/{name}/explain", response_class=HTMLResponse)
async def table_explain(
    request: Request, catalog: str, namespace: str, name: str, access: UiAccessDep
) -> HTMLResponse:
    explain = await Api(request).get(f"{_table_path(catalog, namespace, name)}/explain")
    return page(request, "_explain.html", {"explain": explain})


@router.get("/t/{catalog}/{namespace}/{name}/refs", response_class=HTMLResponse)
async def table_refs(
    request: Request, catalog: str, namespace: str, name: str, access: UiAccessDep
) -> HTMLResponse:
    """Branches and tags (they read the table's metadata, so after the page)."""
    refs = await Api(request).get(f"{_table_path(catalog, namespace, name)}/refs")
    return page(request, "_refs.html", {"refs": refs})


@router.get("/tasks/{task_id}", response_class=HTMLResponse)
async def task_page(
    request: Request, task_id: Id, access: UiAccessDep, rt: RuntimeDep
) -> HTMLResponse:
    """A task: why it exists, its transitions (who, why, leader epoch) and every attempt's
    Spark run."""
    task = await Api(request).get(f"/api/v1/tasks/{task_id}")
    scope = await _read(rt, lambda s: repo.scope_of_task(s, task_id))
    catalog, namespace = scope or ("", "")
    ns, _, name = task["table"].rpartition(".")
    return page(
        request,
        "task.html",
        {
            "task": task,
            "catalog": catalog,
            "table_url": f"/ui/t/{quote(catalog)}/{quote(ns)}/{quote(name)}",
            "can_operate": bool(scope) and access.caller.may(Role.operator, catalog, namespace),
            "is_open": task["state"] in OPEN_STATES,
            "retryable": task["state"] in RETRYABLE_STATES,
        },
    )


@router.get("/alerts", response_class=HTMLResponse)
async def alerts_page(request: Request, access: UiAccessDep, rt: RuntimeDep) -> HTMLResponse:
    state = request.query_params.get("state") or None
    found = await Api(request).get("/api/v1/alerts", {"state": state} if state else None)
    default = rt.settings.catalog_name
    rows = []
    for alert in found["items"]:
        details = alert.get("details") or {}
        table = details.get("table")
        if isinstance(table, str) and "." in table:
            namespace = details.get("namespace") or table.split(".", 1)[0]
            allowed = access.caller.may(Role.operator, details.get("catalog") or default, namespace)
        else:
            allowed = access.caller.may_everywhere(Role.operator)
        rows.append({**alert, "can_ack": allowed and alert["state"] == "firing"})
    context = {"alerts": rows, "state": state, "actor": access.actor}
    return page(request, "alerts.html", context)


@router.get("/pools", response_class=HTMLResponse)
async def pools_page(request: Request, access: UiAccessDep) -> HTMLResponse:
    """Each pool's work and limit; an elastic pool's capacity against its bounds and why
    the leader last scaled it (GET /api/v1/pools)."""
    found = await Api(request).get("/api/v1/pools", {"decisions": 10})
    return page(request, "pools.html", {"pools": found["items"]})


@router.get("/trends", response_class=HTMLResponse)
async def trends_page(request: Request, access: UiAccessDep, rt: RuntimeDep) -> HTMLResponse:
    """Backlog, task latency and job duration per kind over the last 24 h."""
    visible = access.scope(Role.viewer, ManagedTable.catalog, ManagedTable.namespace)
    t = await _read(rt, lambda s: queries.trends(s, visible, datetime.now(UTC)))
    return page(
        request,
        "trends.html",
        {
            "backlog": svg.line_chart(t.backlog, t.start, t.end, "open tasks per kind", "tasks"),
            "latency": svg.line_chart(
                t.latency_s, t.start, t.end, "created to succeeded, per kind", "seconds"
            ),
            "jobs": svg.line_chart(
                t.job_s, t.start, t.end, "Spark job duration per kind", "seconds"
            ),
            "empty": not (t.backlog or t.latency_s or t.job_s),
        },
    )


COST_BARS = 15  # the plot's groups; the table lists them all


@router.get("/costs", response_class=HTMLResponse)
async def costs_page(
    request: Request, access: UiAccessDep, rt: RuntimeDep, by: str = "table", days: int = 7
) -> HTMLResponse:
    """What maintenance cost over the last `days`, per group (`lakewarden.tasks.costs`)."""
    group = by if by in costs.BY else "table"
    window = min(max(days, 1), 365)
    since = datetime.now(UTC) - timedelta(days=window)
    visible = access.scope(Role.viewer, ManagedTable.catalog, ManagedTable.namespace)
    rows, truncated = await _read(
        rt,
        lambda s: costs.rollup(s, group, since, visible),  # type: ignore[arg-type]
    )
    bars = [
        svg.Bar(r["key"], r["executor_cpu_s"], f"{r['key']}: {r['executor_cpu_s']:.1f} CPU s")
        for r in rows[:COST_BARS]
    ]
    context = {
        "rows": rows,
        "by": group,
        "days": window,
        "groups": costs.BY,
        "truncated": truncated,
        "plot": svg.bar_chart(bars, f"executor CPU seconds per {group}"),
        "csv": f"/ui/costs.csv?{urlencode({'by': group, 'days': window})}",
    }
    return page(request, "costs.html", context)


@router.get("/costs.csv")
async def costs_csv(
    access: UiAccessDep, rt: RuntimeDep, by: str = "table", days: int = 7
) -> Response:
    """The costs page's rows as CSV (the API's `format=csv`, for a logged-in browser)."""
    group = by if by in costs.BY else "table"
    since = datetime.now(UTC) - timedelta(days=min(max(days, 1), 365))
    visible = access.scope(Role.viewer, ManagedTable.catalog, ManagedTable.namespace)
    rows, _ = await _read(
        rt,
        lambda s: costs.rollup(s, group, since, visible),  # type: ignore[arg-type]
    )
    return Response(
        costs.as_csv(group, rows),
        media_type="text/csv",
        headers={"Content-Disposition": f'attachment; filename="costs-by-{group}.csv"'},
    )
