"""Alert rules. Each computes the set of conditions that hold now; the store opens,
refreshes and resolves alerts to match. Every rule says what to do (its runbook)."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from lakewarden.alerts.store import fire, resolve_absent, table_details
from lakewarden.catalogs.regions import in_region_sql, lease_name
from lakewarden.db.models import ManagedTable, PartitionReadiness
from lakewarden.isolation import RULE as UNREADABLE_RULE
from lakewarden.isolation import RUNBOOK as UNREADABLE_RUNBOOK
from lakewarden.isolation import PerTable
from lakewarden.settings import Settings
from lakewarden.states import FINISHED_TASK_STATES, WAITING_TASK_STATES, RunState, TaskState, sql_in
from lakewarden.tables import LIVE, effective_policy_for

RUNBOOKS = {
    "task_failed": "Read the task's runs (GET /api/v1/tasks/{id}): error and Spark log tail. "
    "Fix the cause (permissions, schema, resources), then trigger the kind again "
    "(POST /api/v1/tables/{ns}/{name}/tasks). If its runs failed with the same error "
    "LAKEWARDEN_HOLD_AFTER_SAME_FAILURES times in a row, the kind is held on the table until "
    "this alert is acknowledged (or the kind resumed: POST …/kinds/{kind}/resume). Resolves "
    "when a later task of that kind succeeds.",
    "ttl_held": "A TTL run would remove too much (or every row). Check the table's newest data "
    "and the policy's retention_days / max_fraction; fix the policy or the writer. "
    "Resolves when a later TTL task is not held.",
    "task_partial": "A rewrite committed only some of its file groups; the others failed "
    "(Iceberg's partial progress only logs them). The task's reason names the first error, its "
    "run (GET /api/v1/tasks/{id}) the failed partitions and Spark's log tail. Fix the cause "
    "(e.g. a data file missing from storage: restore it, or remove it from the table). "
    "Resolves when a later task of that kind is not partial.",
    "rewrite_mismatch": "A rewrite (compaction, clustering, Z-order) left a partition with "
    "other rows than before (count or checksum: the validation of the rewrite, staged on a "
    "branch of its own) and was never published: readers never saw it, and the table holds "
    "what its writers committed. Its run (GET /api/v1/tasks/{id}) lists the partitions "
    "compared. Suspect the engine or storage. The kind is held on the table (no task of it "
    "is made or started: explain says so) until this alert is acknowledged or POST "
    "/api/v1/catalogs/{catalog}/tables/{ns}/{name}/kinds/{kind}/resume; acknowledge once the "
    "cause is understood, or disable the kind for the table. Resolves when a later task of "
    "that kind succeeds.",
    "backlog_stale": "Tasks wait longer than the window: check GET /api/v1/scheduler/leader, "
    "that workers run (planning) and that Spark accepts jobs (running). Add workers or raise "
    "max_concurrent_jobs if the backlog is real.",
    "job_slow": "A job runs far longer than its history. Look at the Spark application "
    "(spark_app_id in the task's run); cancel with POST /api/v1/tasks/{id}/cancel if it hangs.",
    "table_unhealthy": "A table's health score has been below its SLO (policy slo.min_score) "
    "for longer than slo.window_minutes. GET /api/v1/tables/{ns}/{name}/health says which "
    "signals fire and /explain what would run; check for failed or held tasks, blockers, "
    "or a disabled kind.",
    "partition_overdue": "A partition of a table with readiness.deadline_minutes has neither "
    "data nor a writer's heartbeat that long after its end: downstream waits for it. Check "
    "the writer (did it run? did it fail?); if it ran and had nothing to write, POST "
    "/api/v1/tables/{ns}/{name}/heartbeat with the partition (it then becomes ready, no "
    "data). GET …/partitions?ready=false lists the overdue ones. Resolves when data or a "
    "heartbeat arrives for it.",
    "publish_refused": "The newest commit to a table's audit branch failed a check of its "
    "publish policy (write-audit-publish), so main was not moved: its readers still see the "
    "last published state. The alert names the failed checks (GET /api/v1/tables/{ns}/"
    "{name}/publish lists every audit). Fix the batch on the branch (a new commit is audited "
    "again), or, if the check was wrong, change the policy; if main moved on its own, rebase "
    "the branch on main or cherry-pick (POST …/cherry-pick). Resolves when a later commit "
    "to the branch passes.",
    UNREADABLE_RULE: UNREADABLE_RUNBOOK,
    "no_leader": "No scheduler holds the lease: nothing is dispatched. Start a scheduler "
    "(`lakewarden scheduler`) or check its logs and its database connection.",
}


def _apply(
    session: Session,
    rule: str,
    severity: str,
    conditions: dict[str, tuple[str, dict[str, object]]],
    keep: frozenset[str] | set[str] = frozenset(),
) -> None:
    """Fire `conditions`; resolve the rule's other alerts except those in `keep`."""
    for key, (summary, details) in conditions.items():
        fire(
            session,
            rule,
            key,
            severity=severity,
            summary=summary,
            details=details,
            runbook=RUNBOOKS[rule],
        )
    resolve_absent(session, rule, set(conditions) | keep)


def label(default: str, catalog: str, namespace: str, name: str) -> str:
    """How alerts name a table: namespace.name, prefixed with its catalog when that is not
    the default one (so that tables of two catalogs never share an alert)."""
    return f"{namespace}.{name}" if catalog == default else f"{catalog}:{namespace}.{name}"


def evaluate_task_rules(session: Session, settings: Settings, now: datetime) -> None:
    """The rules the scheduler leader evaluates (it sees the task tables)."""
    # The latest finished task of each (table, kind): failed for good, a held TTL, or a
    # rewrite that committed only part of its file groups.
    # A failed one whose last run's post-rewrite validation failed is a rewrite_mismatch.
    latest = session.execute(
        text(
            f"""
            SELECT l.*, CASE WHEN {sql_in("l.state", TaskState.FAILED)} THEN (
                       SELECT r.metrics->'validation'->>'status' = 'failed' FROM job_runs r
                       WHERE r.task_id = l.id ORDER BY r.attempt DESC LIMIT 1
                   ) END IS TRUE
            FROM (
                SELECT DISTINCT ON (t.table_id, t.kind)
                       t.id, t.kind, t.state, t.reason, m.catalog, m.namespace, m.name,
                       coalesce(t.result->>'partial' = 'true', false)
                FROM tasks t JOIN managed_tables m ON m.id = t.table_id
                WHERE {sql_in("t.state", FINISHED_TASK_STATES)} AND m.retired_at IS NULL
                ORDER BY t.table_id, t.kind, t.id DESC
            ) l
            """
        )
    ).all()
    default = settings.catalog_name
    failed = {
        f"{label(default, c, ns, n)}:{kind}": (
            f"{kind} of {label(default, c, ns, n)} failed for good (task {tid}): {reason}",
            {"task_id": tid, "kind": kind, **table_details(c, ns, n)},
        )
        for tid, kind, state, reason, c, ns, n, _, mismatch in latest
        if state == TaskState.FAILED and not mismatch
    }
    mismatched = {
        f"{label(default, c, ns, n)}:{kind}": (
            f"{kind} of {label(default, c, ns, n)} changed the table's rows and was not published "
            f"(task {tid}): {reason}",
            {"task_id": tid, "kind": kind, **table_details(c, ns, n)},
        )
        for tid, kind, state, reason, c, ns, n, _, mismatch in latest
        if mismatch
    }
    held = {
        label(default, c, ns, n): (
            f"TTL of {label(default, c, ns, n)} is held (task {tid}): {reason}",
            {"task_id": tid, **table_details(c, ns, n)},
        )
        for tid, kind, state, reason, c, ns, n, _, _ in latest
        if kind == "ttl" and state == TaskState.SKIPPED and (reason or "").startswith("held:")
    }
    partial = {
        f"{label(default, c, ns, n)}:{kind}": (
            f"{kind} of {label(default, c, ns, n)} succeeded only in part (task {tid}): {reason}",
            {"task_id": tid, "kind": kind, **table_details(c, ns, n)},
        )
        for tid, kind, state, reason, c, ns, n, part, _ in latest
        if state == TaskState.SUCCEEDED and part
    }
    _apply(session, "task_failed", "critical", failed)
    _apply(session, "rewrite_mismatch", "critical", mismatched)
    _apply(session, "ttl_held", "warning", held)
    _apply(session, "task_partial", "warning", partial)

    window = timedelta(seconds=settings.alert_backlog_age_s)
    oldest = session.execute(
        text(
            "SELECT id, kind, created_at FROM tasks "
            f"WHERE {sql_in('state', WAITING_TASK_STATES)} "
            "AND not_before <= now() ORDER BY created_at LIMIT 1"
        )
    ).one_or_none()
    backlog = {}
    if oldest is not None and now - oldest[2] > window:
        age = int((now - oldest[2]).total_seconds())
        backlog["queue"] = (
            f"oldest waiting task {oldest[0]} ({oldest[1]}) has waited {age}s "
            f"> {int(window.total_seconds())}s",
            {"task_id": oldest[0], "age_s": age},
        )
    _apply(session, "backlog_stale", "warning", backlog)

    slow = session.execute(
        text(
            f"""
            WITH hist AS (
                SELECT t.table_id, t.kind,
                       percentile_cont(0.5) WITHIN GROUP (ORDER BY r.duration_ms) AS p50
                FROM job_runs r JOIN tasks t ON t.id = r.task_id
                WHERE {sql_in("r.state", RunState.SUCCEEDED)} GROUP BY t.table_id, t.kind
            )
            SELECT t.id, t.kind, extract(epoch FROM now() - r.started_at) * 1000, h.p50
            FROM tasks t
            JOIN job_runs r ON r.task_id = t.id AND {sql_in("r.state", RunState.RUNNING)}
            JOIN hist h ON h.table_id = t.table_id AND h.kind = t.kind
            WHERE {sql_in("t.state", TaskState.RUNNING)}
            """
        )
    ).all()
    slow_conditions = {
        str(tid): (
            f"task {tid} ({kind}) has run {ms / 1000:.0f}s, "
            f"{ms / p50:.1f}x its median {p50 / 1000:.0f}s",
            {"task_id": tid, "running_ms": int(ms), "median_ms": int(p50)},
        )
        for tid, kind, ms, p50 in slow
        if ms > max(settings.alert_slow_min_s * 1000, settings.alert_slow_factor * p50)
    }
    _apply(session, "job_slow", "warning", slow_conditions)

    unhealthy: dict[str, tuple[str, dict[str, object]]] = {}
    isolated = PerTable("alert rules")
    for row in session.scalars(
        select(ManagedTable).where(ManagedTable.unhealthy_since.is_not(None), LIVE)
    ).all():
        table = label(default, row.catalog, row.namespace, row.name)
        with isolated.table(table, session):
            slo = effective_policy_for(session, row).slo
            since = row.unhealthy_since
            assert since is not None
            if now - since > timedelta(minutes=slo.window_minutes):
                unhealthy[table] = (
                    f"{table} has scored {row.health_score} < SLO {slo.min_score} since "
                    f"{since.isoformat()}"
                    if row.health_score is not None
                    else f"{table} has been below SLO {slo.min_score} since "
                    f"{since.isoformat()}; its latest measurement failed",
                    {
                        "score": row.health_score,
                        "min_score": slo.min_score,
                        **table_details(row.catalog, row.namespace, row.name),
                    },
                )
    # A table whose rule could not be judged keeps its alert as it is.
    _apply(session, "table_unhealthy", "warning", unhealthy, keep=set(isolated.failed))
    isolated.record(session)
    _apply(session, "partition_overdue", "warning", _overdue_partitions(session, default))
    _apply(session, "publish_refused", "warning", _refused_publishes(session, default))


def _refused_publishes(session: Session, default: str) -> dict[str, tuple[str, dict[str, object]]]:
    """Tables whose newest audit of their audit branch failed (lakewarden.publish)."""
    rows = session.execute(
        text(
            """
            SELECT DISTINCT ON (a.table_id) a.id, a.branch, a.branch_snapshot_id, a.passed,
                   a.reason, m.catalog, m.namespace, m.name
            FROM publish_audits a JOIN managed_tables m ON m.id = a.table_id
            WHERE m.retired_at IS NULL
            ORDER BY a.table_id, a.id DESC
            """
        )
    ).all()
    return {
        label(default, r.catalog, r.namespace, r.name): (
            f"{label(default, r.catalog, r.namespace, r.name)}@{r.branch}: {r.reason}",
            {
                "audit_id": r.id,
                "branch": r.branch,
                "branch_snapshot_id": r.branch_snapshot_id,
                **table_details(r.catalog, r.namespace, r.name),
            },
        )
        for r in rows
        if not r.passed
    }


def _overdue_partitions(session: Session, default: str) -> dict[str, tuple[str, dict[str, object]]]:
    """Empty partitions past their deadline with no heartbeat, as the readiness round found
    them (one alert each, open until data or a heartbeat arrives). Only a table's current
    readiness column counts (rows of a column it no longer judges are history)."""
    rows = session.execute(
        select(PartitionReadiness, ManagedTable)
        .join(ManagedTable, ManagedTable.id == PartitionReadiness.table_id)
        .where(PartitionReadiness.overdue_since.is_not(None), ~PartitionReadiness.ready, LIVE)
        .order_by(PartitionReadiness.id)
    ).all()
    out: dict[str, tuple[str, dict[str, object]]] = {}
    columns: dict[int, str | None] = {}
    for p, row in rows:
        if row.id not in columns:
            try:
                readiness = effective_policy_for(session, row).readiness
                columns[row.id] = readiness.partition if readiness.enabled else None
            except ValueError:  # a stored policy that no longer parses: keep what fired
                columns[row.id] = p.column
        if columns[row.id] != p.column:
            continue
        table = label(default, row.catalog, row.namespace, row.name)
        out[f"{table}:{p.column}={p.partition}"] = (
            f"{table} partition {p.partition} is not ready: {p.reason}",
            {
                "partition_column": p.column,
                "partition": p.partition,
                "overdue_since": p.overdue_since,
                **table_details(row.catalog, row.namespace, row.name),
            },
        )
    return out


def evaluate_leader_rule(session: Session, settings: Settings) -> None:
    """Evaluated by every API replica: a leader cannot report its own absence. One alert
    per region without a leader (its subject is its lease: `scheduler` for the default
    region, `scheduler:<region>` for the others), so a stale region is named."""
    conditions = {}
    for region in settings.regions:
        lease = lease_name(region)
        row = session.execute(
            text(
                "SELECT holder, extract(epoch FROM now() - expires_at) FROM leader_lease "
                "WHERE name = :lease"
            ),
            {"lease": lease},
        ).one_or_none()
        if row is not None and row[1] > settings.alert_no_leader_s:
            conditions[lease] = (
                f"no scheduler of region {region} has held the lease for {int(row[1])}s "
                f"(last: {row[0]}): its tables' maintenance stalls",
                {"region": region, "last_holder": row[0], "expired_s": int(row[1])},
            )
        elif row is None:
            # Never had a leader: only an alert once work waits for one.
            waiting = session.execute(
                text(
                    f"SELECT count(*) FROM tasks WHERE {sql_in('state', WAITING_TASK_STATES)} "
                    "AND created_at < now() - make_interval(secs => :s) "
                    f"AND {in_region_sql('table_id')}"
                ),
                {"s": settings.alert_no_leader_s, "region": region},
            ).scalar()
            if waiting:
                conditions[lease] = (
                    f"no scheduler of region {region} has ever held the lease and "
                    f"{waiting} task(s) wait",
                    {"region": region, "last_holder": None, "waiting_tasks": waiting},
                )
    _apply(session, "no_leader", "critical", conditions)
