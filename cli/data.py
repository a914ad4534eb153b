"""The operator's commands on a table's data for downstream readers and recovery:
`lakewarden partitions` (readiness), `watermark` (the writer's completeness mark),
`heartbeat` (the writer ran for a partition and wrote nothing), `refs`
(branches and tags, and when snapshot expiry drops them), `rollback` (main back to a
snapshot or a tag; admin, and asked for confirmation), `repair` (one partition back to a
snapshot), `revert` (a range of commits undone) and `cherry-pick` (an audit branch's
append applied to main): a dry run, then applied if asked; `publish` (write-audit-publish's
audits of the branch, and what the next round does).
Each is one or two REST calls, printed as the other operator commands are (cli/ops.py)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cli.client import table_path
from cli.ops import Catalog, Output, TableName, calling, split_name
from cli.output import Format, cell, emit, table

if TYPE_CHECKING:
    from rich.console import RenderableType


def register(app: typer.Typer) -> None:
    for command in (partitions, watermark, heartbeat, refs, rollback, repair, revert, cherry_pick):
        app.command()(command)
    app.command("publish")(publish_audits)


# --- readiness ---------------------------------------------------------------------------


def partitions(
    ctx: typer.Context,
    name: TableName,
    ready: Annotated[
        bool | None,
        typer.Option("--ready/--not-ready", show_default=False, help="only these (default: all)"),
    ] = None,
    catalog: Catalog = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=500)] = 100,
    output: Output = Format.table,
) -> None:
    """Partitions of the table's readiness column, newest recorded first: ready or not,
    since when, why, and their tag (the policy's `readiness` section)."""
    with calling(ctx) as api:
        page = api.get(
            f"{table_path(catalog, *split_name(name))}/partitions", ready=ready, limit=limit
        )
    emit(page, output, _partitions_view)


def _partitions_view(page: dict[str, Any]) -> Iterable[RenderableType]:
    rows = [
        (
            p["partition"],
            p["ready"],
            p["since"],
            (p["reason"] or "")
            + (f" (un-readied: {p['unready_reason']})" if p.get("unready_reason") else ""),
            _pinned(p),
            p["last_commit_at"] or "none (no data)",
        )
        for p in page["items"]
    ]
    if not rows:
        yield (
            "no partitions recorded: readiness is disabled for the table (policy readiness."
            "enabled), or the leader has not judged it yet"
        )
        return
    columns = ("partition", "ready", "since", "why", "pinned at", "last commit")
    yield table(None, columns, rows)
    reads = {p["pin"]["read"] for p in page["items"] if p.get("pin") and p["ready"]}
    if reads:
        yield "a reader pins a ready partition with: " + " | ".join(sorted(reads)[:5])
    if page.get("next_cursor"):
        yield "more partitions: raise --limit, or narrow with --ready / --not-ready"


def _pinned(p: dict[str, Any]) -> str:
    """Where a partition is pinned: `tag ready-a`, `version 4`, `savepoint <instant>`."""
    pin = p.get("pin")
    if not pin:
        return ""
    return f"{pin['kind']} {p['tag'] if pin['kind'] == 'tag' else pin['commit']}"


def watermark(
    ctx: typer.Context,
    name: TableName,
    timestamp: Annotated[
        str,
        typer.Argument(
            metavar="TIMESTAMP",
            help="ISO 8601 with a UTC offset, e.g. 2026-11-24T00:00:00Z: every row before it "
            "is written",
        ),
    ],
    catalog: Catalog = None,
    output: Output = Format.table,
) -> None:
    """Declare every row before TIMESTAMP written (readiness.rule: watermark). It only moves
    forward."""
    with calling(ctx) as api:
        result = api.post(
            f"{table_path(catalog, *split_name(name))}/watermark", {"watermark": timestamp}
        )
    emit(result, output, lambda r: [f"{name}: watermark at {r['watermark']}"])


def heartbeat(
    ctx: typer.Context,
    name: TableName,
    partition: Annotated[
        str,
        typer.Argument(
            metavar="PARTITION",
            help="as `lakewarden partitions` names it, e.g. 2026-11-23-05 (hour), 2026-11-23 (day)",
        ),
    ],
    catalog: Catalog = None,
    output: Output = Format.table,
) -> None:
    """The writer ran for PARTITION and wrote nothing: if no commit touched it, it becomes
    ready with no data in the leader's next round (readiness.enabled)."""
    with calling(ctx) as api:
        result = api.post(
            f"{table_path(catalog, *split_name(name))}/heartbeat", {"partition": partition}
        )
    emit(result, output, lambda r: [f"{name} {r['partition']}: {r['effect']}"])


# --- branches, tags, rollback ------------------------------------------------------------


def refs(
    ctx: typer.Context, name: TableName, catalog: Catalog = None, output: Output = Format.table
) -> None:
    """Branches and tags: each one's snapshot and its age, and when the next snapshot
    expiry drops it."""
    with calling(ctx) as api:
        data = api.get(f"{table_path(catalog, *split_name(name))}/refs")
    emit(data, output, _refs_view)


def _refs_view(data: dict[str, Any]) -> Iterable[RenderableType]:
    rows = [
        (
            r["name"],
            r["type"],
            r["snapshot_id"],
            r["committed_at"],
            _hours(r["max_ref_age_ms"]),
            r["lapses_at"] or "never",
        )
        for r in data["refs"]
    ]
    title = f"{data['table']}: current snapshot {cell(data['current_snapshot_id'])}"
    yield table(title, ("ref", "type", "snapshot", "committed", "max age", "lapses"), rows)


def _hours(ms: int | None) -> str | None:
    return None if ms is None else f"{ms / 3_600_000:g}h"


def rollback(
    ctx: typer.Context,
    name: TableName,
    to_snapshot: Annotated[
        int | None, typer.Option("--to-snapshot", metavar="ID", help="a snapshot of main's history")
    ] = None,
    to_tag: Annotated[
        str | None, typer.Option("--to-tag", metavar="NAME", help="a tag's snapshot")
    ] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="do not ask for confirmation")] = False,
    catalog: Catalog = None,
    output: Output = Format.table,
) -> None:
    """Point main back at a snapshot of its history, by id or by tag (admin). Refused while
    a task of the table runs. Asks first unless --yes."""
    if (to_snapshot is None) == (to_tag is None):
        raise typer.BadParameter("give exactly one of --to-snapshot ID and --to-tag NAME")
    path = table_path(catalog, *split_name(name))
    target = f"tag {to_tag}" if to_tag is not None else f"snapshot {to_snapshot}"
    with calling(ctx) as api:
        if not yes:
            now = api.get(f"{path}/refs")["current_snapshot_id"]
            typer.confirm(
                f"Point main of {name} (now at snapshot {now}) back at {target}?",
                abort=True,
                err=True,  # stdout stays the answer's alone (-o json)
            )
        body = {"to_snapshot": to_snapshot} if to_tag is None else {"to_tag": to_tag}
        result = api.post(f"{path}/rollback", body)
    emit(result, output, _rollback_view)


def _rollback_view(r: dict[str, Any]) -> Iterable[RenderableType]:
    to = f"snapshot {r['to_snapshot_id']}" + (f" (tag {r['to_tag']})" if r["to_tag"] else "")
    if r["rolled_back"]:
        yield f"{r['table']}: main rolled back from snapshot {r['from_snapshot_id']} to {to}"
    else:
        yield f"{r['table']}: main was already at {to}; nothing changed"


def repair(
    ctx: typer.Context,
    name: TableName,
    partition: Annotated[
        list[str],
        typer.Option("--partition", metavar="FIELD=VALUE", help="each partition field"),
    ],
    to_snapshot: Annotated[
        int, typer.Option("--to-snapshot", metavar="ID", help="a snapshot of main's history")
    ],
    apply: Annotated[bool, typer.Option("--apply", help="commit it (default: dry run)")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="do not ask for confirmation")] = False,
    catalog: Catalog = None,
    output: Output = Format.table,
) -> None:
    """One partition back to what it held at a snapshot (admin): a dry run of which files
    and rows change; with --apply, that plan committed (refused if main moved meanwhile)."""
    fields = dict(_field(p) for p in partition)
    body = {"partition": fields, "to_snapshot": to_snapshot}
    _dry_run_then_apply(ctx, name, "repair", body, apply, yes, catalog, output)


def revert(
    ctx: typer.Context,
    name: TableName,
    from_snapshot: Annotated[
        int, typer.Option("--from", metavar="ID", help="the last snapshot kept as it was")
    ],
    to_snapshot: Annotated[int, typer.Option("--to", metavar="ID", help="the last commit undone")],
    apply: Annotated[bool, typer.Option("--apply", help="commit it (default: dry run)")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="do not ask for confirmation")] = False,
    catalog: Catalog = None,
    output: Output = Format.table,
) -> None:
    """Undo the changes of main's commits after --from up to --to (admin): a dry run, or
    with --apply that plan committed; later commits are kept."""
    body = {"from_snapshot": from_snapshot, "to_snapshot": to_snapshot}
    _dry_run_then_apply(ctx, name, "revert", body, apply, yes, catalog, output)


def cherry_pick(
    ctx: typer.Context,
    name: TableName,
    snapshot: Annotated[
        int, typer.Option("--snapshot", metavar="ID", help="an append outside main's history")
    ],
    apply: Annotated[bool, typer.Option("--apply", help="commit it (default: dry run)")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="do not ask for confirmation")] = False,
    catalog: Catalog = None,
    output: Output = Format.table,
) -> None:
    """Apply to main an append committed outside its history (an audit branch's), admin:
    a dry run, or with --apply that plan committed."""
    body = {"snapshot": snapshot}
    _dry_run_then_apply(ctx, name, "cherry-pick", body, apply, yes, catalog, output)


def _field(text: str) -> tuple[str, str]:
    field, sep, value = text.partition("=")
    if not sep or not field:
        raise typer.BadParameter(f"{text!r}: write FIELD=VALUE, e.g. region=eu")
    return field, value


def _dry_run_then_apply(
    ctx: typer.Context,
    name: str,
    action: str,
    body: dict[str, Any],
    apply: bool,
    yes: bool,
    catalog: str | None,
    output: Format,
) -> None:
    path = f"{table_path(catalog, *split_name(name))}/{action}"
    with calling(ctx) as api:
        plan = api.post(path, {**body, "dry_run": True})
        if apply and plan["changes"]:
            if not yes:
                typer.confirm(
                    f"{action} {name}: take out {len(plan['files_removed'])} file(s) "
                    f"({plan['rows_removed']} rows), put back {len(plan['files_restored'])} "
                    f"({plan['rows_restored']} rows)?",
                    abort=True,
                    err=True,
                )
            body = {**body, "dry_run": False, "main_snapshot_id": plan["main_snapshot_id"]}
            plan = api.post(path, body)
    emit(plan, output, _repair_view)


def _repair_view(r: dict[str, Any]) -> Iterable[RenderableType]:
    what = (
        f"take out {len(r['files_removed'])} file(s), {r['rows_removed']} rows; put back "
        f"{len(r['files_restored'])} file(s), {r['rows_restored']} rows"
    )
    if not r["changes"]:
        yield f"{r['table']}: nothing to {r['action']}"
    elif r["dry_run"]:
        yield f"{r['table']}: {r['action']} would {what} (dry run; --apply to commit)"
    else:
        yield f"{r['table']}: {r['action']} committed snapshot {r['committed_snapshot_id']}: {what}"


# --- write-audit-publish -------------------------------------------------------------------


def publish_audits(
    ctx: typer.Context,
    name: TableName,
    catalog: Catalog = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=50)] = 10,
    output: Output = Format.table,
) -> None:
    """Write-audit-publish: the audit branch's newest audits (published, or the checks that
    refused it) and what the leader's next publish round does (the policy's `publish`)."""
    path = table_path(catalog, *split_name(name))
    with calling(ctx) as api:
        found = api.get(f"{path}/publish")
        found["next"] = api.get(f"{path}/explain")["publish"]
    found["audits"] = found["audits"][:limit]
    emit(found, output, _publish_view)


def _publish_view(p: dict[str, Any]) -> Iterable[RenderableType]:
    state = "enabled" if p["enabled"] else "disabled"
    yield f"{p['table']}: write-audit-publish {state}, branch {p['branch']}"
    if p["next"]:
        yield f"next round: {p['next']['reason']}"
    rows = [
        (
            a["at"],
            a["branch_snapshot_id"],
            a["rows"],
            "published" if a["published"] else ("passed" if a["passed"] else "refused"),
            "; ".join(f"{n}: {c['detail']}" for n, c in a["checks"].items() if not c["passed"])
            or a["reason"],
        )
        for a in p["audits"]
    ]
    if rows:
        yield table(None, ("audited", "branch head", "rows", "verdict", "why"), rows)
