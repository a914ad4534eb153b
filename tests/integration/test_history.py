"""Bounded history on real rows: /metrics's rollups (migration 0024) equal what the old scan
of every finished task and run gave, survive pruning, and a scrape reads no history;
retention prunes old rows in fenced batches and never what is still needed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import make_test_runtime, serve
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text

from lakewarden import history
from lakewarden.db.locks import DBLocks
from lakewarden.db.migrate import set_audit_retention
from lakewarden.db.session import transaction
from lakewarden.leader import Fence, FencedOut, acquire_or_renew
from lakewarden.runtime import Runtime
from lakewarden.tasks.repo import last_success_by_kind
from services.api.routes.metrics import JOB_DURATION_BUCKETS, TASK_LATENCY_BUCKETS

# The scrape's SQL before the rollups (main before issue 31): the reference.
_FINISHED = "('succeeded', 'skipped', 'failed')"


def _old_histogram(value: str, source: str, buckets: tuple[float, ...]) -> str:
    counts = ", ".join(f"count(*) FILTER (WHERE v <= {float(le)!r})" for le in buckets)
    return (
        f"SELECT kind, {counts}, coalesce(sum(v), 0), count(*) "
        f"FROM (SELECT kind, {value} AS v {source}) AS rows GROUP BY kind"
    )


OLD_SCAN = {
    "tasks": "SELECT kind, state, count(*) FROM tasks GROUP BY 1, 2",
    "runs": "SELECT t.kind, r.state, count(*) FROM job_runs r JOIN tasks t ON t.id = r.task_id "
    "GROUP BY 1, 2",
    "latency": _old_histogram(
        "extract(epoch FROM updated_at - created_at)",
        f"FROM tasks WHERE state IN {_FINISHED}",
        TASK_LATENCY_BUCKETS,
    ),
    "duration": _old_histogram(
        "r.duration_ms / 1000.0",
        "FROM job_runs r JOIN tasks t ON t.id = r.task_id WHERE r.duration_ms IS NOT NULL",
        JOB_DURATION_BUCKETS,
    ),
}
TERMINAL = {"succeeded", "skipped", "failed", "cancelled"}


def sql(rt: Runtime, statement: str, **params: Any) -> list[Any]:
    with rt.engine.begin() as c:
        result = c.execute(text(statement), params)
        return list(result) if result.returns_rows else []


def lead(rt: Runtime) -> Fence:
    with rt.engine.begin() as c:
        fence = acquire_or_renew(c, DBLocks.SCHEDULER_LEASE, "test-leader", 60)
    assert fence is not None
    return fence


def a_table(rt: Runtime, name: str = "t") -> int:
    (row,) = sql(
        rt,
        "INSERT INTO managed_tables (catalog, namespace, name, policy) "
        "VALUES ('lake', 'ns', :n, '{}') RETURNING id",
        n=name,
    )
    return int(row[0])


def expected(rt: Runtime) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The samples the old scan made, keyed like `scraped`."""
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for kind, state, n in sql(rt, OLD_SCAN["tasks"]):
        out[("lakewarden_tasks", (("kind", kind), ("state", state)))] = n
        if state in TERMINAL:
            out[("lakewarden_tasks_finished_total", (("kind", kind), ("outcome", state)))] = n
    for kind, state, n in sql(rt, OLD_SCAN["runs"]):
        if state == "running":
            out[("lakewarden_job_runs_running", (("kind", kind),))] = n
        else:
            out[("lakewarden_job_runs_total", (("kind", kind), ("state", state)))] = n
    for name, key, buckets in (
        ("lakewarden_task_latency_seconds", "latency", TASK_LATENCY_BUCKETS),
        ("lakewarden_job_duration_seconds", "duration", JOB_DURATION_BUCKETS),
    ):
        for kind, *counts, total, n in sql(rt, OLD_SCAN[key]):
            for le, c in zip(buckets, counts, strict=True):
                out[(f"{name}_bucket", (("kind", kind), ("le", str(float(le)))))] = c
            out[(f"{name}_bucket", (("kind", kind), ("le", "+Inf")))] = n
            out[(f"{name}_count", (("kind", kind),))] = n
            out[(f"{name}_sum", (("kind", kind),))] = round(float(total), 3)
    return out


def scraped(rt: Runtime) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The same families' samples from /metrics."""
    names = {
        "lakewarden_tasks",
        "lakewarden_tasks_finished",
        "lakewarden_job_runs",
        "lakewarden_job_runs_running",
        "lakewarden_task_latency_seconds",
        "lakewarden_job_duration_seconds",
    }
    with serve(rt) as client:
        body = client.get("/metrics").text
    out = {}
    for family in text_string_to_metric_families(body):
        if family.name in names:
            for s in family.samples:
                if s.name.endswith("_created"):
                    continue
                value = round(s.value, 3) if s.name.endswith("_sum") else s.value
                out[(s.name, tuple(sorted(s.labels.items())))] = value
    return out


def insert_task(rt: Runtime, table: int, kind: str, state: str, ago: float, latency: float) -> int:
    (row,) = sql(
        rt,
        "INSERT INTO tasks (table_id, kind, state, trigger, created_at, updated_at) VALUES "
        "(:t, :k, :s, '{}', now() - make_interval(secs => :ago), "
        "now() - make_interval(secs => :ago - :lat)) RETURNING id",
        t=table,
        k=kind,
        s=state,
        ago=ago,
        lat=latency,
    )
    return int(row[0])


def insert_run(rt: Runtime, task: int, attempt: int, state: str, duration_ms: int | None) -> int:
    (row,) = sql(
        rt,
        "INSERT INTO job_runs (task_id, attempt, state, scheduler_id, leader_epoch, duration_ms) "
        "VALUES (:t, :a, :s, 's', 1, :d) RETURNING id",
        t=task,
        a=attempt,
        s=state,
        d=duration_ms,
    )
    return int(row[0])


def test_rollups_equal_the_old_scan_after_a_mix_of_finished_tasks_and_runs(rt: Runtime) -> None:
    table = a_table(rt)
    fence = lead(rt)
    # Finished at birth, on every side of the buckets' bounds (0.5 s to 2 days).
    for i, (kind, state, latency) in enumerate(
        (
            ("compaction", "succeeded", 0.5),
            ("compaction", "succeeded", 5),
            ("compaction", "failed", 61),
            ("compaction", "skipped", 3600),
            ("compaction", "cancelled", 10),
            ("expire_snapshots", "succeeded", 172_800),
            ("expire_snapshots", "failed", 86_400),
        )
    ):
        task = insert_task(rt, table, kind, state, 200_000 + i, latency)
        if state != "cancelled":
            insert_run(rt, task, 1, "succeeded" if state == "succeeded" else "failed", 1000 * i)
    # Open work, some of it with a running run.
    running = insert_task(rt, table, "rewrite_manifests", "running", 100, 0)
    run = insert_run(rt, running, 1, "running", None)
    insert_task(rt, table, "orphan_files", "pending", 50, 0)
    assert scraped(rt) == expected(rt)

    # Half of the history folded, then more work finishes.
    history.fold_metric_deltas(rt, fence)
    assert sql(rt, "SELECT count(*) FROM metric_deltas") == [(0,)]
    assert scraped(rt) == expected(rt)
    # The running task and its run end (an update, as the scheduler's finish does).
    sql(rt, "UPDATE job_runs SET state = 'succeeded', duration_ms = 7200500 WHERE id = :i", i=run)
    sql(rt, "UPDATE tasks SET state = 'succeeded', updated_at = now() WHERE id = :i", i=running)
    # A failed task retried: it moves back to pending (the counter drops, as the scan did),
    # and runs again under a second attempt.
    (failed,) = sql(rt, "SELECT id FROM tasks WHERE kind = 'compaction' AND state = 'failed'")
    sql(rt, "UPDATE tasks SET state = 'pending' WHERE id = :i", i=failed[0])
    insert_run(rt, failed[0], 2, "abandoned", 3000)
    # A finished task touched again (its end time moves: the latency moves bucket).
    sql(
        rt,
        "UPDATE tasks SET updated_at = updated_at + interval '1 hour' "
        "WHERE kind = 'expire_snapshots' AND state = 'failed'",
    )
    # Many at once: a set-based finish of 500 tasks.
    sql(
        rt,
        "INSERT INTO tasks (table_id, kind, state, trigger, created_at, updated_at) "
        "SELECT :t, 'compaction', CASE WHEN g % 3 = 0 THEN 'failed' ELSE 'succeeded' END, '{}', "
        "now() - make_interval(secs => g * 7), now() FROM generate_series(1, 500) AS g",
        t=table,
    )
    assert scraped(rt) == expected(rt)
    history.fold_metric_deltas(rt, fence)
    assert scraped(rt) == expected(rt)
    # Each table's last success per kind, kept as tasks succeed, is what the scan found.
    scanned = sql(
        rt,
        "SELECT table_id, kind, max(updated_at) FROM tasks WHERE state = 'succeeded' GROUP BY 1, 2",
    )
    with transaction(rt.engine) as s:
        kept = last_success_by_kind(s, [table])
    assert {(t, k): at for t, kinds in kept.items() for k, at in kinds.items()} == {
        (t, k): at for t, k, at in scanned
    }


def test_a_scrape_reads_no_history(rt: Runtime) -> None:
    """Guard: 20,000 finished tasks with a run each; a scrape reads a handful of rows of
    tasks and job_runs, not the history (the old scan read all 40,000)."""
    table = a_table(rt)
    sql(
        rt,
        "INSERT INTO tasks (table_id, kind, state, trigger, created_at, updated_at) "
        "SELECT :t, 'compaction', 'succeeded', '{}', now() - interval '1 hour', now() "
        "FROM generate_series(1, 20000)",
        t=table,
    )
    sql(
        rt,
        "INSERT INTO job_runs (task_id, attempt, state, scheduler_id, leader_epoch, duration_ms) "
        "SELECT id, 1, 'succeeded', 's', 1, 5000 FROM tasks",
    )
    history.fold_metric_deltas(rt, lead(rt))
    sql(rt, "ANALYZE tasks; ANALYZE job_runs")
    from services.api.routes.metrics import LakewardenCollector

    # Rows read, as this backend counts them. Since Postgres 15 a backend's counts of
    # earlier transactions may not be flushed yet (at most once a second, when idle) and
    # still show here, so the scrape's reads are the difference within one transaction.
    reads = text(
        "SELECT relname, coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) "
        "FROM pg_stat_xact_user_tables WHERE relname IN ('tasks', 'job_runs') ORDER BY 1"
    )
    with transaction(rt.engine) as s:
        before: dict[str, int] = dict(s.execute(reads).tuples().all())
        families = {m.name: m for m in LakewardenCollector(s, rt.settings).collect()}
        after: dict[str, int] = dict(s.execute(reads).tuples().all())
    read = {name: n - before.get(name, 0) for name, n in after.items()}
    (finished,) = families["lakewarden_tasks_finished"].samples
    assert finished.value == 20000
    assert all(n < 100 for n in read.values()), read


def test_counters_do_not_drop_when_history_is_pruned(db_url: str, tmp_path: Path) -> None:
    """Guard: the old scan's counters dropped as rows went (a reset to Prometheus on each
    prune); the rollups keep what finished."""
    rt = make_test_runtime(db_url, tmp_path, retention_tasks_days=1)
    table = a_table(rt)
    for i in range(5):
        insert_task(rt, table, "compaction", "succeeded", 10 * 86_400 + i, 60)
    before = scraped(rt)
    key = (("kind", "compaction"), ("outcome", "succeeded"))
    assert before[("lakewarden_tasks_finished_total", key)] == 5
    history.prune_history(rt, lead(rt))
    # The newest success stays, and the newest task (the last inserted).
    assert sql(rt, "SELECT count(*) FROM tasks") == [(2,)]
    assert scraped(rt) == before
    rt.engine.dispose()


def old(days: float) -> str:
    return f"now() - interval '{days} days'"


def test_retention_prunes_old_rows_but_never_what_is_still_needed(
    db_url: str, tmp_path: Path
) -> None:
    rt = make_test_runtime(
        db_url,
        tmp_path,
        retention_tasks_days=30,
        retention_transitions_days=30,
        retention_runs_days=30,
        retention_events_days=30,
        retention_alerts_days=30,
        retention_batch_size=2,  # several batches per kind
    )
    a, b = a_table(rt, "a"), a_table(rt, "b")

    def task(table: int, kind: str, state: str, days: float, event: int | None = None) -> int:
        trigger = f'{{"source": "event", "event_id": {event}}}' if event else "{}"
        (row,) = sql(
            rt,
            "INSERT INTO tasks (table_id, kind, state, trigger, created_at, updated_at) "
            f"VALUES (:t, :k, :s, CAST(:trigger AS jsonb), {old(days + 1)}, {old(days)}) "
            "RETURNING id",
            t=table,
            k=kind,
            s=state,
            trigger=trigger,
        )
        task_id = int(row[0])
        sql(
            rt,
            "INSERT INTO task_transitions (task_id, from_state, to_state, actor, at) "
            f"VALUES (:i, NULL, 'pending', 'test', {old(days + 1)}), "
            f"(:i, 'pending', :s, 'test', {old(days)})",
            i=task_id,
            s=state,
        )
        sql(
            rt,
            "INSERT INTO job_runs (task_id, attempt, state, scheduler_id, leader_epoch, "
            f"started_at) VALUES (:i, 1, :s, 's', 1, {old(days)})",
            i=task_id,
            s="running" if state == "running" else "failed",
        )
        return task_id

    def event(table: int, snapshot: int, sequence: int | None, days: float, decided: bool) -> int:
        (row,) = sql(
            rt,
            "INSERT INTO timeline_events (table_id, snapshot_id, sequence_number, summary, "
            f"source, received_at, decision) VALUES (:t, :s, :q, '{{}}', 'poll', {old(days)}, "
            ":d) RETURNING id",
            t=table,
            s=snapshot,
            q=sequence,
            d="no-action" if decided else None,
        )
        return int(row[0])

    # Events of table a: the commit cursor (highest sequence number) came in first.
    cursor = event(a, 1, 100, 60, True)
    gone_events = [event(a, s, s, 60, True) for s in (2, 3, 4)]
    undecided = event(a, 5, 5, 60, False)
    opened_by = event(a, 6, 6, 60, True)
    newest_a = event(a, 7, 7, 60, True)
    recent = event(b, 8, 8, 1, True)
    only_b = event(b, 9, None, 60, True)  # no sequence number, and not b's newest: pruned
    newest_b = event(b, 10, None, 60, True)

    # Tasks of table a, compaction: old ones, then the newest success, then the newest.
    gone_tasks = [task(a, "compaction", s, 60) for s in ("succeeded", "failed", "cancelled")]
    newest_success = task(a, "compaction", "succeeded", 50)
    newest_task = task(a, "compaction", "failed", 40)
    open_task = task(a, "expire_snapshots", "running", 60, event=opened_by)
    recent_task = task(b, "compaction", "failed", 1)
    older_recent = task(b, "compaction", "succeeded", 2)  # b's newest success, recent anyway

    for state, days in (("resolved", 60), ("resolved", 1), ("firing", 60), ("acknowledged", 60)):
        sql(
            rt,
            "INSERT INTO alerts (rule, key, severity, state, summary, details, first_seen, "
            f"resolved_at) VALUES ('r', :k, 'warning', :s, 's', '{{}}', {old(days)}, "
            f"CASE WHEN :resolved THEN {old(days)} END)",
            k=f"{state}-{days}",
            s=state,
            resolved=state == "resolved",
        )

    # An elastic pool's capacity changes: the old ones go, never a pool's newest.
    for pool, days in (("big", 60), ("big", 50), ("big", 40), ("etl", 60), ("etl", 1)):
        sql(
            rt,
            "INSERT INTO capacity_decisions (pool, before, after, reason, queued, running, "
            f"holder, leader_epoch, at) VALUES (:p, 1, 2, 'up', 3, 1, 'x', 1, {old(days)}) "
            "RETURNING id",
            p=pool,
        )

    # A deposed leader prunes nothing.
    fence = lead(rt)
    with pytest.raises(FencedOut):
        history.prune_history(rt, Fence(fence.lease, fence.holder, fence.epoch - 1))
    assert sql(rt, "SELECT count(*) FROM tasks") == [(8,)]

    pruned = {p.kind: p.rows for p in history.prune_history(rt, fence)}
    assert pruned == {
        "transitions": 10,
        "runs": 5,
        "tasks": 3,
        "events": 4,
        "capacity_decisions": 3,
        "alerts": 1,
        "audit_months": 0,
    }

    def ids(table: str, where: str = "true") -> set[int]:
        return {r[0] for r in sql(rt, f"SELECT id FROM {table} WHERE {where}")}

    kept_tasks = {newest_success, newest_task, open_task, recent_task, older_recent}
    assert ids("tasks") == kept_tasks and not ids("tasks") & set(gone_tasks)
    # The open task keeps its transitions and run; recent tasks keep theirs.
    assert {r[0] for r in sql(rt, "SELECT task_id FROM task_transitions")} == {
        open_task,
        recent_task,
        older_recent,
    }
    assert {r[0] for r in sql(rt, "SELECT task_id FROM job_runs")} == {
        open_task,
        recent_task,
        older_recent,
    }
    assert ids("timeline_events") == {
        cursor,
        undecided,
        opened_by,
        newest_a,
        recent,
        newest_b,
    }
    assert only_b not in ids("timeline_events") and not ids("timeline_events") & set(gone_events)
    assert {r[0] for r in sql(rt, "SELECT key FROM alerts")} == {
        "resolved-1",
        "firing-60",
        "acknowledged-60",
    }
    assert sql(
        rt, "SELECT pool, at < now() - interval '30 days' FROM capacity_decisions ORDER BY id"
    ) == [
        ("big", True),
        ("etl", False),
    ]
    # A second round finds nothing more.
    assert all(p.rows == 0 for p in history.prune_history(rt, fence))
    rt.engine.dispose()


def test_retention_zero_keeps_for_ever(db_url: str, tmp_path: Path) -> None:
    rt = make_test_runtime(
        db_url,
        tmp_path,
        retention_tasks_days=0,
        retention_transitions_days=0,
        retention_runs_days=0,
        retention_events_days=0,
        retention_alerts_days=0,
        retention_audit_months=0,
    )
    table = a_table(rt)
    for i in range(3):
        insert_task(rt, table, "compaction", "failed", 400 * 86_400 + i, 1)
    assert history.prune_history(rt, lead(rt)) == []
    assert sql(rt, "SELECT count(*) FROM tasks") == [(3,)]
    rt.engine.dispose()


def test_audit_months_past_retention_are_dropped_whole_and_rows_never_deleted(
    rt: Runtime,
) -> None:
    def audit_at(months_ago: int) -> None:
        sql(
            rt,
            "INSERT INTO audit_log (at, actor, method, path, action, status, outcome) VALUES "
            "(now() - make_interval(months => :m), 'token:t', 'POST', '/x', 'x', 200, 'ok')",
            m=months_ago,
        )

    # Rows before the months had partitions land in the default partition, kept for ever.
    audit_at(30)
    for months in (20, 14, 13, 12, 1, 0):
        sql(rt, "SELECT lakewarden_audit_partition(now() - make_interval(months => :m))", m=months)
        audit_at(months)
    with rt.engine.begin() as c:
        set_audit_retention(c, 13)
    fence = lead(rt)
    (pruned,) = [p for p in history.prune_history(rt, fence) if p.kind == "audit_months"]
    # This month and the 13 before it stay; the two older months went whole.
    assert pruned.rows == 2
    left = sql(
        rt,
        "SELECT (extract(year FROM age(date_trunc('month', now()), date_trunc('month', at))) * 12"
        " + extract(month FROM age(date_trunc('month', now()), date_trunc('month', at))))::int"
        " FROM audit_log ORDER BY at",
    )
    assert [m for (m,) in left] == [30, 13, 12, 1, 0]
    assert sql(rt, "SELECT count(*) FROM audit_log_default") == [(1,)]
    # The coming months are there; a second round drops nothing more.
    assert sql(
        rt,
        "SELECT to_regclass('audit_log_p' || to_char(now() + interval '2 months', "
        "'YYYYMM')) IS NOT NULL",
    ) == [(True,)]
    assert history.maintain_audit_partitions(rt, fence) == 0
    # Still append-only, through the parent and through a month.
    with pytest.raises(Exception, match="append-only"):
        sql(rt, "DELETE FROM audit_log")
    with pytest.raises(Exception, match="append-only"):
        sql(rt, "DELETE FROM audit_log_default")
    with pytest.raises(Exception, match="append-only"):
        sql(rt, "TRUNCATE audit_log_default")


def test_spark_cpu_is_a_counter_per_kind_from_the_rollups(rt: Runtime) -> None:
    """Each ended run's `metrics.cost.executor_cpu_s` (issue 32 §3) adds to
    lakewarden_spark_executor_cpu_seconds_total{kind}, whether the run was inserted ended or
    ended by an update, and before or after a fold; a run without Spark metrics adds none."""
    table = a_table(rt)
    task = insert_task(rt, table, "compaction", "succeeded", 60, 10)
    ended = insert_run(rt, task, 1, "failed", 1000)
    sql(
        rt,
        'UPDATE job_runs SET metrics = \'{"cost": {"executor_cpu_s": 1.5}}\' WHERE id = :r',
        r=ended,
    )  # metrics alone: no state change, no delta (the finish sets both at once)
    running = insert_run(rt, task, 2, "running", None)
    history.fold_metric_deltas(rt, lead(rt))
    sql(
        rt,
        "UPDATE job_runs SET state = 'succeeded', duration_ms = 4000, "
        'metrics = \'{"cost": {"executor_cpu_s": 2.5}}\' WHERE id = :r',
        r=running,
    )
    insert_run(rt, insert_task(rt, table, "clean", "succeeded", 30, 1), 1, "succeeded", 500)
    with serve(rt) as client:
        body = client.get("/metrics").text
    lines = [ln for ln in body.splitlines() if ln.startswith("lakewarden_spark_executor_cpu")]
    assert lines == ['lakewarden_spark_executor_cpu_seconds_total{kind="compaction"} 2.5'], lines
