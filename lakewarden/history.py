"""Bounded history, kept by the scheduler leader: the metric rollups folded, and rows past
their retention pruned in small fenced batches.

Fold: the triggers of migration 0024 append each finished task's and ended run's share of
/metrics's counters and histograms to `metric_deltas`; one statement moves them into
`metric_counts` (the rows it deletes are the rows it adds: a concurrent scrape, or a
second folder, sees them once).

Prune (`retention_*_days`; 0 keeps a kind of row for ever): each kind is deleted oldest
first, `retention_batch_size` rows per short transaction that first checks the fence, so
a deposed leader stops at its next batch and no transaction holds the lease row for long.
Never pruned, whatever their age: an open task, its transitions and runs, and the event
that opened it; each table's newest task of each kind and newest success of each kind
(the sweep's due-ness, the last-success series); each table's newest event and its
commit cursor (the newest by sequence number); an event not yet judged; an alert not
resolved. Counters do not drop when rows go (the rollups ignore deletes).

The audit log is never deleted from: it is partitioned by month (migration 0025), and the
owner's `lakewarden_audit_maintain()` makes the coming months' partitions and drops whole
months past the retention `migrate` set (`retention_audit_months`); the leader calls it
with each round.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlalchemy import text

from lakewarden.db.session import transaction
from lakewarden.leader import Fence, check_fence
from lakewarden.runtime import Runtime
from lakewarden.states import OPEN_TASK_STATES, TERMINAL_TASK_STATES, TaskState, sql_in

log = logging.getLogger(__name__)

FOLD_SQL = text(
    """
    WITH moved AS (DELETE FROM metric_deltas RETURNING family, kind, label, n, total)
    INSERT INTO metric_counts AS c (family, kind, label, n, total)
    SELECT family, kind, label, sum(n), sum(total) FROM moved GROUP BY 1, 2, 3
    ON CONFLICT (family, kind, label)
    DO UPDATE SET n = c.n + excluded.n, total = c.total + excluded.total
    """
)

_OPEN = sql_in("state", OPEN_TASK_STATES)
_TERMINAL = sql_in("t.state", TERMINAL_TASK_STATES)
_SUCCEEDED = sql_in("n.state", TaskState.SUCCEEDED)

# Each: the ids of at most :batch rows to delete, oldest first, older than :cutoff.
PRUNABLE: dict[str, tuple[str, str]] = {
    "transitions": (
        "task_transitions",
        "SELECT x.id FROM task_transitions x JOIN tasks t ON t.id = x.task_id "
        f"WHERE x.at < :cutoff AND {_TERMINAL} ORDER BY x.id LIMIT :batch",
    ),
    "runs": (
        "job_runs",
        "SELECT x.id FROM job_runs x JOIN tasks t ON t.id = x.task_id "
        f"WHERE x.started_at < :cutoff AND {_TERMINAL} AND x.state <> 'running' "
        "ORDER BY x.id LIMIT :batch",
    ),
    "tasks": (
        "tasks",
        f"SELECT t.id FROM tasks t WHERE {_TERMINAL} AND t.updated_at < :cutoff "
        "AND EXISTS (SELECT FROM tasks n WHERE n.table_id = t.table_id AND n.kind = t.kind "
        "AND n.id > t.id) "
        "AND (t.state <> 'succeeded' OR EXISTS (SELECT FROM tasks n WHERE "
        f"n.table_id = t.table_id AND n.kind = t.kind AND {_SUCCEEDED} "
        "AND (n.updated_at, n.id) > (t.updated_at, t.id))) "
        "ORDER BY t.id LIMIT :batch",
    ),
    "events": (
        "timeline_events",
        "SELECT x.id FROM timeline_events x WHERE x.received_at < :cutoff "
        "AND x.decision IS NOT NULL "
        "AND EXISTS (SELECT FROM timeline_events n WHERE n.table_id = x.table_id "
        "AND n.id > x.id) "
        "AND (x.sequence_number IS NULL OR EXISTS (SELECT FROM timeline_events n "
        "WHERE n.table_id = x.table_id AND n.sequence_number > x.sequence_number)) "
        "AND x.id NOT IN (SELECT (trigger->>'event_id')::bigint FROM tasks "
        f"WHERE {_OPEN} AND trigger->>'event_id' IS NOT NULL) "
        "ORDER BY x.id LIMIT :batch",
    ),
    # an elastic pool's capacity changes; never its newest (why it is where it is)
    "capacity_decisions": (
        "capacity_decisions",
        "SELECT x.id FROM capacity_decisions x WHERE x.at < :cutoff "
        "AND EXISTS (SELECT FROM capacity_decisions n WHERE n.pool = x.pool AND n.id > x.id) "
        "ORDER BY x.id LIMIT :batch",
    ),
    "alerts": (
        "alerts",
        "SELECT x.id FROM alerts x WHERE x.state = 'resolved' AND x.resolved_at < :cutoff "
        "ORDER BY x.id LIMIT :batch",
    ),
}


@dataclass(frozen=True)
class Pruned:
    kind: str
    rows: int


def fold_metric_deltas(rt: Runtime, fence: Fence) -> None:
    """Move the appended metric deltas into the counts (one statement, fenced)."""
    with transaction(rt.engine) as s:
        check_fence(s, fence)
        s.execute(FOLD_SQL)


def retention_days(rt: Runtime) -> dict[str, float]:
    """Each prunable kind's retention in days, from the settings (0: kept for ever)."""
    s = rt.settings
    return {
        "transitions": s.retention_transitions_days,
        "runs": s.retention_runs_days,
        "tasks": s.retention_tasks_days,
        "events": s.retention_events_days,
        "capacity_decisions": s.retention_transitions_days,
        "alerts": s.retention_alerts_days,
    }


def prune_history(rt: Runtime, fence: Fence) -> list[Pruned]:
    """Delete every kind's rows past its retention, in batches. Raises FencedOut at the
    first batch after the lease moved on."""
    out = []
    batch = rt.settings.retention_batch_size
    for kind, days in retention_days(rt).items():
        if not days:
            continue
        table, ids = PRUNABLE[kind]
        delete = text(f"DELETE FROM {table} WHERE id IN ({ids})")  # our constants
        total = 0
        while True:
            with transaction(rt.engine) as s:
                check_fence(s, fence)
                cutoff = s.execute(
                    text("SELECT now() - make_interval(secs => :s)"), {"s": days * 86_400}
                ).scalar_one()
                result = s.execute(delete, {"cutoff": cutoff, "batch": batch})
                n = int(result.rowcount)  # type: ignore[attr-defined]
            total += n
            if n < batch:
                break
        if total:
            log.info("pruned %d %s past %g days", total, kind, days)
        out.append(Pruned(kind, total))
    dropped = maintain_audit_partitions(rt, fence)
    if dropped or rt.settings.retention_audit_months:
        out.append(Pruned("audit_months", dropped))
    return out


def maintain_audit_partitions(rt: Runtime, fence: Fence) -> int:
    """Make the audit log's coming months and drop those past retention (the owner's
    function, migration 0025); returns how many months were dropped. Dropping a month
    locks the audit log for a moment: never wait long for that lock behind others."""
    with transaction(rt.engine) as s:
        check_fence(s, fence)
        s.execute(text("SET LOCAL lock_timeout = '5s'"))
        dropped = int(s.execute(text("SELECT lakewarden_audit_maintain()")).scalar_one())
    if dropped:
        log.info("dropped %d month(s) of the audit log past retention", dropped)
    return dropped
