"""Explain: for every kind, what would run on a table now and why, running and writing
nothing. It asks the rules the real paths ask, so it cannot drift from what really creates
tasks:

- the next commit: the kind's `event_verdict` on `lakewarden.evaluate.event_facts`, as
  `evaluate_events` does when a commit arrives;
- the next sweep: `lakewarden.policy.model.is_due`, as the leader's sweep does;
- planning: the kind's own planner on the table's current metadata, as the worker does.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from pydantic import ValidationError
from pyiceberg.table import Table
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from lakewarden import publish
from lakewarden.catalogs.regions import region_leaders, region_of_table
from lakewarden.db.models import ManagedTable, PublishAudit, Task
from lakewarden.evaluate import event_facts
from lakewarden.events.ingest import snapshot_fields
from lakewarden.holds import holds_of, shown
from lakewarden.kinds import REGISTRY, clean
from lakewarden.kinds.base import Kind
from lakewarden.policy.model import (
    CleanPolicy,
    KindPolicy,
    Policy,
    TagsPolicy,
    ValidationPolicy,
    is_due,
)
from lakewarden.policy.quotas import usage_of
from lakewarden.readiness import explain_readiness
from lakewarden.refs import PYICEBERG_MAX_WRITE_VERSION, due_tag, list_refs
from lakewarden.settings import DEFAULT_REGION, Settings
from lakewarden.spark.validation import REWRITE_KINDS
from lakewarden.tables import describe_hold, freeze_of, live_blockers, pause_of
from lakewarden.tasks.repo import find_open_task

log = logging.getLogger(__name__)

GAIN_PREFIXES = ("expected_", "estimated_")
GAIN_SUFFIXES = ("_before", "_to_rewrite")


def explain_table(
    session: Session,
    row: ManagedTable,
    table: Table,
    policy: Policy,
    now: datetime,
    *,
    settings: Settings,
) -> dict[str, Any]:
    """Every kind: enabled or not, its open task, whether the next commit or sweep would
    create a task, and the plan its planner would make now (with the expected gain) or why
    it would skip; and what holds jobs off the table: the live writer blockers, its pause
    and the global freeze (rows of `table_blockers`), the kinds held on it after a failed
    validation or repeated errors (`lakewarden.holds`), and the table's and its pools' hard
    quotas (`settings.pool_quotas`). What is held is still explained as if it were free,
    and says that it would not start. The API serves it as `ExplainOut`."""
    current = table.current_snapshot()
    summary = snapshot_fields(current)["summary"] if current else None
    blockers = live_blockers(session, row.id)
    paused, frozen = pause_of(session, row.id), freeze_of(session)
    held = "; ".join(describe_hold(h) for h in (frozen, paused) if h is not None)
    kinds = {
        kind.name: _explain_kind(session, row, kind, policy, table, now, summary)
        for kind in REGISTRY.values()
    }
    running = [name for name, k in kinds.items() if k["would_run"]]
    overview = f"would run now: {', '.join(running)}" if running else "nothing would run now"
    if blockers:
        until = max(b.expires_at for b in blockers if b.expires_at is not None)
        overview += (
            f"; blocked by {', '.join(sorted({b.holder for b in blockers}))} until "
            f"{until.isoformat()}: no job starts before then"
        )
    if held:
        lifted = " and ".join(
            w for w, h in (("unfrozen", frozen), ("resumed", paused)) if h is not None
        )
        overview += f"; {held}: no job starts until {lifted}"
        for name in running:
            kinds[name]["reason"] += f"; it would not start now: {held}"
    held_kinds = [shown(session, row, h) for h in holds_of(session, [row.id]).get(row.id, [])]
    for found in held_kinds:
        overview += f"; {found['lift']}"
        if found["kind"] in kinds:
            kinds[found["kind"]]["reason"] += f"; no task is created or started: {found['lift']}"
    pools = {policy.for_kind(name).pool for name in REGISTRY}
    quota = usage_of(session, settings, row, policy.quota.spark_minutes_per_hour, pools)
    for name in running:
        waiting = [
            u["waiting"]
            for u in (quota["table"], quota["pools"].get(policy.for_kind(name).pool))
            if u is not None and u["waiting"]
        ]
        if waiting:
            kinds[name]["reason"] += f"; it would not start now: {'; '.join(waiting)}"
    region = region_of_table(session, row.id) or DEFAULT_REGION
    # Whether its region leads: without a leader (a data center's outage), nothing runs.
    region_leads = region_leaders(session, [region])[region]
    return {
        "table": f"{row.namespace}.{row.name}",
        "at": now,
        "snapshot_id": current.snapshot_id if current else None,
        "policy_version": row.policy_version,
        "region": region,
        "region_leader": region_leads,
        "summary": overview,
        "blocked_by": blockers,
        "paused": paused,
        "frozen": frozen,
        "held": held_kinds,
        "kinds": kinds,
        "validation": explain_validation(policy.validation, table),
        "format": explain_format(table),
        "readiness": _explain_readiness(session, row, table, policy, now),
        "tags": explain_tags(policy.tags, table, now),
        "publish": publish.explain(
            table, policy.publish, _last_audit(session, row.id, policy.publish.branch)
        ),
        "orphan_removal": explain_orphans(session, row, policy.clean, now),
        "quota": quota,
    }


def _last_audit(session: Session, table_id: int, branch: str) -> PublishAudit | None:
    return session.scalars(
        select(PublishAudit)
        .where(PublishAudit.table_id == table_id, PublishAudit.branch == branch)
        .order_by(PublishAudit.id.desc())
        .limit(1)
    ).first()


def explain_orphans(
    session: Session, row: ManagedTable, policy: CleanPolicy, now: datetime
) -> dict[str, Any]:
    """When clean next lists and removes orphan files (`clean.orphan_interval_minutes`,
    counted from the last clean run that removed them), as the clean planner judges it."""
    last = clean.history(session, row.id)["last_orphan_removal"]
    schedule = clean.orphan_due(policy, last, now)
    reason = schedule.reason if policy.enabled else f"clean is disabled; {schedule.reason}"
    return {
        "enabled": policy.enabled and policy.remove_orphans,
        "interval_minutes": policy.orphan_interval_minutes,
        "last_run": last,
        "due": policy.enabled and schedule.due,
        "next_due": schedule.next_due,
        "reason": reason,
    }


def explain_tags(policy: TagsPolicy, table: Table, now: datetime) -> dict[str, Any]:
    """The scheduled tags (`lakewarden.refs`): this period's tag and whether the next sweep
    makes it, and the refs past their max-ref-age, which the next snapshot expiry drops."""
    due = due_tag(policy, table, now)
    return {
        "enabled": policy.enabled,
        "every": policy.every,
        "retention_days": policy.retention_days,
        "next_tag": due.name,
        "due": due.due,
        "reason": due.reason,
        "following_tag": due.next_name,
        "following_at": due.next_at,
        "would_lapse": [r.__dict__ for r in list_refs(table, now) if r.lapsed(now)],
    }


def _explain_readiness(
    session: Session, row: ManagedTable, table: Table, policy: Policy, now: datetime
) -> dict[str, Any]:
    """Which partitions would become ready now, and what the others wait for."""
    try:
        return explain_readiness(session, row.id, table, policy.readiness, now)
    except Exception as exc:  # like a planner's failure: part of the answer, not a 500
        log.warning("explain: readiness failed on %s", row.name, exc_info=True)
        return {
            "enabled": policy.readiness.enabled,
            "partition": policy.readiness.partition,
            "rule": policy.readiness.rule,
            "require": list(policy.readiness.require),
            "summary": f"readiness could not be judged: {type(exc).__name__}: {exc}",
            "partitions": [],
        }


def expected_gain(plan: dict[str, Any] | None) -> dict[str, Any] | None:
    """The numbers a plan promises (before/after, estimates), whatever its kind."""
    if plan is None:
        return None
    gain = {
        k: v for k, v in plan.items() if k.startswith(GAIN_PREFIXES) or k.endswith(GAIN_SUFFIXES)
    }
    for action in plan.get("actions") or []:
        if isinstance(action, dict):
            gain.update(
                {
                    f"{action.get('name')}.{k}": v
                    for k, v in action.items()
                    if k.startswith(GAIN_PREFIXES)
                }
            )
    before, after = plan.get("files_before"), plan.get("expected_files_after")
    if isinstance(before, int) and isinstance(after, int):
        gain["data_files_removed"] = before - after
    return gain


def _explain_kind(
    session: Session,
    row: ManagedTable,
    kind: Kind,
    policy: Policy,
    table: Table,
    now: datetime,
    summary: dict[str, Any] | None,
) -> dict[str, Any]:
    section = kind.section(policy)
    task = find_open_task(session, row.id, kind.name)
    plan: dict[str, Any] | None = None
    incomplete = None if section.enabled else _cannot_enable(section)
    if incomplete is not None:
        planner_reason = f"not planned: the section is incomplete ({incomplete})"
    else:
        try:
            outcome = kind.plan(section, table, now, **kind.plan_context(session, row.id))
            plan, planner_reason = outcome.plan, outcome.reason
        except Exception as exc:  # a planner's failure is part of the answer, not a 500
            log.warning("explain: the %s planner failed on %s", kind.name, row.name, exc_info=True)
            planner_reason = f"the planner failed: {type(exc).__name__}: {exc}"
    if not section.enabled:
        reason = f"{kind.name} is disabled by policy; " + (
            planner_reason if incomplete else f"if enabled, its planner says: {planner_reason}"
        )
    elif plan is not None and task is not None:
        reason = f"open task {task.id} ({task.state}) covers it; planning now: {planner_reason}"
    else:
        reason = planner_reason
    return {
        "enabled": section.enabled,
        "would_run": section.enabled and plan is not None,
        "reason": reason,
        "open_task": None
        if task is None
        else {
            "id": task.id,
            "state": task.state,
            "attempt": task.attempt,
            "created_at": task.created_at,
            "reason": (task.trigger or {}).get("reason"),
        },
        "triggers": _triggers(session, row, kind, section, task, summary, now),
        "planner_reason": planner_reason,
        "plan": plan,
        "expected_gain": expected_gain(plan),
    }


def _cannot_enable(section: KindPolicy) -> str | None:
    """What a disabled section lacks to be enabled as it stands (None: nothing)."""
    try:
        type(section).model_validate({**section.model_dump(), "enabled": True})
    except ValidationError as exc:
        return "; ".join(str(e["msg"]).removeprefix("Value error, ") for e in exc.errors())
    return None


def _triggers(
    session: Session,
    row: ManagedTable,
    kind: Kind,
    section: KindPolicy,
    task: Task | None,
    summary: dict[str, Any] | None,
    now: datetime,
) -> list[dict[str, Any]]:
    """Would the next commit (judged like the current snapshot) or sweep create a task?"""
    out: list[dict[str, Any]] = []
    blocked = (
        f"{kind.name} is disabled by policy"
        if not section.enabled
        else f"open task {task.id} ({task.state}) already covers it"
        if task is not None
        else None
    )
    if kind.event_verdict is not None:
        if summary is None:
            out.append({"source": "commits", "would_create_task": False, "reason": "no commit yet"})
        else:
            verdict = kind.event_verdict(section, event_facts(session, row.id, kind.name, summary))
            reason = (
                verdict.reason
                if blocked is None
                else blocked
                if not section.enabled
                else f"{blocked}; {verdict.reason}"
            )
            out.append(
                {
                    "source": "commits",
                    "would_create_task": blocked is None and verdict.needed,
                    "reason": reason,
                    "metrics": verdict.metrics,
                }
            )
    if kind.swept and section.sweep_minutes() is not None:  # compaction: when tiered
        last = session.scalar(
            select(func.max(Task.created_at)).where(Task.table_id == row.id, Task.kind == kind.name)
        )
        due, why = is_due(section, last, now, kind=kind.name)
        if blocked is not None:
            reason = blocked
        else:
            reason = f"{why}: the next sweep creates one" if due else why
        out.append(
            {
                "source": "sweep",
                "would_create_task": blocked is None and due,
                "reason": reason,
            }
        )
    return out


# What lakewarden commits through pyiceberg (everything else goes through Spark).
PYICEBERG_WRITES = (
    "repair",
    "revert",
    "cherry-pick",
    "rollback",
    "scheduled tags",
    "readiness tags",
    "publish",
)


def explain_format(table: Table) -> dict[str, Any]:
    """The table's Iceberg format version: what lakewarden does on it, what it refuses."""
    version = table.metadata.format_version
    refused: list[str] = []
    if version >= 3:
        refused = list(PYICEBERG_WRITES)
        reason = (
            f"format v{version}: compaction applies deletion vectors (Puffin) as it rewrites "
            "their data files and drops them (Iceberg 1.12's rewrite_position_delete_files "
            "does nothing to them: not run); every rewrite (compaction, clustering, Z-order, "
            "TTL, clean) keeps each row's _row_id and _last_updated_sequence_number, and "
            f"validation checksums them; refused: {', '.join(refused)}: pyiceberg 0.12, which "
            f"commits them, writes table metadata of format v{PYICEBERG_MAX_WRITE_VERSION} "
            "at most"
        )
    elif version == 2:
        reason = "format v2: position and equality delete files; no row lineage"
    else:
        reason = f"format v{version}: no delete files, no row lineage"
    return {
        "version": version,
        "row_lineage": version >= 3,
        "next_row_id": getattr(table.metadata, "next_row_id", None),
        "refused": refused,
        "reason": reason,
    }


def explain_validation(policy: ValidationPolicy, table: Table) -> dict[str, Any]:
    """What the rewrite validation (`lakewarden.spark.validation`) would check of the table's
    next rewrite, before publishing it (compaction, clustering, Z-order), or that it is off."""
    primitive = [f.name for f in table.schema().fields if f.field_type.is_primitive]
    names = {f.name for f in table.schema().fields}
    columns = list(policy.columns) or primitive
    current = table.current_snapshot()
    summary = snapshot_fields(current)["summary"] if current else {}
    rows = int(summary.get("total-records", 0) or 0)
    if not policy.enabled:
        reason = "off (validation.enabled: false): rewrites are not checked"
    elif missing := [c for c in policy.columns if c not in names]:
        reason = (
            f"validation.columns names columns the table lacks ({', '.join(missing)}): "
            "every rewrite's validation would be skipped, saying so"
        )
    else:
        reason = (
            "each rewrite commits to a staging branch first, and every partition it touched is "
            "read before and after: "
            f"row count and a checksum of {len(columns)} column(s); skipped when those "
            f"partitions held more than max_rows {policy.max_rows} rows (the table holds "
            f"{rows}); a mismatch fails the task, raises the critical rewrite_mismatch alert "
            "and the rewrite is never published (readers never see it); one that passes is "
            "published to its branch"
        )
    return {
        "enabled": policy.enabled,
        "applies_to": list(REWRITE_KINDS),
        "columns": columns,
        "columns_from": "policy" if policy.columns else "every column of a primitive type",
        "max_rows": policy.max_rows,
        "table_rows": rows,
        "reason": reason,
    }
