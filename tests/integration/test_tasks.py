"""Task lifecycle on Postgres: guarded transitions for every pair of states, SKIP LOCKED
claims, planning by a real worker on a real table, and the reaper."""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

import pytest
from helpers import append_batches, make_table
from sqlalchemy import select, text

from lakewarden.db.locks import DBLocks
from lakewarden.db.models import ManagedTable, Task
from lakewarden.db.session import transaction
from lakewarden.leader import FencedOut, acquire_or_renew
from lakewarden.runtime import Runtime
from lakewarden.tasks import repo
from lakewarden.tasks.machine import ALL_STATES, can_transition
from services.scheduler.reaper import abandon_orphans
from services.worker.main import Worker


def _table(rt: Runtime, name: str = "t", policy: dict | None = None) -> int:
    with transaction(rt.engine) as s:
        row = ManagedTable(catalog="lake", namespace="ns", name=name, policy=policy or {})
        s.add(row)
        s.flush()
        return row.id


def _task(rt: Runtime, table_id: int, kind: str = "compaction") -> int:
    with transaction(rt.engine) as s:
        task_id = repo.create_task(
            s, table_id=table_id, kind=kind, trigger={"reason": "t"}, actor="test"
        )
    assert task_id is not None
    return task_id


def _force_state(rt: Runtime, task_id: int, state: str) -> None:
    with rt.engine.begin() as conn:
        conn.execute(text("UPDATE tasks SET state = :s WHERE id = :i"), {"s": state, "i": task_id})


def test_every_pair_of_states_is_guarded(rt: Runtime) -> None:
    table_id = _table(rt)
    for src, dst in itertools.product(ALL_STATES, ALL_STATES):
        with rt.engine.begin() as conn:
            conn.execute(text("DELETE FROM tasks"))
        task_id = _task(rt, table_id)
        _force_state(rt, task_id, src)
        with transaction(rt.engine) as s:
            if can_transition(src, dst):
                task = repo.transition(s, task_id, dst, actor="test")
                assert task.state == dst
                assert repo.history(s, task_id)[-1].from_state == src
            else:
                with pytest.raises(repo.TransitionRejected):
                    repo.transition(s, task_id, dst, actor="test")


def test_a_move_waiting_on_the_row_records_the_state_it_found_once_locked(rt: Runtime) -> None:
    """A transition is one statement; its old state is the locked row's, never the
    statement's snapshot: a move that waited for a concurrent one records (and is judged
    from) the state that one left, not the state it saw when it started."""
    task_id = _task(rt, _table(rt))
    _force_state(rt, task_id, "planned")
    started = threading.Event()
    with transaction(rt.engine) as first:
        repo.transition(first, task_id, "running", actor="first")

        def cancel() -> None:
            started.set()
            with transaction(rt.engine) as second:
                repo.transition(second, task_id, "cancelled", actor="second")

        waiter = threading.Thread(target=cancel)
        waiter.start()
        started.wait()
        time.sleep(0.5)  # the cancel's statement now waits on the row the first holds
    waiter.join(timeout=10)
    with transaction(rt.engine) as s:
        moves = [(h.from_state, h.to_state) for h in repo.history(s, task_id)][-2:]
        task = s.get(Task, task_id)
        assert task is not None and task.state == "cancelled"
    assert moves == [("planned", "running"), ("running", "cancelled")]


def test_a_move_from_a_state_a_concurrent_move_left_is_refused(rt: Runtime) -> None:
    """planned -> running waits on a row another transaction moves to cancelled: refused,
    as the row now is, though the statement's snapshot saw it planned."""
    task_id = _task(rt, _table(rt))
    _force_state(rt, task_id, "planned")
    refused: list[BaseException] = []
    with transaction(rt.engine) as first:
        repo.transition(first, task_id, "cancelled", actor="first")

        def run() -> None:
            try:
                with transaction(rt.engine) as second:
                    repo.transition(second, task_id, "running", actor="second")
            except repo.TransitionRejected as exc:
                refused.append(exc)

        waiter = threading.Thread(target=run)
        waiter.start()
        time.sleep(0.5)
    waiter.join(timeout=10)
    assert [getattr(e, "state", None) for e in refused] == ["cancelled"]
    with transaction(rt.engine) as s:
        assert [h.to_state for h in repo.history(s, task_id)][-1] == "cancelled"


def test_a_batch_move_records_each_reason_and_refuses_the_whole_batch_for_one(rt: Runtime) -> None:
    """`transition_each` (a dispatch round): one statement, each task its own reason and
    history row; one task not in an allowed state refuses it, and the round's transaction
    rolls back with nothing moved."""
    table_id = _table(rt)
    a, b = _task(rt, table_id), _task(rt, _table(rt, "u"))
    for task_id in (a, b):
        _force_state(rt, task_id, "planned")
    with transaction(rt.engine) as s:
        moved = repo.transition_each(
            s, {a: "first", b: "second"}, "running", actor="t", attempt=Task.attempt + 1
        )
        assert [(t.id, t.state, t.attempt, t.reason) for t in moved] == [
            (a, "running", 1, "first"),
            (b, "running", 1, "second"),
        ]
        assert [h.reason for h in repo.history(s, b)][-1] == "second"
    _force_state(rt, a, "planned")
    with pytest.raises(repo.TransitionRejected) as refused, transaction(rt.engine) as s:
        repo.transition_each(s, {a: "again", b: "again"}, "running", actor="t")
    assert refused.value.task_id == b and refused.value.state == "running"
    with transaction(rt.engine) as s:
        task = s.get(Task, a)
        assert task is not None and task.state == "planned"  # rolled back with the batch


def test_the_bulk_transition_moves_only_what_may_move_and_records_each_move(rt: Runtime) -> None:
    """`transition_all` (a retired table's open tasks cancelled at once) keeps
    `transition`'s guard: a task in a state that may not move is left as it is."""
    tasks = {state: _task(rt, _table(rt, state), kind="compaction") for state in ALL_STATES}
    for state, task_id in tasks.items():
        _force_state(rt, task_id, state)
    with transaction(rt.engine) as s:
        moved = repo.transition_all(
            s, Task.id.in_(list(tasks.values())), "cancelled", actor="bulk", reason="why"
        )
    movable = {state for state in ALL_STATES if can_transition(state, "cancelled")}
    assert moved == sorted(tasks[state] for state in movable)
    with transaction(rt.engine) as s:
        for state, task_id in tasks.items():
            task = s.get(Task, task_id)
            assert task is not None
            last = repo.history(s, task_id)[-1]
            if state in movable:
                assert (task.state, task.reason) == ("cancelled", "why")
                assert (last.from_state, last.to_state, last.actor) == (state, "cancelled", "bulk")
            else:
                assert task.state == state and last.to_state == "pending"  # its birth only


def test_a_move_that_clears_a_field_leaves_sql_null(rt: Runtime) -> None:
    """A move's statement is kept and its values bound (`repo._moves`): a None still clears
    the column to SQL NULL, as before, not to a JSON null."""
    task_id = _task(rt, _table(rt))
    moves: list[tuple[str, dict[str, Any]]] = [
        ("planning", {}),
        ("planned", {"plan": {"p": 1}}),
        ("pending", {"plan": None}),
    ]
    for to, fields in moves:
        with transaction(rt.engine) as s:
            repo.transition(s, task_id, to, actor="t", **fields)
    with rt.engine.connect() as conn:
        assert conn.execute(
            text("SELECT plan IS NULL FROM tasks WHERE id = :i"), {"i": task_id}
        ).scalar_one()


def test_a_hand_over_needs_the_task_still_running_under_its_old_holder(rt: Runtime) -> None:
    task_id = _task(rt, _table(rt))
    with rt.engine.begin() as conn:
        conn.execute(
            text("UPDATE tasks SET state = 'running', holder = 'old', reason = 'r' WHERE id = :i"),
            {"i": task_id},
        )
    with transaction(rt.engine) as s, pytest.raises(repo.TransitionRejected):
        repo.hand_over(
            s, task_id, "running", from_holder="other", to_holder="new", actor="a", reason="x"
        )
    with transaction(rt.engine) as s:
        task = repo.hand_over(
            s, task_id, "running", from_holder="old", to_holder="new", actor="a", reason="taken"
        )
        assert (task.state, task.holder, task.reason) == ("running", "new", "r")
        last = repo.history(s, task_id)[-1]
        assert (last.from_state, last.to_state, last.reason) == ("running", "running", "taken")


def test_one_open_task_per_table_and_kind(rt: Runtime) -> None:
    table_id = _table(rt)
    first = _task(rt, table_id)
    with transaction(rt.engine) as s:
        assert (
            repo.create_task(s, table_id=table_id, kind="compaction", trigger={}, actor="t") is None
        )
    _force_state(rt, first, "succeeded")
    assert _task(rt, table_id) != first  # a closed task frees the slot


def test_claims_skip_locked_rows_and_never_hand_out_a_task_twice(rt: Runtime) -> None:
    ids = {_task(rt, _table(rt, f"t{i}")) for i in range(5)}
    claimed: list[int] = []
    sessions = []
    from lakewarden.db.session import session_factory

    # Five open transactions claim concurrently: each gets a different task.
    for i in range(6):
        s = session_factory(rt.engine)()
        s.begin()
        sessions.append(s)
        task = repo.claim_for_planning(s, f"w{i}")
        if task is not None:
            claimed.append(task.id)
    for s in sessions:
        s.commit()
        s.close()
    assert sorted(claimed) == sorted(ids)


def test_fenced_transition_refused_after_takeover(rt: Runtime) -> None:
    task_id = _task(rt, _table(rt))
    _force_state(rt, task_id, "planned")
    with rt.engine.begin() as conn:
        old = acquire_or_renew(conn, DBLocks.SCHEDULER_LEASE, "old", 15)
        conn.execute(text("UPDATE leader_lease SET expires_at = now()"))
        acquire_or_renew(conn, DBLocks.SCHEDULER_LEASE, "new", 15)
    assert old is not None
    with transaction(rt.engine) as s, pytest.raises(FencedOut):
        repo.transition(s, task_id, "running", actor="old", fence=old)
    with transaction(rt.engine) as s:
        task = s.get(Task, task_id)
        assert task is not None and task.state == "planned"


def _register_real_table(rt: Runtime, policy: dict) -> int:
    with transaction(rt.engine) as s:
        row = ManagedTable(
            catalog=rt.settings.catalog_name, namespace="sales", name="orders", policy=policy
        )
        s.add(row)
        s.flush()
        return row.id


def test_worker_plans_a_real_table(rt: Runtime) -> None:
    append_batches(make_table(rt), 6)  # 6 commits x 2 regions = 12 small files
    table_id = _register_real_table(
        rt, {"compaction": {"min_small_files": 5, "min_input_files": 5}}
    )
    task_id = _task(rt, table_id)
    assert Worker(rt).run_once()
    with transaction(rt.engine) as s:
        task = s.get(Task, task_id)
        assert task is not None and task.state == "planned"
        plan = task.plan or {}
        assert plan["files_before"] == 12 and plan["files_to_rewrite"] == 12
        assert plan["expected_files_after"] == 2
        assert sorted(p["partition"]["region"] for p in plan["partitions"]) == ["a", "b"]
        assert [h.to_state for h in repo.history(s, task_id)] == ["pending", "planning", "planned"]
    assert not Worker(rt).run_once()  # nothing left to claim


def test_worker_skips_with_reason(rt: Runtime) -> None:
    append_batches(make_table(rt), 2)  # 2 small files per region: below min_input_files
    task_id = _task(rt, _register_real_table(rt, {}))
    assert Worker(rt).run_once()
    with transaction(rt.engine) as s:
        task = s.get(Task, task_id)
        assert task is not None and task.state == "skipped"
        assert "no partition has >= 5 files" in (task.reason or "")


def test_worker_skips_a_table_gone_from_the_catalog(rt: Runtime) -> None:
    task_id = _task(rt, _register_real_table(rt, {}))
    assert Worker(rt).run_once()
    with transaction(rt.engine) as s:
        task = s.get(Task, task_id)
        assert task is not None and task.state == "skipped"
        assert "no longer exists" in (task.reason or "")


def _gone_tables(rt: Runtime, n: int) -> list[int]:
    """n tasks on n managed tables the catalog does not have (each plans to a skip)."""
    with transaction(rt.engine) as s:
        rows = [
            ManagedTable(
                catalog=rt.settings.catalog_name, namespace="gone", name=f"t{i}", policy={}
            )
            for i in range(n)
        ]
        s.add_all(rows)
        s.flush()
        ids = [row.id for row in rows]
    return [_task(rt, table_id) for table_id in ids]


def test_worker_claims_a_batch_at_once_and_plans_each(rt: Runtime) -> None:
    task_ids = _gone_tables(rt, 3)
    assert Worker(rt).run_once()  # one claim for the three
    with transaction(rt.engine) as s:
        for task_id in task_ids:
            assert [h.to_state for h in repo.history(s, task_id)] == [
                "pending",
                "planning",
                "skipped",
            ]
    assert not Worker(rt).run_once()


def test_a_stopping_worker_hands_its_unplanned_batch_back(rt: Runtime) -> None:
    first, *rest = _gone_tables(rt, 3)
    worker = Worker(rt)
    worker.stop.set()  # as SIGTERM arriving while the batch is planned
    assert worker.run_once()
    with transaction(rt.engine) as s:
        assert [h.to_state for h in repo.history(s, first)][-1] == "skipped"
        for task_id in rest:
            task = s.get(Task, task_id)
            assert task is not None and task.state == "pending" and task.holder is None
            assert task.attempt == 0  # not spent
            assert "released unplanned" in (task.reason or "")
            history = [h.to_state for h in repo.history(s, task_id)]
            assert history == ["pending", "planning", "pending"]
    assert Worker(rt).run_once()  # another worker takes them at once
    with transaction(rt.engine) as s:
        assert {s.get(Task, t).state for t in rest} == {"skipped"}  # type: ignore[union-attr]


def test_reaper_returns_work_of_a_silent_planner_and_an_old_leader(rt: Runtime) -> None:
    stale = _task(rt, _table(rt, "a"))
    orphan = _task(rt, _table(rt, "b"))
    with rt.engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE tasks SET state = 'planning', holder = 'dead-worker', "
                "heartbeat_at = now() - interval '1 hour' WHERE id = :i"
            ),
            {"i": stale},
        )
        conn.execute(
            text("UPDATE tasks SET state = 'running', holder = 'old-leader' WHERE id = :i"),
            {"i": orphan},
        )
        fence = acquire_or_renew(conn, DBLocks.SCHEDULER_LEASE, "new-leader", 15)
    assert fence is not None
    assert abandon_orphans(rt, fence, 30, inflight=set()) == 2
    with transaction(rt.engine) as s:
        tasks = {t.id: t for t in s.scalars(select(Task))}
        assert tasks[stale].state == "pending" and tasks[orphan].state == "pending"
        assert repo.history(s, orphan)[-1].leader_epoch == fence.epoch
