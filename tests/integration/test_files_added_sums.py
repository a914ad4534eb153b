"""Evaluation's "data files added since the kind's last task" from running sums (migration
0034): the table's sum now less the sum the task marked as it was created, the same number
the events since would sum to, and no read of those events (issue 31 goal 1: with a task
open, that read grew with every commit)."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import text

from lakewarden.db.session import transaction
from lakewarden.evaluate import _HISTORY_FACTS, history_facts
from lakewarden.runtime import Runtime


def _table(rt: Runtime, name: str) -> int:
    with rt.engine.begin() as c:
        return int(
            c.execute(
                text(
                    "INSERT INTO managed_tables (catalog, namespace, name, policy) "
                    "VALUES ('c', 'sums', :n, '{}') RETURNING id"
                ),
                {"n": name},
            ).scalar_one()
        )


def _events(rt: Runtime, table_id: int, first: int, added: list[int], op: str = "append") -> None:
    """One commit per count, in one statement (as ingest inserts a batch)."""
    with rt.engine.begin() as c:
        c.execute(
            text(
                "INSERT INTO timeline_events (table_id, snapshot_id, operation, summary, source) "
                "SELECT :t, :first + n, :op, "
                "jsonb_build_object('added-data-files', a::text), 'poll' "
                "FROM unnest(CAST(:added AS int[])) WITH ORDINALITY AS u(a, n)"
            ),
            {"t": table_id, "first": first, "op": op, "added": added},
        )


def _task(rt: Runtime, table_id: int, kind: str, state: str, ago_s: float = 0) -> None:
    with rt.engine.begin() as c:
        c.execute(
            text(
                "INSERT INTO tasks (table_id, kind, state, trigger, created_at) "
                "VALUES (:t, :k, :s, '{}', now() - make_interval(secs => :ago))"
            ),
            {"t": table_id, "k": kind, "s": state, "ago": ago_s},
        )


def _facts(rt: Runtime, pairs: list[tuple[int, str]]) -> dict[tuple[int, str], Any]:
    with transaction(rt.engine) as s:
        return history_facts(s, pairs)


def test_files_added_since_the_last_task_match_the_events_since(rt: Runtime) -> None:
    a, b = _table(rt, "a"), _table(rt, "b")
    # no task yet: every file writers added (our own rewrites, 'replace', not counted)
    _events(rt, a, 0, [3, 4])
    _events(rt, a, 10, [100], op="replace")
    _events(rt, b, 0, [7])
    assert _facts(rt, [(a, "compaction"), (b, "compaction")]) == {
        (a, "compaction"): (7, None),
        (b, "compaction"): (7, None),
    }
    # a task opens: nothing added since; then commits arrive, and another kind sees all
    _task(rt, a, "compaction", "pending")
    assert _facts(rt, [(a, "compaction")]) == {(a, "compaction"): (0, "pending")}
    _events(rt, a, 20, [5, 1, 2])
    _events(rt, a, 30, [50], op="replace")
    assert _facts(rt, [(a, "compaction"), (a, "clustering")]) == {
        (a, "compaction"): (8, "pending"),
        (a, "clustering"): (15, None),
    }
    # a task inserted with a past created_at has not seen the events received after it:
    # they count, as the events since it would sum
    _task(rt, b, "compaction", "succeeded", ago_s=3600)
    assert _facts(rt, [(b, "compaction")]) == {(b, "compaction"): (7, "succeeded")}
    # a task from before migration 0034 has no mark: the events since it are summed
    with rt.engine.begin() as c:
        c.execute(text("UPDATE tasks SET files_added_mark = NULL WHERE table_id = :t"), {"t": a})
    assert _facts(rt, [(a, "compaction")]) == {(a, "compaction"): (8, "pending")}
    with rt.engine.begin() as c:
        c.execute(
            text("UPDATE tasks SET files_added_mark = 7 WHERE table_id = :t"),  # as it marked
            {"t": a},
        )
    # a malformed count counts nothing, and does not fail the commit's ingest
    with rt.engine.begin() as c:
        c.execute(
            text(
                "INSERT INTO timeline_events (table_id, snapshot_id, operation, summary, source) "
                "VALUES (:t, 99, 'append', CAST(:s AS jsonb), 'poll')"
            ),
            {"t": a, "s": json.dumps({"added-data-files": "many"})},
        )
    assert _facts(rt, [(a, "compaction")]) == {(a, "compaction"): (8, "pending")}


def test_a_task_open_for_long_reads_none_of_the_events_since(rt: Runtime) -> None:
    """The cost of the facts is flat in the events since the task opened: the statement
    reaches timeline_events not once (before 0034 it summed every event since)."""
    t = _table(rt, "open")
    _task(rt, t, "compaction", "pending")
    for round_ in range(5):
        _events(rt, t, 100 * round_, [2] * 50)
    with rt.engine.begin() as c:
        (plan,) = c.execute(
            text(f"EXPLAIN (ANALYZE, FORMAT JSON) {_HISTORY_FACTS.text}"),
            {"table_ids": [t], "kinds": ["compaction"]},
        ).scalar_one()

    def loops_on_events(node: dict[str, Any]) -> int:
        own = node["Actual Loops"] if node.get("Relation Name") == "timeline_events" else 0
        return own + sum(loops_on_events(n) for n in node.get("Plans", []))

    assert loops_on_events(plan["Plan"]) == 0
    assert _facts(rt, [(t, "compaction")]) == {(t, "compaction"): (500, "pending")}
