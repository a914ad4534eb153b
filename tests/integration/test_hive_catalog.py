"""A Hive catalog end to end on a real Hive Metastore (lakewarden.spark.local_metastore):
registered through the API (an unreachable metastore is a quick 422), its commits heard
through the metastore's notification log (each a task within 2 s, no table listed or
loaded but the one that moved), tables adopted, dropped and renamed as on JDBC, and a
restarted metastore missing no commit and ingesting none twice."""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from helpers import SCHEMA, append_batches, current, free_port, wait_for
from hive_metastore.ttypes import NoSuchObjectException
from pyiceberg.catalog.hive import HiveCatalog
from pyiceberg.table import Table
from sqlalchemy import func, select, text

from lakewarden.db.models import Catalog as CatalogRow
from lakewarden.db.models import CatalogPoll, ManagedTable, ManagementRule, Task, TimelineEvent
from lakewarden.db.session import transaction
from lakewarden.events.metastore import FOLLOW_TICK_S, Followers, follow_due
from lakewarden.events.poller import poll_catalog, poll_once
from lakewarden.metastore import (
    TABLES_PER_REQUEST,
    TimedHiveCatalog,
    current_event_id,
    metastore_client,
)
from lakewarden.process import Ticker
from lakewarden.runtime import Runtime
from lakewarden.spark.local_metastore import Metastore
from lakewarden.states import OPEN_TASK_STATES, TaskState
from lakewarden.tasks.repo import transition

CATALOG = "hive"
# Every further commit of a table with a few small files calls for compaction.
POLICY = {"compaction": {"enabled": True, "min_small_files": 2, "min_input_files": 2}}


@dataclass
class Hive:
    metastore: Metastore
    writer: HiveCatalog  # a writer's own client of the metastore
    namespace: str  # this test's database in the session's metastore
    rule: int


@pytest.fixture
def hive(
    client: TestClient, rt: Runtime, hive_metastore: Metastore, tmp_path: Path
) -> Iterator[Hive]:
    """The session's metastore registered as catalog `hive` through the API, a rule managing
    this test's namespace, and its notification log followed as an API replica follows it
    (the same Ticker and Followers create_app starts); no poll runs."""
    warehouse = (tmp_path / "warehouse").as_uri()
    body = {
        "name": CATALOG,
        "type": "hive",
        "properties": {"uri": hive_metastore.uri, "warehouse": warehouse},
    }
    r = client.post("/api/v1/catalogs", json=body)
    assert r.status_code == 201, r.text
    namespace = f"t_{uuid.uuid4().hex[:8]}"
    with transaction(rt.engine) as s:
        row = ManagementRule(catalog=CATALOG, namespace=namespace, include=["*"], policy=POLICY)
        s.add(row)
        s.flush()
        rule = row.id
    writer = HiveCatalog("writer", uri=hive_metastore.uri, warehouse=warehouse)
    writer.create_namespace(namespace)
    follow_due(rt)  # the first follow: the cursor starts at the log's newest event
    stop = threading.Event()
    followers = Followers(rt)
    Ticker("metastore", FOLLOW_TICK_S, followers.tick, stop).start()
    yield Hive(hive_metastore, writer, namespace, rule)
    stop.set()
    followers.close()


def _row(rt: Runtime, namespace: str, name: str) -> ManagedTable | None:
    with transaction(rt.engine) as s:
        return s.scalars(
            select(ManagedTable).where(
                ManagedTable.catalog == CATALOG,
                ManagedTable.namespace == namespace,
                ManagedTable.name == name,
            )
        ).one_or_none()


def _caught_up(rt: Runtime, namespace: str, name: str, table: Table) -> bool:
    row = _row(rt, namespace, name)
    return row is not None and row.metadata_location == table.metadata_location


def _task_for(rt: Runtime, table_id: int, snapshot_id: int) -> bool:
    with rt.engine.connect() as conn:
        return (
            conn.execute(
                text(
                    "SELECT 1 FROM tasks WHERE table_id = :t "
                    "AND (trigger->>'snapshot_id')::bigint = :s"
                ),
                {"t": table_id, "s": snapshot_id},
            ).first()
            is not None
        )


def _cancel_open_tasks(rt: Runtime, table_id: int) -> None:
    with transaction(rt.engine) as s:
        open_ids = s.scalars(
            select(Task.id).where(Task.table_id == table_id, Task.state.in_(OPEN_TASK_STATES))
        ).all()
        for task_id in open_ids:
            transition(s, task_id, TaskState.CANCELLED, actor="test", reason="test")


def _events(rt: Runtime, table_id: int) -> list[int]:
    with transaction(rt.engine) as s:
        return list(
            s.scalars(
                select(TimelineEvent.snapshot_id)
                .where(TimelineEvent.table_id == table_id)
                .order_by(TimelineEvent.snapshot_id)
            )
        )


def test_registration_checks_that_the_metastore_answers(
    client: TestClient, hive_metastore: Metastore
) -> None:
    r = client.post(
        "/api/v1/catalogs",
        json={"name": "hms", "type": "hive", "properties": {"uri": hive_metastore.uri}},
    )
    assert r.status_code == 201, r.text
    assert client.get("/api/v1/catalogs/hms").json()["type"] == "hive"

    nobody = f"thrift://127.0.0.1:{free_port()}"
    started = time.monotonic()
    r = client.post(
        "/api/v1/catalogs",
        json={"name": "gone", "type": "hive", "properties": {"uri": nobody}},
    )
    assert r.status_code == 422
    detail = r.json()["detail"]
    assert "catalog 'gone' does not answer" in detail and "Could not connect" in detail
    assert time.monotonic() - started < 5

    r = client.post("/api/v1/catalogs", json={"name": "nouri", "type": "hive", "properties": {}})
    assert r.status_code == 422 and "thrift://host:port" in r.json()["detail"]
    secret = "AKIAxxSECRETxxVALUE0123456789"
    r = client.post(
        "/api/v1/catalogs",
        json={
            "name": "leaky",
            "type": "hive",
            "properties": {"uri": hive_metastore.uri, "s3.secret-access-key": secret},
        },
    )
    assert r.status_code == 422 and "s3.secret-access-key" in r.json()["detail"]
    assert secret not in r.text


def test_a_commit_becomes_a_task_within_two_seconds(rt: Runtime, hive: Hive) -> None:
    ns = hive.namespace
    table = append_batches(hive.writer.create_table(f"{ns}.orders", schema=SCHEMA), 2)
    wait_for(lambda: _caught_up(rt, ns, "orders", table), 10, "orders adopted")
    adopted = _row(rt, ns, "orders")
    assert adopted is not None and adopted.managed_by == f"rule:{hive.rule}"
    for i in range(3):
        table = append_batches(table, 1, start=100 * (i + 1))
        started = time.monotonic()  # committed (the writer's own time is B20's to report)
        snapshot_id = current(table).snapshot_id
        wait_for(lambda: _task_for(rt, adopted.id, snapshot_id), 5, "a task")  # noqa: B023
        took = time.monotonic() - started
        assert took <= 2.0, f"commit {i} became a task in {took:.2f} s"
        _cancel_open_tasks(rt, adopted.id)  # so that the next commit makes a task again


def test_drops_and_renames_are_followed_from_the_log(rt: Runtime, hive: Hive) -> None:
    ns = hive.namespace
    keep = append_batches(hive.writer.create_table(f"{ns}.keep", schema=SCHEMA), 1)
    gone = hive.writer.create_table(f"{ns}.gone", schema=SCHEMA)
    wait_for(lambda: _caught_up(rt, ns, "keep", keep), 10, "keep adopted")
    wait_for(lambda: _caught_up(rt, ns, "gone", gone), 10, "gone adopted")
    before = _row(rt, ns, "keep")
    assert before is not None

    hive.writer.drop_table(f"{ns}.gone")
    hive.writer.rename_table(f"{ns}.keep", f"{ns}.kept")

    def followed() -> bool:
        dropped, renamed = _row(rt, ns, "gone"), _row(rt, ns, "kept")
        return bool(dropped and dropped.retired_at and renamed and renamed.retired_at is None)

    wait_for(followed, 10, "the drop and the rename followed")
    dropped, renamed = _row(rt, ns, "gone"), _row(rt, ns, "kept")
    assert dropped is not None and dropped.retired_reason == "dropped from the catalog"
    assert renamed is not None and renamed.id == before.id  # its history kept
    assert _row(rt, ns, "keep") is None
    # The renamed table's next commit is heard under its new name.
    kept = append_batches(hive.writer.load_table(f"{ns}.kept"), 1, start=50)
    wait_for(lambda: _caught_up(rt, ns, "kept", kept), 10, "the renamed table's commit")


def test_a_restarted_metastore_misses_no_commit_and_ingests_none_twice(
    rt: Runtime, hive: Hive
) -> None:
    ns = hive.namespace
    table = append_batches(hive.writer.create_table(f"{ns}.orders", schema=SCHEMA), 1)
    wait_for(lambda: _caught_up(rt, ns, "orders", table), 10, "orders adopted")
    table = append_batches(table, 1, start=10)
    wait_for(lambda: _caught_up(rt, ns, "orders", table), 10, "the first commit")

    # A commit the follower has not read when the metastore goes down (following is held
    # meanwhile); while it is down every follow fails, and the cursor stays.
    _hold_following(rt)
    table = append_batches(table, 1, start=20)
    hive.metastore.stop()
    _resume_following(rt)
    time.sleep(3 * FOLLOW_TICK_S)
    assert not _caught_up(rt, ns, "orders", table)
    hive.metastore.start()
    # Read from the log once it is back, with no later commit to walk back from.
    wait_for(lambda: _caught_up(rt, ns, "orders", table), 15, "the commit before the restart")
    table = append_batches(hive.writer.load_table(f"{ns}.orders"), 1, start=30)
    wait_for(lambda: _caught_up(rt, ns, "orders", table), 10, "a commit after the restart")

    row = _row(rt, ns, "orders")
    assert row is not None
    snapshots = sorted(s.snapshot_id for s in table.snapshots())
    # Adopted at its first commit (the baseline), then each later commit once.
    assert _events(rt, row.id) == snapshots
    with metastore_client(hive.metastore.uri) as client:
        newest = current_event_id(client)
    wait_for(lambda: _cursor(rt) == newest, 5, "the cursor at the log's newest event", lambda: "")


def _hold_following(rt: Runtime) -> None:
    """No replica follows the log until `_resume_following` (a follow under way when this
    is called ends first: it sets the due time it was given, so it is set again)."""
    for _ in range(2):
        with transaction(rt.engine) as s:
            s.execute(
                text(
                    "UPDATE catalog_polls SET notifications_due_at = now() + interval '1 hour' "
                    "WHERE catalog = :c"
                ),
                {"c": CATALOG},
            )
        time.sleep(2 * FOLLOW_TICK_S)


def _resume_following(rt: Runtime) -> None:
    with transaction(rt.engine) as s:
        s.execute(
            text("UPDATE catalog_polls SET notifications_due_at = now() WHERE catalog = :c"),
            {"c": CATALOG},
        )


def _cursor(rt: Runtime) -> int | None:
    with transaction(rt.engine) as s:
        poll = s.get(CatalogPoll, CATALOG)
        return poll.notification_id if poll else None


def test_no_commit_is_ingested_twice_when_a_batch_is_read_again(rt: Runtime, hive: Hive) -> None:
    """A follower that dies after acting on a batch but before storing the cursor: the
    next one reads the batch again, and nothing is recorded twice."""
    ns = hive.namespace
    table = append_batches(hive.writer.create_table(f"{ns}.orders", schema=SCHEMA), 3)
    wait_for(lambda: _caught_up(rt, ns, "orders", table), 10, "orders adopted")
    row = _row(rt, ns, "orders")
    assert row is not None
    events = _events(rt, row.id)
    before = _cursor(rt) or 0
    with transaction(rt.engine) as s:
        s.execute(
            text(
                "UPDATE catalog_polls SET notification_id = notification_id - 10, "
                "notifications_due_at = now() WHERE catalog = :c"
            ),
            {"c": CATALOG},
        )
    wait_for(lambda: (_cursor(rt) or 0) >= before, 5, "the batch read again", lambda: "")
    assert _events(rt, row.id) == events
    with transaction(rt.engine) as s:
        count = s.scalar(select(func.count()).where(TimelineEvent.table_id == row.id))
    assert count == len(events)


def test_a_poll_reads_pointers_from_the_metastore_and_loads_only_what_moved(
    rt: Runtime, hive: Hive, client: TestClient
) -> None:
    """The poller's road (what a trimmed log lost): the metastore lists every Iceberg
    table's pointer, a few requests per database; only a table whose pointer moved is
    loaded and ingested."""
    _hold_following(rt)
    ns = hive.namespace
    table = append_batches(hive.writer.create_table(f"{ns}.orders", schema=SCHEMA), 2)
    entry = rt.catalogs.entry(CATALOG)
    first = poll_catalog(rt, entry)
    assert _caught_up(rt, ns, "orders", table) and first.refreshed == 1
    with metastore_client(hive.metastore.uri) as ms:
        databases = ms.get_all_databases()
        tables = [len(ms.get_all_tables(db)) for db in databases]
    assert first.requests == 1 + sum(1 + -(-n // TABLES_PER_REQUEST) for n in tables)
    again = poll_catalog(rt, entry)
    assert again.refreshed == 0 and again.tables_seen == first.tables_seen
    poll_once(rt)  # recorded, as the API's poller records it
    last = client.get(f"/api/v1/catalogs/{CATALOG}").json()["last_poll"]
    assert last["tables_seen"] == first.tables_seen and last["error"] is None
    assert last["notification_id"] == _cursor(rt) is not None


def test_one_client_serves_many_threads(hive_metastore: Metastore, tmp_path: Path) -> None:
    """The registry shares a catalog's client between threads (a burst of notes is
    refreshed four at a time): pyiceberg's HiveCatalog closes one thread's socket under
    another's call (with it here, most of these loads fail: "Bad file descriptor"); ours
    gives each thread its own."""
    writer = HiveCatalog("w", uri=hive_metastore.uri, warehouse=tmp_path.as_uri())
    ns = f"t_{uuid.uuid4().hex[:8]}"
    writer.create_namespace(ns)
    writer.create_table(f"{ns}.t", schema=SCHEMA)
    client = TimedHiveCatalog("c", uri=hive_metastore.uri)
    with ThreadPoolExecutor(8) as pool:
        loads = [pool.submit(client.load_table, f"{ns}.t") for _ in range(64)]
        errors = [str(f.exception()) for f in loads if f.exception() is not None]
    assert errors == []


def test_a_metastore_error_keeps_its_type_and_message(hive_metastore: Metastore) -> None:
    """Thrift's generated errors refuse the traceback Python sets as one leaves a
    `@contextmanager` block (a TypeError took its place); `lakewarden.metastore` lets it."""
    with pytest.raises(NoSuchObjectException), metastore_client(hive_metastore.uri) as client:
        client.get_table("no_such_database", "t")


def test_an_opted_out_table_stays_out_as_its_commits_arrive(
    rt: Runtime, hive: Hive, client: TestClient
) -> None:
    ns = hive.namespace
    table = append_batches(hive.writer.create_table(f"{ns}.orders", schema=SCHEMA), 1)
    wait_for(lambda: _caught_up(rt, ns, "orders", table), 10, "orders adopted")
    r = client.put(f"/api/v1/catalogs/{CATALOG}/tables/{ns}/orders/opt-out")
    assert r.status_code == 200 and r.json()["opt_out"], r.text
    seen = _row(rt, ns, "orders")
    assert seen is not None and seen.retired_at is not None
    append_batches(table, 2, start=10)
    # A table created beside it is adopted: the log was followed past the commits.
    other = hive.writer.create_table(f"{ns}.other", schema=SCHEMA)
    wait_for(lambda: _caught_up(rt, ns, "other", other), 10, "the next table adopted")
    row = _row(rt, ns, "orders")
    assert row is not None and row.opt_out and row.retired_at is not None
    assert row.metadata_location == seen.metadata_location


def test_a_metastore_that_does_not_answer_holds_up_only_its_own_catalog(
    rt: Runtime, hive: Hive
) -> None:
    """A second Hive catalog whose metastore accepts connections and never answers (each
    follow waits out the socket timeout): the first catalog's commits still become tasks
    within 2 s, and the silent one's error is logged, its cursor left alone."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)  # connections complete in the kernel's backlog; nothing answers
        uri = f"thrift://127.0.0.1:{silent.getsockname()[1]}"
        with transaction(rt.engine) as s:
            s.add(CatalogRow(name="silent", type="hive", properties={"uri": uri}, version=1))
            s.add(CatalogPoll(catalog="silent", notification_id=5))
        rt.catalogs.forget()
        ns = hive.namespace
        table = append_batches(hive.writer.create_table(f"{ns}.orders", schema=SCHEMA), 2)
        wait_for(lambda: _caught_up(rt, ns, "orders", table), 10, "orders adopted")
        adopted = _row(rt, ns, "orders")
        assert adopted is not None
        for i in range(3):
            table = append_batches(table, 1, start=100 * (i + 1))
            started = time.monotonic()
            snapshot_id = current(table).snapshot_id
            wait_for(lambda: _task_for(rt, adopted.id, snapshot_id), 5, "a task")  # noqa: B023
            took = time.monotonic() - started
            assert took <= 2.0, f"commit {i} became a task in {took:.2f} s"
            _cancel_open_tasks(rt, adopted.id)
        with transaction(rt.engine) as s:
            poll = s.get(CatalogPoll, "silent")
            assert poll is not None and poll.notification_id == 5


def test_a_log_that_went_back_is_followed_from_its_start_again(rt: Runtime, hive: Hive) -> None:
    """The metastore's database replaced (its event ids start over below the cursor): the
    cursor goes to the log's newest event, a poll is due at once, and commits are heard."""
    with transaction(rt.engine) as s:
        s.execute(
            text(
                "UPDATE catalog_polls SET notification_id = notification_id + 100000, "
                "due_at = now() + interval '1 hour' WHERE catalog = :c"
            ),
            {"c": CATALOG},
        )
    with metastore_client(hive.metastore.uri) as client:
        newest = current_event_id(client)
    wait_for(lambda: _cursor(rt) == newest, 5, "the cursor back at the newest event", str)
    with transaction(rt.engine) as s:
        poll = s.get(CatalogPoll, CATALOG)
        now = s.scalar(select(func.now()))
        assert poll is not None and now is not None and poll.due_at <= now
    ns = hive.namespace
    table = append_batches(hive.writer.create_table(f"{ns}.orders", schema=SCHEMA), 1)
    wait_for(lambda: _caught_up(rt, ns, "orders", table), 10, "a commit after the reset")
