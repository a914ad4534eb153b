"""B41 (issue 31 goal 1): evaluation's read of a table's task history as its events pile up.

Every commit's evaluation reads, per table and kind, the data files writers added since the
kind's last task (`lakewarden.evaluate._HISTORY_FACTS`). Before, that read was an OR with
NULL, which no index serves: each evaluation read the table's whole retained history, and
the sustained ingest rate fell as history grew (B25's 885 s run). Migration 0033 made it a
range of `ix_timeline_events_table_received`, which still grows while a task stays open
(B25's tasks never finish); migration 0034 replaced it by the table's running sum less the
task's mark (two probes). BEFORE is now 0033's range; `LAKEWARDEN_BENCH_B41_SINCE` sets
the events since the last task (50; 1,000 is B25 after 100 rounds).

Measured in one run on the same rows: `TABLES` tables with `EVENTS` events each, the last
task of each created `SINCE` events ago; the statement for a batch of 25 tables (B25's
batch), the one before (kept below) against today's, alternated, on the same rows.
"""

from __future__ import annotations

import os
import statistics
import time
import uuid

from sqlalchemy import text

from benchmarks.harness import Context, Figure, Stat, measuring
from lakewarden.evaluate import _HISTORY_FACTS

BATCH = 25
# Events since the last task: B25's open tasks see 10 a round, 1,000 after 100 rounds.
SINCE = int(os.environ.get("LAKEWARDEN_BENCH_B41_SINCE", "50"))
SIZES = {"smoke": (25, 200), "full": (100, 2_000)}  # tables, events per table
ROUNDS = 20
# The statement before migration 0034 (the events since the kind's last task summed, a
# range of ix_timeline_events_table_received that grows while a task stays open), for
# the side-by-side; today's subtracts the task's mark from the table's running sum.
BEFORE = text(
    """
    SELECT p.table_id, p.kind, last.state,
        (SELECT coalesce(sum((e.summary->>'added-data-files')::bigint), 0)
         FROM timeline_events e
         WHERE e.table_id = p.table_id AND e.operation <> 'replace'
           AND e.received_at > coalesce(since.at, '-infinity'::timestamptz)) AS added
    FROM unnest(CAST(:table_ids AS bigint[]), CAST(:kinds AS varchar[])) AS p(table_id, kind)
    CROSS JOIN LATERAL (SELECT max(t.created_at) AS at FROM tasks t
                        WHERE t.table_id = p.table_id AND t.kind = p.kind) since
    LEFT JOIN LATERAL (SELECT t.state FROM tasks t
                       WHERE t.table_id = p.table_id AND t.kind = p.kind
                       ORDER BY t.id DESC LIMIT 1) last ON true
    """
)


def _fill(ctx: Context, namespace: str, tables: int, events: int) -> list[int]:
    with ctx.rt.engine.begin() as conn:
        ids = [
            r[0]
            for r in conn.execute(
                text(
                    "INSERT INTO managed_tables (catalog, namespace, name, policy) "
                    "SELECT 'b41', :ns, 't' || g, '{}' FROM generate_series(1, :n) g "
                    "RETURNING id"
                ),
                {"ns": namespace, "n": tables},
            )
        ]
        conn.execute(
            text(
                """
                INSERT INTO timeline_events
                    (table_id, snapshot_id, operation, summary, source, received_at)
                SELECT t, g, 'append', '{"added-data-files": "2"}'::jsonb, 'poll',
                       now() - make_interval(secs => :e - g)
                FROM generate_series(1, :e) g, unnest(CAST(:ids AS bigint[])) t
                ORDER BY g, t  -- as commits arrive: the tables' events interleaved on disk
                """
            ),
            {"ids": ids, "e": events},
        )
        conn.execute(
            text(
                "INSERT INTO tasks (table_id, kind, state, trigger, created_at) "
                "SELECT t, 'compaction', 'succeeded', '{}', "
                "now() - make_interval(secs => :since) - interval '0.5 seconds' "
                "FROM unnest(CAST(:ids AS bigint[])) t"
            ),
            {"ids": ids, "since": SINCE},
        )
        conn.execute(text("ANALYZE timeline_events"))
        conn.execute(text("ANALYZE tasks"))
    return ids


def _time(ctx: Context, statement: object, batch: list[int]) -> tuple[float, int]:
    params = {"table_ids": batch, "kinds": ["compaction"] * len(batch)}
    with ctx.rt.engine.connect() as conn:
        started = time.perf_counter()
        rows = conn.execute(statement, params).all()  # type: ignore[call-overload]
        return (time.perf_counter() - started) * 1000, int(rows[0][3])


def b41(ctx: Context) -> Figure:
    tables, events = SIZES["smoke" if ctx.sizes.name == "smoke" else "full"]
    with measuring(
        "B41",
        f"evaluation's task-history read for a batch of {BATCH} tables with {events} events "
        f"each (the last task {SINCE} events ago): the statement before / today's",
        "the statement before migration 0034 (0033's range of the events since), "
        "alternated, same rows",
        "report",
    ) as fig:
        namespace = f"b41_{uuid.uuid4().hex[:6]}"
        ids = _fill(ctx, namespace, tables, events)
        try:
            batch = ids[:BATCH]
            before, after, ratios = [], [], []
            for _ in range(ROUNDS):
                old_ms, old_added = _time(ctx, BEFORE, batch)
                new_ms, new_added = _time(ctx, _HISTORY_FACTS, batch)
                if old_added != new_added or not 0 < new_added < 2 * events:
                    raise AssertionError(f"added {old_added} before, {new_added} now")
                before.append(old_ms)
                after.append(new_ms)
                ratios.append(old_ms / new_ms)
            fig.values = {
                "before_ms": Stat.of(before).as_json(),
                "after_ms": Stat.of(after).as_json(),
                "tables": tables,
                "events_per_table": events,
            }
            fig.ratio = Stat.of(ratios)
            fig.ratio_label = "times faster than the statement before"
            fig.notes.append(
                f"medians {statistics.median(before):.1f} ms -> "
                f"{statistics.median(after):.1f} ms per batch of {BATCH} tables"
            )
        finally:
            with ctx.rt.engine.begin() as conn:
                conn.execute(
                    text("DELETE FROM managed_tables WHERE namespace = :ns"), {"ns": namespace}
                )
    return fig
