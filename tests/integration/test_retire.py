"""Unregistering retires a table and keeps its history: events, tasks (open ones
cancelled), policy versions. A retired table is left alone by every loop and lookup;
registering it again revives the same row and continues its history. Through
`lakewarden.tables` directly (the API adds only access control on top)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest
from helpers import append_batches, make_table, stored, task_of, wait_for
from sqlalchemy import select, text

from lakewarden.alerts.rules import evaluate_task_rules
from lakewarden.catalogs.catalog import TableRef
from lakewarden.db.locks import DBLocks
from lakewarden.db.models import (
    Alert,
    ManagedTable,
    PolicyVersion,
    Task,
    TaskTransition,
    TimelineEvent,
)
from lakewarden.db.session import session_factory, transaction
from lakewarden.events.poller import poll_once
from lakewarden.events.refresh import refresh_table
from lakewarden.leader import Fence, acquire_or_renew
from lakewarden.runtime import Runtime
from lakewarden.states import TaskState
from lakewarden.tables import (
    AlreadyManaged,
    TableGone,
    TableQuery,
    add_table,
    get_table,
    list_tables,
    lock_table,
    remove_table,
    set_policy,
    tables_in_namespace,
)
from lakewarden.tasks import repo
from services.scheduler.health_watch import measure_due_tables
from services.scheduler.sweeps import sweep_due_tasks
from services.worker.main import Worker

REF = TableRef("sales", "orders")
# 4 commits of 2 small files: 7 reducible >= 6, so the events open a compaction task.
COMPACT = {"compaction": {"min_small_files": 6, "min_input_files": 3}}
TTL = {"ttl": {"enabled": True, "column": "id", "retention_days": 30}}


def _register(rt: Runtime, policy: dict, author: str | None = "alice") -> int:
    with transaction(rt.engine) as s:
        return add_table(s, rt.settings.catalog_name, REF, policy, author=author).id


def _unregister(rt: Runtime, by: str = "bob") -> bool:
    with transaction(rt.engine) as s:
        row = get_table(s, rt.settings.catalog_name, REF)
        assert row is not None
        return remove_table(s, row, by=by)


def _row(rt: Runtime, table_id: int) -> ManagedTable:
    return stored(rt, ManagedTable, table_id)


def _counts(rt: Runtime, table_id: int) -> dict[str, int]:
    with transaction(rt.engine) as s:
        return {
            model.__name__: int(
                s.scalar(
                    select(text("count(*)")).select_from(model).where(model.table_id == table_id)
                )
                or 0
            )
            for model in (TimelineEvent, Task, PolicyVersion)
        }


def _leader(rt: Runtime) -> Fence:
    with rt.engine.begin() as conn:
        fence = acquire_or_renew(conn, DBLocks.SCHEDULER_LEASE, "leader", 60)
    assert fence is not None
    return fence


def test_unregister_keeps_the_history_and_cancels_the_open_tasks(rt: Runtime) -> None:
    table = make_table(rt)
    table_id = _register(rt, COMPACT)
    append_batches(table, 4)
    ingested = refresh_table(rt, rt.settings.catalog_name, REF, source="poll")
    assert ingested is not None and len(ingested.new_event_ids) == 4
    with transaction(rt.engine) as s:
        compaction = repo.find_open_task(s, table_id, "compaction")
        assert compaction is not None
        ttl = repo.create_task(s, table_id=table_id, kind="ttl", trigger={}, actor="test")
        assert ttl is not None
        repo.transition(s, ttl, TaskState.PLANNING, actor="test")
        repo.transition(s, ttl, TaskState.PLANNED, actor="test")
        repo.transition(s, ttl, TaskState.RUNNING, actor="test")
        done = repo.create_task(s, table_id=table_id, kind="clean", trigger={}, actor="test")
        assert done is not None
        repo.transition(s, done, TaskState.CANCELLED, actor="test", reason="earlier")
    before = _counts(rt, table_id)
    assert before == {"TimelineEvent": 4, "Task": 3, "PolicyVersion": 1}

    assert _unregister(rt, by="token:ops") is True

    assert _counts(rt, table_id) == before  # nothing deleted
    assert _row(rt, table_id).retired_at is not None
    for task_id in (compaction.id, ttl):  # pending and running alike
        task = task_of(rt, task_id)
        assert task.state == TaskState.CANCELLED
        assert task.reason == "table unregistered by token:ops"
    assert task_of(rt, done).reason == "earlier"  # a finished task keeps its end
    with transaction(rt.engine) as s:
        last = s.scalars(
            select(TaskTransition)
            .where(TaskTransition.task_id == ttl)
            .order_by(TaskTransition.id.desc())
        ).first()
        assert last is not None
        assert (last.from_state, last.to_state, last.actor) == (
            TaskState.RUNNING,
            TaskState.CANCELLED,
            "token:ops",
        )
        # Gone from every lookup, but still there for its history.
        assert get_table(s, rt.settings.catalog_name, REF) is None
        retired = get_table(s, rt.settings.catalog_name, REF, include_retired=True)
        assert retired is not None and retired.id == table_id
        assert list_tables(s, TableQuery()).items == []
        assert tables_in_namespace(s, rt.settings.catalog_name, "sales") == []
        assert lock_table(s, retired) is None
        with pytest.raises(TableGone):
            set_policy(s, retired, {}, author="carol")
        # A second unregistration (a concurrent one that lost) changes nothing.
        assert remove_table(s, retired, by="someone") is False
    assert _row(rt, table_id).policy_version == 1


def test_a_retired_table_is_not_polled_swept_measured_or_alerted(rt: Runtime) -> None:
    table = make_table(rt)
    table_id = _register(rt, COMPACT | TTL)
    table = append_batches(table, 1)
    assert refresh_table(rt, rt.settings.catalog_name, REF, source="poll") is not None
    with rt.engine.begin() as conn:  # below its SLO for long: the rule would fire
        conn.execute(
            text(
                "UPDATE managed_tables SET health_score = 1, unhealthy_since = :t, "
                "health_measured_at = :t WHERE id = :i"
            ),
            {"t": datetime.now(UTC) - timedelta(days=30), "i": table_id},
        )
    with transaction(rt.engine) as s:  # and its clean failed for good
        failed = repo.create_task(s, table_id=table_id, kind="clean", trigger={}, actor="t")
        assert failed is not None
        repo.transition(s, failed, TaskState.PLANNING, actor="t")
        repo.transition(s, failed, TaskState.FAILED, actor="t", reason="boom")
    with transaction(rt.engine) as s:
        evaluate_task_rules(s, rt.settings, datetime.now(UTC))
        firing = s.scalars(select(Alert.rule).where(Alert.state == "firing")).all()
        assert sorted(firing) == ["table_unhealthy", "task_failed"]
    assert _unregister(rt) is True
    before = _counts(rt, table_id)
    append_batches(table, 4, start=100)  # commits while unmanaged

    assert poll_once(rt) == 0
    assert refresh_table(rt, rt.settings.catalog_name, REF, source="notify") is None
    assert sweep_due_tasks(rt, _leader(rt), datetime.now(UTC)) == []
    assert measure_due_tables(rt, datetime.now(UTC) + timedelta(days=1)) == 0
    with transaction(rt.engine) as s:
        evaluate_task_rules(s, rt.settings, datetime.now(UTC))
        assert s.scalars(select(Alert.rule).where(Alert.state == "firing")).all() == []
    assert _counts(rt, table_id) == before


def test_a_task_made_by_a_loop_that_read_the_table_before_it_retired_is_cancelled(
    rt: Runtime,
) -> None:
    """The sweep reads the tables, then creates tasks: an unregistration may come between."""
    make_table(rt)
    table_id = _register(rt, {})
    assert _unregister(rt) is True
    with transaction(rt.engine) as s:  # as the late sweep would
        task_id = repo.create_task(s, table_id=table_id, kind="clean", trigger={}, actor="sweep")
    assert task_id is not None

    assert Worker(rt).run_once() is True

    task = task_of(rt, task_id)
    assert task.state == TaskState.CANCELLED
    assert task.reason is not None and "was unregistered" in task.reason


def test_an_ingest_waiting_on_the_unregistration_records_nothing(rt: Runtime) -> None:
    """A refresh that found the table live, then waits for its row lock while it is being
    unregistered, must see it retired once the lock is free: no event, no task."""
    table = make_table(rt)
    table_id = _register(rt, COMPACT)
    append_batches(table, 4)
    with session_factory(rt.engine)() as s, s.begin():
        row = get_table(s, rt.settings.catalog_name, REF)
        assert row is not None
        assert remove_table(s, row, by="bob")  # holds the row's lock until commit
        with ThreadPoolExecutor(1) as pool:
            refresh = pool.submit(refresh_table, rt, rt.settings.catalog_name, REF, source="notify")
            with pytest.raises(TimeoutError):
                refresh.result(timeout=1.0)  # waiting for the row lock
            s.commit()
            assert refresh.result(timeout=30) is None
    assert _counts(rt, table_id) == {"TimelineEvent": 0, "Task": 0, "PolicyVersion": 1}


def test_registering_again_continues_the_same_history(rt: Runtime) -> None:
    table = make_table(rt)
    table_id = _register(rt, COMPACT, author="alice")
    table = append_batches(table, 4)
    assert refresh_table(rt, rt.settings.catalog_name, REF, source="poll") is not None
    with transaction(rt.engine) as s:
        row = get_table(s, rt.settings.catalog_name, REF)
        assert row is not None
        set_policy(s, row, COMPACT | TTL, author="carol")
    with transaction(rt.engine) as s, pytest.raises(AlreadyManaged):  # live: still refused
        add_table(s, rt.settings.catalog_name, REF, {}, author="dave")
    assert _unregister(rt) is True
    with rt.engine.begin() as conn:
        conn.execute(text("UPDATE managed_tables SET health_score = 3, unhealthy_since = now()"))
    old_events = _counts(rt, table_id)["TimelineEvent"]

    assert _register(rt, {}, author="dave") == table_id  # the same row

    row = _row(rt, table_id)
    assert row.retired_at is None and row.policy == {} and row.policy_version == 3
    # Measured again under the new policy, not judged by the old score.
    assert (row.health_score, row.unhealthy_since, row.health_measured_at) == (None, None, None)
    with transaction(rt.engine) as s:
        versions = s.execute(
            select(PolicyVersion.version, PolicyVersion.author, PolicyVersion.policy)
            .where(PolicyVersion.table_id == table_id)
            .order_by(PolicyVersion.version)
        ).all()
        assert versions == [(1, "alice", COMPACT), (2, "carol", COMPACT | TTL), (3, "dave", {})]
        assert [r.id for r in list_tables(s, TableQuery()).items] == [table_id]
        with pytest.raises(AlreadyManaged):
            add_table(s, rt.settings.catalog_name, REF, {}, author="erin")
    # The old events stay, and the commits since are ingested after them.
    append_batches(table, 1, start=500)
    ingested = refresh_table(rt, rt.settings.catalog_name, REF, source="poll")
    assert ingested is not None and len(ingested.new_event_ids) == 1
    assert _counts(rt, table_id)["TimelineEvent"] == old_events + 1


def test_two_concurrent_registrations_of_a_retired_table_revive_it_once(rt: Runtime) -> None:
    make_table(rt)
    table_id = _register(rt, {})
    assert _unregister(rt) is True
    started = threading.Event()

    def second() -> str:
        with transaction(rt.engine) as s:
            started.set()
            try:
                add_table(s, rt.settings.catalog_name, REF, TTL, author="second")
            except AlreadyManaged:
                return "refused"
            return "revived"

    with session_factory(rt.engine)() as s, s.begin():
        assert add_table(s, rt.settings.catalog_name, REF, {}, author="first").id == table_id
        with ThreadPoolExecutor(1) as pool:
            other = pool.submit(second)
            assert started.wait(10)
            with pytest.raises(TimeoutError):
                other.result(timeout=1.0)  # waits for the first revival to commit
            s.commit()
            assert other.result(timeout=30) == "refused"
    row = _row(rt, table_id)
    assert (row.policy_version, row.policy) == (2, {})
    assert _counts(rt, table_id)["PolicyVersion"] == 2


def test_a_new_registration_stores_its_author(rt: Runtime) -> None:
    make_table(rt)
    table_id = _register(rt, {}, author="token:ci")
    with transaction(rt.engine) as s:
        (version,) = s.scalars(select(PolicyVersion).where(PolicyVersion.table_id == table_id))
        assert (version.version, version.author) == (1, "token:ci")
    with transaction(rt.engine) as s:  # no author: a caller without an identity
        add_table(s, rt.settings.catalog_name, TableRef("sales", "other"), {})
        row = get_table(s, rt.settings.catalog_name, TableRef("sales", "other"))
        assert row is not None and row.policy_version == 1
        assert s.get(PolicyVersion, (row.id, 1)).author is None  # type: ignore[union-attr]


def test_a_commit_reported_while_the_table_is_unregistered_is_a_404(rt: Runtime) -> None:
    """POST /api/v1/events finds the table managed, then waits for its row lock while a
    concurrent unregistration commits: the answer is a 404 that says so, not a 500."""
    from conftest import serve

    table = make_table(rt, "sales", "raced")
    with transaction(rt.engine) as session:
        add_table(session, rt.settings.catalog_name, TableRef("sales", "raced"), {})
    append_batches(table, 1)
    with serve(rt) as client:
        unregister = session_factory(rt.engine)()
        row = get_table(unregister, rt.settings.catalog_name, TableRef("sales", "raced"))
        assert row is not None and remove_table(unregister, row, by="racer")  # not committed
        with ThreadPoolExecutor(1) as pool:
            posted = pool.submit(
                client.post, "/api/v1/events", json={"namespace": "sales", "name": "raced"}
            )
            # The request reads the row (still live to it) and blocks on its lock.
            wait_for(lambda: _waiting_for_a_lock(rt), 10, "the request to wait for the row lock")
            unregister.commit()
            unregister.close()
            r = posted.result(timeout=30)
    assert r.status_code == 404, r.text
    assert "no longer managed" in r.json()["detail"]


def _waiting_for_a_lock(rt: Runtime) -> bool:
    with rt.engine.connect() as conn:
        waiting = conn.execute(
            # this test's database only: the server is shared with other tests' databases
            text(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE wait_event_type = 'Lock' AND datname = current_database()"
            )
        ).scalar_one()
    return bool(waiting)
