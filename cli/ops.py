"""The operator's commands: `lakewarden tables`, `task 42`, `cancel 42`, `pause sales.orders`,
`check`… Each is one or a few calls of the REST API (cli/client.py), printed as a
table for people or as the API's own JSON/YAML for scripts (`-o`, cli/output.py).

Where: `--url` or LAKEWARDEN_URL (default: this machine's API port from the settings);
who: `--token` or LAKEWARDEN_TOKEN. A refusal prints the API's message and exits 1.
"""

from __future__ import annotations

import getpass
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import quote

import typer

from cli.client import ApiError, Client, default_url, table_path
from cli.output import Format, emit, fields, table
from lakewarden.settings import DEFAULT_REGION

if TYPE_CHECKING:
    from rich.console import RenderableType


@dataclass(frozen=True)
class Target:
    """Which API the commands call, and as whom (set by the CLI's top-level options)."""

    url: str | None = None
    token: str | None = None


Output = Annotated[
    Format, typer.Option("--output", "-o", help="table (for people), json or yaml (for scripts)")
]
Catalog = Annotated[
    str | None,
    typer.Option("--catalog", help="the table's catalog (default: the API's default catalog)"),
]
TaskId = Annotated[int, typer.Argument(metavar="ID", help="the task's id")]


def _table_name(value: str | None) -> str | None:
    """NS.NAME checked before any call (the API checks each level's characters)."""
    if value is not None and not all(split_name(value)):
        raise typer.BadParameter(f"{value!r}: write the table as NS.NAME, e.g. sales.orders")
    return value


TableName = Annotated[
    str, typer.Argument(metavar="NS.NAME", help="namespace.name", callback=_table_name)
]


def split_name(dotted: str) -> tuple[str, str]:
    namespace, _, name = dotted.rpartition(".")
    return namespace, name


@contextmanager
def calling(ctx: typer.Context) -> Iterator[Client]:
    """A client of the API the top-level options name; a failed call ends the command with
    the API's message (exit 1), never a traceback."""
    target = ctx.find_object(Target) or Target()
    url = target.url
    if not url:
        from lakewarden.settings import get_settings

        url = default_url(get_settings().api_port)
    client = Client(url, target.token)
    try:
        yield client
    except ApiError as exc:
        typer.echo(f"lakewarden: {exc}", err=True)
        raise typer.Exit(1) from None
    finally:
        client.close()


def register(app: typer.Typer) -> None:
    """Add the operator's commands to the CLI."""
    for command in (
        tables,
        table_cmd,
        tasks,
        task,
        cancel,
        retry,
        trigger,
        pause,
        resume,
        costs,
        pools,
        regions,
    ):
        app.command(name=command.__name__.removesuffix("_cmd"))(command)
    app.add_typer(alerts_app, name="alerts")
    app.add_typer(policy_app, name="policy")


# --- tables ------------------------------------------------------------------------------


def tables(
    ctx: typer.Context,
    worst: Annotated[bool, typer.Option("--worst", help="worst health first")] = False,
    namespace: Annotated[
        str | None, typer.Option("--namespace", help="a glob, e.g. 'sales*' ('*' spans dots)")
    ] = None,
    catalog: Annotated[str | None, typer.Option("--catalog", help="this catalog only")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=500)] = 50,
    output: Output = Format.table,
) -> None:
    """Managed tables, with their last health score."""
    with calling(ctx) as api:
        page = api.get(
            "/api/v1/tables",
            sort="health" if worst else "registered",
            namespace=namespace,
            catalog=catalog,
            limit=limit,
        )
    emit(page, output, _tables_view)


def _tables_view(page: dict[str, Any]) -> Iterable[RenderableType]:
    rows = [
        (
            f"{t['namespace']}.{t['name']}",
            t["catalog"],
            t.get("health_score"),
            _signals(t.get("health_signals")),
            t.get("health_measured_at"),
            _paused(t.get("paused")),
            ", ".join(h["kind"] for h in t.get("held") or []) or None,
            t["policy_version"],
            t["managed_by"],
        )
        for t in page["items"]
    ]
    columns = (
        "table",
        "catalog",
        "health",
        "signals firing",
        "measured",
        "paused",
        "held kinds",
        "policy",
        "managed by",
    )
    yield table(None, columns, rows)
    yield f"{len(rows)} of {page['total']} tables" + (
        " (more: raise --limit, or narrow with --namespace)" if page.get("next_cursor") else ""
    )


def _signals(signals: list[dict[str, Any]] | None) -> str | None:
    """The signals that fired, one short label each (`lakewarden table` gives their reasons)."""
    return ", ".join(f"{s['kind']}: {s['metric'].replace('_', ' ')}" for s in signals or []) or None


def _format(version: int | None, explained: dict[str, Any] | None) -> str | None:
    """`Iceberg v3`, and what lakewarden refuses on it."""
    if version is None:
        return None
    refused = (explained or {}).get("refused") or []
    return f"Iceberg v{version}" + (f" (refused: {', '.join(refused)})" if refused else "")


def _paused(hold: dict[str, Any] | None) -> str | None:
    if not hold:
        return None
    return f"by {hold['by']}" + (f": {hold['reason']}" if hold.get("reason") else "")


def table_cmd(
    ctx: typer.Context, name: TableName, catalog: Catalog = None, output: Output = Format.table
) -> None:
    """One table: its health (score, signals, files) and explain (what would run now, why)."""
    path = table_path(catalog, *split_name(name))
    with calling(ctx) as api:
        data = {
            "table": api.get(path),
            "health": api.get(f"{path}/health"),
            "explain": api.get(f"{path}/explain"),
        }
    emit(data, output, _table_view)


def _size(n: int) -> str:
    from rich.filesize import decimal

    return str(decimal(n))


def _buckets(buckets: list[dict[str, Any]] | None) -> str | None:
    """The file-size histogram in a line: the buckets that hold files."""
    held = [f"{b['label']}: {b['files']}" for b in buckets or [] if b["files"]]
    return ", ".join(held) or None


def _table_view(data: dict[str, Any]) -> Iterable[RenderableType]:
    t, h, x = data["table"], data["health"], data["explain"]
    deletes = h["delete_files"]
    yield fields(
        f"{t['catalog']}.{t['namespace']}.{t['name']}",
        [
            ("health", f"{h['score']}/100"),
            ("data files", f"{h['data_files']} ({h['small_files']} small), {_size(h['bytes'])}"),
            ("file sizes", _buckets(h.get("file_size_buckets"))),
            ("records", h["records"]),
            ("format", _format(h.get("format_version"), x.get("format"))),
            (
                "delete files",
                f"{deletes['position']} position ({deletes.get('deletion_vectors', 0)} "
                f"deletion vectors), {deletes['equality']} equality",
            ),
            ("snapshots", h["snapshots"]["count"]),
            ("measured", h["measured_at"]),
            ("policy", f"version {t['policy_version']}, managed by {t['managed_by']}"),
            ("paused", _paused(x.get("paused"))),
            ("frozen", _paused(x.get("frozen"))),
            ("held", "; ".join(h["lift"] for h in x.get("held") or []) or None),
            ("region", f"{x['region']} ({'leads' if x['region_leader'] else 'NO LIVE LEADER'})"),
            ("explain", x["summary"]),
        ],
    )
    if h["signals"]:
        yield table(
            "signals",
            ("kind", "metric", "value", "threshold", "reason"),
            [
                (s["kind"], s["metric"], s["value"], s["threshold"], s["reason"])
                for s in h["signals"]
            ],
        )
    yield table(
        "what would run now",
        ("kind", "enabled", "would run", "open task", "why"),
        [
            (
                kind,
                k["enabled"],
                k["would_run"],
                f"{k['open_task']['id']} ({k['open_task']['state']})" if k["open_task"] else None,
                k["reason"],
            )
            for kind, k in x["kinds"].items()
        ],
    )
    if x["blocked_by"]:
        yield table(
            "blocked by",
            ("holder", "reason", "until"),
            [(b["holder"], b["reason"], b["expires_at"]) for b in x["blocked_by"]],
        )


# --- tasks -------------------------------------------------------------------------------


def tasks(
    ctx: typer.Context,
    state: Annotated[str | None, typer.Option("--state", help="e.g. failed, running")] = None,
    table_name: Annotated[
        str | None,
        typer.Option("--table", metavar="NS.NAME", help="this table's", callback=_table_name),
    ] = None,
    kind: Annotated[str | None, typer.Option("--kind", help="e.g. compaction")] = None,
    catalog: Catalog = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=500)] = 50,
    output: Output = Format.table,
) -> None:
    """Tasks, newest first."""
    with calling(ctx) as api:
        page = api.get(
            "/api/v1/tasks",
            state=state,
            table=table_name,
            kind=kind,
            catalog=catalog,
            limit=limit,
        )
    emit(page, output, _tasks_view)


def _tasks_view(page: dict[str, Any]) -> Iterable[RenderableType]:
    rows = [
        (
            t["id"],
            t["table"],
            t["kind"],
            t["state"],
            f"{t['attempt']}/{t['max_attempts']}",
            t["updated_at"],
            t.get("on_hold") or t["reason"],
        )
        for t in page["items"]
    ]
    if not rows:
        yield "no tasks"
        return
    yield table(None, ("id", "table", "kind", "state", "attempt", "updated", "why"), rows)
    if page.get("next_cursor"):
        yield "more tasks: raise --limit, or narrow with --state, --table or --kind"


def costs(
    ctx: typer.Context,
    by: Annotated[str, typer.Option("--by", help="table, namespace, kind, pool or day")] = "table",
    since: Annotated[
        str | None, typer.Option("--since", help="ISO 8601 date-time (default: 7 days ago)")
    ] = None,
    output: Output = Format.table,
) -> None:
    """What maintenance cost (Spark's executor CPU and task time, bytes), costliest first."""
    with calling(ctx) as api:
        found = api.get("/api/v1/costs", by=by, since=since)
    emit(found, output, _costs_view)


def _costs_view(found: dict[str, Any]) -> Iterable[RenderableType]:
    rows = [
        (
            c["key"],
            c["runs"],
            f"{c['executor_cpu_s']:.1f}",
            f"{c['executor_run_s']:.1f}",
            _size(int(c["input_bytes"])),
            _size(int(c["written_bytes"])),
            int(c["files_written"]),
            f"{c['wall_s']:.1f}",
        )
        for c in found["items"]
    ]
    if not rows:
        yield f"no runs since {found['since']}"
        return
    header = (found["by"], "runs", "cpu s", "task s", "read", "written", "files", "wall s")
    yield table(None, header, rows)


def pools(
    ctx: typer.Context,
    decisions: Annotated[
        int, typer.Option("--decisions", min=0, max=100, help="an elastic pool's latest changes")
    ] = 5,
    output: Output = Format.table,
) -> None:
    """The pools: running, queued, their limit now; an elastic pool's capacity, its bounds
    and why the leader last scaled it."""
    with calling(ctx) as api:
        found = api.get("/api/v1/pools", decisions=decisions)
    emit(found, output, _pools_view)


def _pools_view(found: dict[str, Any]) -> Iterable[RenderableType]:
    items = found["items"]
    if not items:
        yield "no pools: none is configured and no task is open"
        return
    rows = []
    for p in items:
        e = p["elastic"]
        wait = p["oldest_wait_s"]
        rows.append(
            (
                p["pool"],
                p["mode"],
                p["running"],
                p["queued"],
                "-" if wait is None else f"{wait:.0f}",
                "-" if p["limit"] is None else p["limit"],
                "fixed" if e is None else f"{e['capacity']} ({e['min']}..{e['max']})",
                "" if e is None else e["reason"],
            )
        )
    header = ("pool", "mode", "running", "queued", "oldest s", "limit", "capacity", "why")
    yield table(None, header, rows)
    for p in items:
        if p["elastic"] and p["elastic"]["decisions"]:
            yield table(
                f"pool {p['pool']}: latest changes",
                ("at", "from", "to", "queued", "running", "why"),
                [
                    (d["at"], d["before"], d["after"], d["queued"], d["running"], d["reason"])
                    for d in p["elastic"]["decisions"]
                ],
            )


def task(ctx: typer.Context, task_id: TaskId, output: Output = Format.table) -> None:
    """A task: why it exists, its plan, every transition and every Spark run."""
    with calling(ctx) as api:
        detail = api.get(f"/api/v1/tasks/{task_id}")
    emit(detail, output, _task_view)


def _task_summary(t: dict[str, Any]) -> RenderableType:
    return fields(
        f"task {t['id']}: {t['kind']} of {t['table']}",
        [
            ("state", t["state"]),
            ("attempt", f"{t['attempt']} of {t['max_attempts']}"),
            ("why", (t.get("trigger") or {}).get("reason")),
            ("on hold", t.get("on_hold")),
            ("reason", t["reason"]),
            ("plan", t["plan"]),
            ("result", t["result"]),
            ("created", t["created_at"]),
            ("updated", t["updated_at"]),
        ],
    )


def _task_view(t: dict[str, Any]) -> Iterable[RenderableType]:
    yield _task_summary(t)
    yield table(
        "transitions",
        ("at", "from", "to", "actor", "epoch", "reason"),
        [
            (h["at"], h["from_state"], h["to_state"], h["actor"], h["leader_epoch"], h["reason"])
            for h in t["history"]
        ],
    )
    if t["runs"]:
        yield table(
            "Spark runs",
            ("attempt", "state", "application", "ms", "metrics", "validation", "error", "ui"),
            [
                (
                    r["attempt"],
                    r["state"],
                    r["spark_app_id"],
                    r["duration_ms"],
                    {k: v for k, v in (r["metrics"] or {}).items() if k != "validation"},
                    _validation((r["metrics"] or {}).get("validation")),
                    r["error"],
                    r.get("ui_url"),
                )
                for r in t["runs"]
            ],
        )
        last = t["runs"][-1]
        if last.get("log_tail") and last["state"] != "succeeded":
            from rich.text import Text

            yield Text(f"log tail of attempt {last['attempt']}:\n{last['log_tail']}")


def _validation(v: dict[str, Any] | None) -> str | None:
    """A run's post-rewrite validation in a line (its per-partition detail is in -o json)."""
    if not v:
        return None
    text = str(v["status"])
    if v.get("rows") is not None:
        text += f": {v['rows']} rows in {v.get('partitions_checked')} partition(s)"
    if v.get("cost_seconds") is not None:
        text += f", {v['cost_seconds']}s"
    return text + (f" ({v['reason']})" if v.get("reason") else "")


def cancel(ctx: typer.Context, task_id: TaskId, output: Output = Format.table) -> None:
    """Cancel an open task (a running Spark job is stopped by the scheduler)."""
    with calling(ctx) as api:
        detail = api.post(f"/api/v1/tasks/{task_id}/cancel")
    emit(detail, output, lambda t: [_task_summary(t)])


def retry(ctx: typer.Context, task_id: TaskId, output: Output = Format.table) -> None:
    """Run an ended task again; prints the task that will run."""
    with calling(ctx) as api:
        detail = api.post(f"/api/v1/tasks/{task_id}/retry")
    emit(detail, output, lambda t: [_task_summary(t)])


def trigger(
    ctx: typer.Context,
    name: TableName,
    kind: Annotated[
        str, typer.Argument(help="compaction, clustering, zorder, ttl, clean or stats")
    ],
    override_disabled: Annotated[
        bool, typer.Option("--override-disabled", help="run it once though the policy disables it")
    ] = False,
    catalog: Catalog = None,
    output: Output = Format.table,
) -> None:
    """Ask for a task of KIND on a table now, whatever the thresholds say."""
    body = {"kind": kind, "override_disabled": override_disabled}
    with calling(ctx) as api:
        detail = api.post(f"{table_path(catalog, *split_name(name))}/tasks", body)
    emit(detail, output, lambda t: [_task_summary(t)])


# --- pause / resume ----------------------------------------------------------------------

OptionalTable = Annotated[
    str | None,
    typer.Argument(metavar="[NS.NAME]", help="the table; none: every table", callback=_table_name),
]


def pause(
    ctx: typer.Context,
    name: OptionalTable = None,
    reason: Annotated[str | None, typer.Option("--reason", help="shown with the pause")] = None,
    catalog: Catalog = None,
    output: Output = Format.table,
) -> None:
    """Pause maintenance of a table, or of every table (the global freeze, for incidents).
    No new job starts until resumed; running jobs finish."""
    body = {"reason": reason} if reason else {}
    with calling(ctx) as api:
        if name:
            result = api.post(f"{table_path(catalog, *split_name(name))}/pause", body)
        else:
            result = api.post("/api/v1/maintenance/freeze", body)
    emit(result, output, _hold_view)


def resume(
    ctx: typer.Context,
    name: OptionalTable = None,
    kind: Annotated[
        str | None,
        typer.Option(
            "--kind",
            help="lift the hold on this kind only (held after a failed validation or the "
            "same error repeated)",
        ),
    ] = None,
    catalog: Catalog = None,
    output: Output = Format.table,
) -> None:
    """Resume maintenance of a paused table, or lift the global freeze; with --kind, lift
    the hold the scheduler put on one kind of the table."""
    if kind and not name:
        raise typer.BadParameter("--kind needs the table (NS.NAME) whose kind to resume")
    with calling(ctx) as api:
        if name and kind:
            path = table_path(catalog, *split_name(name))
            result = api.post(f"{path}/kinds/{quote(kind, safe='')}/resume")
        elif name:
            result = api.post(f"{table_path(catalog, *split_name(name))}/resume")
        else:
            result = api.post("/api/v1/maintenance/unfreeze")
    emit(result, output, _hold_view)


def _hold_view(data: dict[str, Any]) -> Iterable[RenderableType]:
    if "frozen" in data:  # the fleet's switch
        state = f"frozen by {data['by']}" if data["frozen"] else "not frozen"
        yield f"maintenance: {state}" + (f" ({data['reason']})" if data.get("reason") else "")
        yield f"tables paused one by one: {data['paused_tables']}"
    else:  # a table
        name = f"{data['namespace']}.{data['name']}"
        yield f"{name}: " + (
            f"paused {_paused(data['paused'])}" if data.get("paused") else "active"
        )
        for held in data.get("held") or []:
            yield f"{name}: {held['lift']}"


# --- alerts ------------------------------------------------------------------------------

alerts_app = typer.Typer(help="Open alerts; `alerts ack ID` to take one.")


@alerts_app.callback(invoke_without_command=True)
def alerts(
    ctx: typer.Context,
    state: Annotated[
        str | None,
        typer.Option("--state", help="firing, acknowledged or resolved (default: the open ones)"),
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=500)] = 50,
    output: Output = Format.table,
) -> None:
    """Alerts, newest first: the open ones (firing or acknowledged) unless --state."""
    if ctx.invoked_subcommand is not None:
        return
    with calling(ctx) as api:
        page = api.get("/api/v1/alerts", state=state, limit=limit)
    emit(page, output, _alerts_view)


def _alerts_view(page: dict[str, Any]) -> Iterable[RenderableType]:
    rows = [
        (
            a["id"],
            a["severity"],
            a["state"],
            a["rule"],
            a["summary"],
            a["first_seen"],
            a["acked_by"],
        )
        for a in page["items"]
    ]
    if not rows:
        yield "no alerts"
        return
    yield table(None, ("id", "severity", "state", "rule", "summary", "since", "acked by"), rows)


@alerts_app.command("ack")
def ack(
    ctx: typer.Context,
    alert_id: Annotated[int, typer.Argument(metavar="ID")],
    by: Annotated[str | None, typer.Option("--by", help="who takes it (default: you)")] = None,
    output: Output = Format.table,
) -> None:
    """Acknowledge an alert: someone is on it."""
    with calling(ctx) as api:
        alert = api.post(f"/api/v1/alerts/{alert_id}/ack", {"by": by or _whoami()})
    emit(
        alert, output, lambda a: [f"alert {a['id']} ({a['rule']}): {a['state']} by {a['acked_by']}"]
    )


def _whoami() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # a container's uid without a passwd entry
        return "cli"


# --- policy ------------------------------------------------------------------------------

policy_app = typer.Typer(help="A table's policy: its effective values, set them, its versions.")


@policy_app.command("get")
def policy_get(
    ctx: typer.Context, name: TableName, catalog: Catalog = None, output: Output = Format.table
) -> None:
    """The effective policy, and where each value comes from (table, namespace, default)."""
    with calling(ctx) as api:
        data = _policy_of(api, catalog, name)
    emit(data, output, _policy_view)


def _policy_of(api: Client, catalog: str | None, name: str) -> dict[str, Any]:
    namespace, _ = split_name(name)
    t = api.get(table_path(catalog, *split_name(name)))
    where = f"/api/v1/catalogs/{t['catalog']}/namespaces/{namespace}/policy"
    return {
        "table": f"{t['namespace']}.{t['name']}",
        "catalog": t["catalog"],
        "version": t["policy_version"],
        "policy": t["policy"],
        "policy_error": t.get("policy_error"),
        "table_settings": t["policy_overrides"],
        "namespace_settings": api.get(where)["policy"],
    }


def _policy_view(data: dict[str, Any]) -> Iterable[RenderableType]:
    if data["policy_error"]:
        yield f"the stored policy is invalid: {data['policy_error']}"
    rows = []
    for section, values in (data["policy"] or {}).items():
        for key, value in values.items():
            if key in data["table_settings"].get(section, {}):
                source = "table"
            elif key in data["namespace_settings"].get(section, {}):
                source = "namespace"
            else:
                source = "default"
            rows.append((f"{section}.{key}", value, source))
    title = f"policy of {data['table']} (version {data['version']})"
    yield table(title, ("setting", "value", "from"), rows)


@policy_app.command("set")
def policy_set(
    ctx: typer.Context,
    name: TableName,
    settings: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[KEY=VALUE]...",
            help="e.g. compaction.min_small_files=50 (a YAML value: 50, true, [a, b])",
        ),
    ] = None,
    file: Annotated[
        Path | None,
        typer.Option(
            "--file",
            "-f",
            help="JSON or YAML: the table's own settings become exactly these ('-': stdin)",
            allow_dash=True,
        ),
    ] = None,
    catalog: Catalog = None,
    output: Output = Format.table,
) -> None:
    """Set the table's own settings (a new policy version; the namespace's and the
    defaults fill the rest). KEY=VALUE pairs change those keys and keep the others; --file
    replaces them all (then the pairs apply over it)."""
    if not settings and file is None:
        raise typer.BadParameter("give KEY=VALUE pairs, or --file")
    changes = [_setting(text) for text in settings or []]
    path = table_path(catalog, *split_name(name))
    with calling(ctx) as api:
        own = _read_policy_file(file) if file is not None else api.get(path)["policy_overrides"]
        for (section, key), value in changes:
            own.setdefault(section, {})[key] = value
        api.put(f"{path}/policy", own)
        data = _policy_of(api, catalog, name)
    emit(data, output, _policy_view)


def _setting(text: str) -> tuple[tuple[str, str], Any]:
    import yaml

    key, sep, raw = text.partition("=")
    section, dot, field = key.strip().partition(".")
    if not sep or not dot or not section or not field:
        raise typer.BadParameter(
            f"{text!r}: write SECTION.KEY=VALUE, e.g. compaction.min_small_files=50"
        )
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError as exc:
        raise typer.BadParameter(f"{text!r}: the value is not valid YAML ({exc})") from None
    return (section, field), value


def _read_policy_file(file: Path) -> dict[str, Any]:
    import sys

    import yaml

    try:
        text = sys.stdin.read() if str(file) == "-" else file.read_text()
        data = yaml.safe_load(text)  # JSON is YAML too
    except (OSError, yaml.YAMLError) as exc:
        raise typer.BadParameter(f"cannot read {file}: {exc}", param_hint="--file") from None
    if not isinstance(data, dict):
        raise typer.BadParameter(f"{file} must hold a mapping of sections", param_hint="--file")
    return data


@policy_app.command("history")
def policy_history(
    ctx: typer.Context, name: TableName, catalog: Catalog = None, output: Output = Format.table
) -> None:
    """Every policy the table has had, newest first, with who set it."""
    with calling(ctx) as api:
        versions = api.get(f"{table_path(catalog, *split_name(name))}/policy/versions")
    emit(versions, output, _history_view)


def _history_view(versions: list[dict[str, Any]]) -> Iterable[RenderableType]:
    rows = [
        (v["version"], "*" if v["current"] else "", v["author"], v["created_at"], v["policy"])
        for v in versions
    ]
    yield table(None, ("version", "current", "author", "set", "table settings"), rows)


def regions(ctx: typer.Context, output: Output = Format.table) -> None:
    """Each region's scheduler leader, and whether it is live: a stale region's tables get
    no maintenance until one of its standbys leads (docs/deployment.md#regions)."""
    with calling(ctx) as api:
        data = api.get("/api/v1/scheduler/regions")
    emit(data, output, _regions_view)


def _regions_view(data: list[dict[str, Any]]) -> Iterable[RenderableType]:
    yield table(
        "regions",
        ("region", "leader", "epoch", "live", "fleet duties"),
        [
            (r["region"], r["holder"], r["epoch"], "yes" if r["live"] else "NO", r["fleet"])
            for r in data
        ],
    )


# --- check -------------------------------------------------------------------------------


def check_fleet(ctx: typer.Context, output: Format) -> int:
    """`lakewarden check` without --role: is the control plane healthy, as the API sees it?
    Unhealthy (exit 1): the API cannot be reached or is not ready, no scheduler leads, or a
    critical alert fires unacknowledged. A global freeze is reported, not failed: it is an
    operator's decision."""
    checks: list[dict[str, Any]] = []

    def record(name: str, ok: bool, detail: str) -> None:
        checks.append({"name": name, "ok": ok, "detail": detail})

    with calling(ctx) as api:
        try:
            status, body = api.status("/readyz")
        except ApiError as exc:
            record("api", False, str(exc))
        else:
            reason = body.get("reason") if isinstance(body, dict) else None
            record("api", status == 200, f"{api.url}: " + (reason or "ready"))
        if checks[0]["ok"]:
            # One check per region (the default region's is `leader`): a stale region fails.
            for leader in api.get("/api/v1/scheduler/regions"):
                holder, region = leader.get("holder"), leader["region"]
                record(
                    "leader" if region == DEFAULT_REGION else f"leader {region}",
                    bool(leader["live"]),
                    f"{holder} leads (epoch {leader['epoch']})"
                    + (", and the fleet-wide duties" if leader["fleet"] else "")
                    if leader["live"]
                    else f"no live scheduler leader in region {region} (last: "
                    f"{holder or 'none'}): its tables' maintenance stalls",
                )
            firing = api.get("/api/v1/alerts", state="firing", limit=500)["items"]
            critical = [a for a in firing if a["severity"] == "critical"]
            record(
                "alerts",
                not critical,
                "; ".join(f"{a['id']} {a['rule']}: {a['summary']}" for a in critical)
                or f"no critical alert firing ({len(firing)} other firing)",
            )
            freeze = api.get("/api/v1/maintenance")
            state = f"frozen by {freeze['by']}" if freeze["frozen"] else "not frozen"
            record("maintenance", True, f"{state}, {freeze['paused_tables']} table(s) paused")
    healthy = all(c["ok"] for c in checks)
    emit({"healthy": healthy, "checks": checks}, output, _check_view)
    return 0 if healthy else 1


def _check_view(data: dict[str, Any]) -> Iterable[RenderableType]:
    rows = [(c["name"], "ok" if c["ok"] else "FAIL", c["detail"]) for c in data["checks"]]
    yield table(None, ("check", "", "detail"), rows)
    yield "healthy" if data["healthy"] else "UNHEALTHY"
