"""Commit events: idempotent ingest from every road, and what evaluation decides."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from fastapi.testclient import TestClient
from helpers import append_batches, current, make_table
from sqlalchemy import select, text

from lakewarden.db.models import ManagedTable, Task, TimelineEvent
from lakewarden.db.session import transaction
from lakewarden.events.listener import CommitListener
from lakewarden.events.poller import poll_once
from lakewarden.runtime import Runtime

POLICY = {"compaction": {"min_small_files": 6, "min_input_files": 3}}


def _register(client: TestClient, policy: dict | None = None) -> None:
    r = client.post(
        "/api/v1/tables", json={"namespace": "sales", "name": "orders", "policy": policy or POLICY}
    )
    assert r.status_code == 201, r.text


def _events(rt: Runtime) -> list[TimelineEvent]:
    with transaction(rt.engine) as s:
        return list(s.scalars(select(TimelineEvent).order_by(TimelineEvent.id)))


def _tasks(rt: Runtime) -> list[Task]:
    with transaction(rt.engine) as s:
        return list(s.scalars(select(Task).order_by(Task.id)))


def test_same_event_posted_twice_is_one_event_and_at_most_one_task(
    client: TestClient, rt: Runtime
) -> None:
    table = make_table(rt)
    _register(client)
    table = append_batches(table, 4)  # 8 small files: 7 reducible >= 6
    snap = current(table).snapshot_id
    first = client.post(
        "/api/v1/events", json={"namespace": "sales", "name": "orders", "snapshot_id": snap}
    )
    second = client.post(
        "/api/v1/events", json={"namespace": "sales", "name": "orders", "snapshot_id": snap}
    )
    assert first.status_code == second.status_code == 202
    assert first.json()["new_events"] == 4 and second.json()["new_events"] == 0
    assert first.json()["event"]["decision"] == "task-created"
    events = _events(rt)
    # The table was empty at registration (no snapshot, no baseline event).
    assert len(events) == 4 and len({e.snapshot_id for e in events}) == 4
    assert [e.decision for e in events] == ["superseded"] * 3 + ["task-created"]
    tasks = _tasks(rt)
    assert len(tasks) == 1
    trigger = tasks[0].trigger
    assert trigger["snapshot_id"] == snap and trigger["metrics"]["reducible_files"] == 7
    assert "7 reducible files >= min_small_files 6" in trigger["reason"]
    assert trigger["expected_gain"] == {"data_files_removed_estimate": 7}

    # More commits while the task is open: recorded, no second task, and said why.
    append_batches(table, 1, start=1000)
    r = client.post("/api/v1/events", json={"namespace": "sales", "name": "orders"})
    assert r.json()["event"]["decision"] == "task-open"
    assert r.json()["event"]["decision_detail"]["compaction"]["task_id"] == tasks[0].id
    assert len(_tasks(rt)) == 1


def test_concurrent_duplicate_posts_make_one_event(client: TestClient, rt: Runtime) -> None:
    table = make_table(rt)
    _register(client)
    append_batches(table, 4)
    statuses: list[int] = []

    def post() -> None:
        statuses.append(
            client.post("/api/v1/events", json={"namespace": "sales", "name": "orders"}).status_code
        )

    threads = [threading.Thread(target=post) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert statuses == [202] * 6
    assert len(_events(rt)) == 4
    assert len(_tasks(rt)) == 1


def test_event_errors(client: TestClient, rt: Runtime) -> None:
    make_table(rt)
    body = {"namespace": "sales", "name": "orders"}
    assert client.post("/api/v1/events", json=body).status_code == 404  # not managed yet
    _register(client)
    r = client.post("/api/v1/events", json=body | {"snapshot_id": 12345})
    assert r.status_code == 422 and "snapshot 12345 is not in the metadata" in r.json()["detail"]
    assert client.post("/api/v1/events", json=body | {"name": "x-y"}).status_code == 422
    assert client.post("/api/v1/events", json=body | {"snapshot_id": "abc"}).status_code == 422
    r = client.post("/api/v1/events", json=body | {"commit": "7"})  # Hudi's and Delta's
    assert r.status_code == 422 and "name its commit with snapshot_id" in r.json()["detail"]


def test_notify_trigger_delivers_commits_to_the_listener(client: TestClient, rt: Runtime) -> None:
    table = make_table(rt)
    _register(client)
    stop = threading.Event()
    listener = CommitListener(rt, stop)
    listener.start()
    try:
        assert listener.connected.wait(10)
        append_batches(table, 2)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            sources = [e.source for e in _events(rt)]
            if sources.count("notify") == 2:
                break
            time.sleep(0.1)
        assert sources == ["notify", "notify"]
    finally:
        stop.set()
        listener.join(5)


def _events_of(rt: Runtime, table_id: int) -> list[TimelineEvent]:
    return [e for e in _events(rt) if e.table_id == table_id]


def test_listener_ingests_a_commit_while_another_tables_refresh_waits(
    client: TestClient, rt: Runtime
) -> None:
    """The listener drains on while a refresh runs: a commit to one table is ingested while
    another table's refresh, started before it, waits on that table's row (held here). It
    used to wait for the whole burst before it (B25's listener p99)."""
    orders, items = make_table(rt), make_table(rt, name="items")
    _register(client)
    r = client.post("/api/v1/tables", json={"namespace": "sales", "name": "items"})
    assert r.status_code == 201, r.text
    with transaction(rt.engine) as s:
        ids = {t.name: t.id for t in s.scalars(select(ManagedTable))}
    stop = threading.Event()
    listener = CommitListener(rt, stop)
    listener.start()
    holder = rt.engine.connect()
    try:
        assert listener.connected.wait(10)
        held = holder.begin()
        holder.execute(
            text("SELECT 1 FROM managed_tables WHERE id = :id FOR UPDATE"), {"id": ids["orders"]}
        )
        append_batches(orders, 1)
        _wait_for("a refresh waiting on the row held", lambda: _lock_waits(rt))
        append_batches(items, 1)
        _wait_for("the other table's commit", lambda: len(_events_of(rt, ids["items"])))
        assert _events_of(rt, ids["orders"]) == [] and _lock_waits(rt) == 1
        held.commit()
        _wait_for("the held table's commit", lambda: len(_events_of(rt, ids["orders"])))
    finally:
        holder.close()
        stop.set()
        listener.join(5)


def _lock_waits(rt: Runtime) -> int:
    """Backends of this database waiting on a row lock of managed_tables."""
    with rt.engine.connect() as conn:
        return int(
            conn.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND wait_event_type = 'Lock' AND query ILIKE '%FROM managed_tables%'"
                )
            ).scalar_one()
        )


def _wait_for(what: str, count: Callable[[], int]) -> None:
    """Until `count()` is at least 1 (15 s at most)."""
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if count() >= 1:
            return
        time.sleep(0.05)
    raise AssertionError(f"waited 15 s for {what}")


def test_poller_catches_commits_nobody_reported(client: TestClient, rt: Runtime) -> None:
    table = make_table(rt)
    _register(client)
    assert poll_once(rt) == 0  # nothing moved
    append_batches(table, 4)
    assert poll_once(rt) == 1
    assert [e.source for e in _events(rt)] == ["poll"] * 4
    assert poll_once(rt) == 0
    assert len(_tasks(rt)) == 1


def test_concurrent_trigger_installs_do_not_fail(rt: Runtime) -> None:
    """Every API replica's poller checks the trigger; concurrent DDL on one function would
    fail with 'tuple concurrently updated' unless serialized."""
    from lakewarden.db.trigger import install_commit_trigger

    errors: list[BaseException] = []

    def install(refresh: bool) -> None:
        try:
            with rt.engine.begin() as conn:
                install_commit_trigger(conn, refresh=refresh)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=install, args=(i % 2 == 0,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
