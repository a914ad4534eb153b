"""Commit events in batches, duplicates answered without the catalog, and an ingest whose
cost follows the new commits, not the table's history (real Postgres, real pyiceberg
tables)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from helpers import append_batches, bearer, current, issue_token, make_table
from pyiceberg.table import Table
from sqlalchemy import event, select, text

from lakewarden.catalogs.catalog import TableRef, find_tables, load_table
from lakewarden.catalogs.metadata_view import (
    MetadataView,
    ancestor_ids,
    ancestors,
    has_snapshot,
    read_view,
)
from lakewarden.db.models import ManagedTable, TimelineEvent
from lakewarden.db.session import transaction
from lakewarden.events import ingest
from lakewarden.events.ingest import sync_table
from lakewarden.formats.iceberg import history
from lakewarden.runtime import Runtime
from lakewarden.tables import add_table
from services.api import deps
from services.api.schemas import MAX_EVENT_BATCH

ORDERS = {"namespace": "sales", "name": "orders"}


def _register(client: TestClient, namespace: str = "sales", name: str = "orders") -> None:
    r = client.post("/api/v1/tables", json={"namespace": namespace, "name": name})
    assert r.status_code == 201, r.text


def _snapshot_ids(rt: Runtime) -> list[int]:
    with transaction(rt.engine) as s:
        return list(s.scalars(select(TimelineEvent.snapshot_id).order_by(TimelineEvent.id)))


def _commits(table: Table) -> list[int]:
    """The table's snapshot ids, oldest first."""
    return [s.snapshot_id for s in table.snapshots()]


@contextmanager
def _catalog_unreadable(table: Table) -> Iterator[None]:
    """The table's current metadata file moved away: any catalog read of it fails."""
    path = Path(urlparse(table.metadata_location).path)
    away = path.with_name(path.name + ".away")
    path.rename(away)
    try:
        yield
    finally:
        away.rename(path)


def test_a_batch_records_each_commit_once_and_says_which_items_failed(
    client: TestClient, rt: Runtime
) -> None:
    table = make_table(rt)
    make_table(rt, "sales", "unmanaged")
    make_table(rt, "hr", "staff")
    _register(client)
    _register(client, "hr", "staff")
    table = append_batches(table, 3)
    s1, s2, s3 = _commits(table)
    items: list[dict[str, Any]] = [
        ORDERS | {"snapshot_id": s1},
        ORDERS | {"snapshot_id": s2},
        ORDERS | {"snapshot_id": 12345},  # not a snapshot of the table
        {"namespace": "sales", "name": "unmanaged"},
        {"namespace": "sales", "name": "x-y"},  # not a name lakewarden manages
        ORDERS,
        ORDERS | {"snapshot_id": s3},
        ORDERS | {"snapshot_id": s1},  # the same commit twice in one batch
        {"namespace": "hr", "name": "staff"},  # not the caller's namespace
    ]
    sales_operator = bearer(issue_token(rt, "operator@lake/sales", name="sales-operator"))
    r = client.post("/api/v1/events/batch", json={"events": items}, headers=sales_operator)
    assert r.status_code == 202, r.text
    body = r.json()
    results = body["results"]
    assert [x["index"] for x in results] == list(range(len(items)))
    assert [x["accepted"] for x in results] == [1, 1, 0, 0, 0, 1, 1, 1, 0]
    assert [x["status"] for x in results] == [202, 202, 422, 404, 422, 202, 202, 202, 403]
    assert "snapshot 12345 is not in the metadata of sales.orders" in results[2]["error"]
    assert "sales.unmanaged of catalog 'lake' is not managed" in results[3]["error"]
    assert "invalid table name" in results[4]["error"]
    assert "needs the operator role on lake/hr" in results[8]["error"]
    # Three commits recorded once, counted once over the items, each item its own event.
    assert body["new_events"] == sum(x["new_events"] for x in results) == 3
    assert (body["accepted"], body["failed"]) == (5, 4)
    assert _snapshot_ids(rt) == [s1, s2, s3]
    events = {x["index"]: x["event_id"] for x in results if x["accepted"]}
    assert events[0] == events[7] and len({events[0], events[1], events[6]}) == 3
    assert events[5] == events[6]  # no snapshot named: the table's current one
    assert results[6]["decision"] is not None and results[0]["decision"] == "superseded"
    assert all(x["current_snapshot_id"] == s3 for x in results if x["accepted"])

    # The same batch again (as an admin): nothing new, the same items refused but hr's.
    again = client.post("/api/v1/events/batch", json={"events": items}).json()
    assert again["new_events"] == 0 and _snapshot_ids(rt) == [s1, s2, s3]
    assert [x["status"] for x in again["results"]] == [202, 202, 422, 404, 422] + [202] * 4
    assert [x["event_id"] for x in again["results"][:2]] == [events[0], events[1]]


def test_batch_size_and_shape_are_checked(client: TestClient, rt: Runtime) -> None:
    make_table(rt)
    _register(client)
    assert client.post("/api/v1/events/batch", json={"events": []}).status_code == 422
    too_many = {"events": [ORDERS] * (MAX_EVENT_BATCH + 1)}
    assert client.post("/api/v1/events/batch", json=too_many).status_code == 422
    huge = {"events": [ORDERS | {"snapshot_id": 2**63}]}  # not a 64-bit id: no 500
    assert client.post("/api/v1/events/batch", json=huge).status_code == 422
    assert client.post("/api/v1/events", json=huge["events"][0]).status_code == 422
    typo = {"events": [ORDERS | {"snapshot": 1}]}  # unknown field: a 422 for the batch
    r = client.post("/api/v1/events/batch", json=typo)
    assert r.status_code == 422 and "events.0" in r.text
    viewer = bearer(issue_token(rt, "viewer", name="viewer"))
    r = client.post("/api/v1/events/batch", json={"events": [ORDERS]}, headers=viewer)
    assert r.status_code == 403 and "needs the operator role" in r.json()["detail"]


def test_concurrent_batches_and_posts_record_each_commit_once(
    client: TestClient, rt: Runtime
) -> None:
    table = make_table(rt)
    _register(client)
    table = append_batches(table, 4)
    commits = _commits(table)
    answered: list[int] = []
    statuses: list[int] = []
    lock = threading.Lock()

    def post_batch(k: int) -> None:
        items = [ORDERS | {"snapshot_id": s} for s in commits[k % 4 :] + commits[: k % 4]]
        r = client.post("/api/v1/events/batch", json={"events": [*items, ORDERS]})
        with lock:
            statuses.append(r.status_code)
            if r.status_code == 202:
                answered.append(r.json()["new_events"])

    def post_one(_: int) -> None:
        r = client.post("/api/v1/events", json=ORDERS)
        with lock:
            statuses.append(r.status_code)
            if r.status_code == 202:
                answered.append(r.json()["new_events"])

    threads = [threading.Thread(target=post_batch, args=(k,)) for k in range(6)]
    threads += [threading.Thread(target=post_one, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert statuses == [202] * 9
    assert sorted(_snapshot_ids(rt)) == sorted(commits)
    assert sum(answered) == 4  # each commit answered as new exactly once


def test_a_duplicate_is_answered_without_reading_the_catalog(
    client: TestClient, rt: Runtime
) -> None:
    table = make_table(rt)
    _register(client)
    table = append_batches(table, 2)
    s1, s2 = _commits(table)
    assert client.post("/api/v1/events", json=ORDERS).json()["new_events"] == 2
    with _catalog_unreadable(table):
        with pytest.raises(FileNotFoundError):  # the catalog cannot read the table now
            load_table(rt.catalog, TableRef("sales", "orders"))
        same_pointer = ORDERS | {"metadata_location": table.metadata_location}
        r = client.post("/api/v1/events", json=same_pointer)
        assert r.status_code == 202, r.text
        assert r.json()["new_events"] == 0 and r.json()["event"]["snapshot_id"] == s2
        r = client.post("/api/v1/events", json=ORDERS | {"snapshot_id": s1})
        assert r.status_code == 202, r.text
        assert r.json()["event"]["snapshot_id"] == s1 and r.json()["current_snapshot_id"] == s2
        batch = [same_pointer, ORDERS | {"snapshot_id": s1}, same_pointer | {"snapshot_id": s2}]
        r = client.post("/api/v1/events/batch", json={"events": batch})
        assert r.status_code == 202, r.text
        assert [x["status"] for x in r.json()["results"]] == [202] * 3
        assert r.json()["new_events"] == 0
    assert _snapshot_ids(rt) == [s1, s2]


def test_a_new_pointer_is_read_from_the_catalog(client: TestClient, rt: Runtime) -> None:
    """A notification of the pointer lakewarden holds is a duplicate (the commits after it
    have notifications of their own); one of a pointer it does not hold is read."""
    table = make_table(rt)
    _register(client)
    table = append_batches(table, 1)
    old = table.metadata_location
    assert client.post("/api/v1/events", json=ORDERS).json()["new_events"] == 1
    table = append_batches(table, 1, start=100)
    items = [ORDERS | {"metadata_location": old}, ORDERS | {"metadata_location": "s3://x/y"}]
    r = client.post("/api/v1/events/batch", json={"events": items})
    assert [x["new_events"] for x in r.json()["results"]] == [0, 1]
    assert _snapshot_ids(rt) == _commits(table)
    assert r.json()["results"][1]["current_snapshot_id"] == current(table).snapshot_id
    r = client.post("/api/v1/events", json=ORDERS | {"metadata_location": old})
    assert (
        r.json()["new_events"] == 0
        and r.json()["current_snapshot_id"] == current(table).snapshot_id
    )


@contextmanager
def _statements(rt: Runtime) -> Iterator[list[tuple[str, Any]]]:
    """Every SQL statement `rt.engine` runs meanwhile, with its parameters."""
    seen: list[tuple[str, Any]] = []

    def record(_conn: Any, _cursor: Any, statement: str, params: Any, *_: Any) -> None:
        seen.append((statement, params))

    event.listen(rt.engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(rt.engine, "before_cursor_execute", record)


def _sync(rt: Runtime, table: Table) -> list[int]:
    with transaction(rt.engine) as s:
        row = s.scalars(select(ManagedTable)).one()
        return sync_table(s, row, table, source="test").new_event_ids


def test_sync_walks_back_in_chunks_and_never_reads_the_whole_history(rt: Runtime) -> None:
    table = make_table(rt)
    with transaction(rt.engine) as s:
        add_table(s, rt.settings.catalog_name, TableRef("sales", "orders"), {})
    table = append_batches(table, 30, rows=2)
    assert len(_sync(rt, table)) == 30
    # 9 commits nobody reported: more than the first chunk (8 ids), then 16
    table = append_batches(table, 9, rows=2, start=100)
    with _statements(rt) as seen:
        new = _sync(rt, table)
    assert _snapshot_ids(rt) == _commits(table)  # the gap recorded, in commit order
    assert len(new) == 9 and new == sorted(new)
    asked = [p for q, p in seen if "FROM timeline_events" in q and "SELECT" in q]
    # Each read of known snapshots names its candidate ids: 8, then 16 (which reach the
    # known 30th commit), never the table's whole history of 39 commits.
    assert [len(p["snapshot_ids"]) for p in asked] == [8, 16]
    with transaction(rt.engine) as s:
        s.execute(text("DELETE FROM timeline_events WHERE id < :i"), {"i": min(new)})
    # The next commit: one chunk asked about; the walk stops at the newest known commit and
    # does not go on to the 30 older ones it no longer has events for.
    table = append_batches(table, 1, rows=2, start=1000)
    with _statements(rt) as seen:
        assert len(_sync(rt, table)) == 1
    asked = [p for q, p in seen if "FROM timeline_events" in q and "SELECT" in q]
    assert [len(p["snapshot_ids"]) for p in asked] == [8]
    assert len(_snapshot_ids(rt)) == 10


def test_sync_of_an_unmoved_pointer_does_not_touch_the_row(rt: Runtime) -> None:
    table = make_table(rt)
    with transaction(rt.engine) as s:
        add_table(s, rt.settings.catalog_name, TableRef("sales", "orders"), {})
    table = append_batches(table, 2, rows=2)
    _sync(rt, table)
    with transaction(rt.engine) as s:
        before = s.scalars(select(ManagedTable)).one().updated_at
    with _statements(rt) as seen:
        assert _sync(rt, table) == []
    assert not [q for q, _ in seen if "UPDATE" in q or "timeline_events" in q]
    with transaction(rt.engine) as s:
        row = s.scalars(select(ManagedTable)).one()
        assert row.updated_at == before
        assert row.current_snapshot_id == current(table).snapshot_id


def test_the_walk_is_bounded_by_max_walk(rt: Runtime) -> None:
    table = make_table(rt)
    with transaction(rt.engine) as s:
        add_table(s, rt.settings.catalog_name, TableRef("sales", "orders"), {})
    table = append_batches(table, 12, rows=2)
    with transaction(rt.engine) as s:
        row = s.scalars(select(ManagedTable)).one()
        got = ingest.unseen_snapshots(s, row.id, table, max_walk=10)
    assert [x.snapshot_id for x in got] == _commits(table)[::-1][:10]


def test_commits_expired_before_they_were_read_leave_a_gap_marker(
    client: TestClient, rt: Runtime
) -> None:
    """A listener that falls behind by more than the table's snapshot expiry: the commits
    that expired unread can never be recorded, and the first one recorded after them says
    so (it looked whole before); commits expired after they were recorded leave no gap."""
    table = make_table(rt)
    _register(client)
    table = append_batches(table, 2, rows=2)
    assert len(_sync(rt, table)) == 2
    seen = current(table).snapshot_id
    table = append_batches(table, 3, rows=2, start=100)  # nobody hears these three
    table.maintenance.expire_snapshots().by_ids(_commits(table)[:4]).commit()
    table = table.refresh()
    new = _sync(rt, table)
    assert len(new) == 1
    with transaction(rt.engine) as s:
        events = {e.snapshot_id: e for e in s.scalars(select(TimelineEvent))}
    (after,) = [e for e in events.values() if e.id in new]
    # pyiceberg's expiry drops the survivor's parent id: the sequence numbers tell.
    assert after.gap_before == {
        "last_recorded_snapshot_id": seen,
        "missing_commits_at_most": 2,
        "why": "sequence numbers 3 to 4 were never read: expired from the table's metadata "
        "before it was read",
    }
    assert [e.gap_before for e in events.values() if e.id not in new] == [None, None]
    page = client.get("/api/v1/tables/sales/orders/events").json()
    assert page["items"][0]["gap_before"]["missing_commits_at_most"] == 2
    ui = client.get(f"/ui/t/{rt.settings.catalog_name}/sales/orders")
    assert ui.status_code == 200 and "commits never read before this one" in ui.text
    # The next commit follows a recorded one, expired before the read too: no gap.
    table = append_batches(table, 1, rows=2, start=1000)
    table.maintenance.expire_snapshots().by_id(after.snapshot_id).commit()
    (latest,) = _sync(rt, table.refresh())
    latest_snapshot = current(table).snapshot_id
    with transaction(rt.engine) as s:
        assert s.get(TimelineEvent, latest).gap_before is None  # type: ignore[union-attr]
    # More new commits than the walk's bound: the older ones are past it, and named.
    table = append_batches(table.refresh(), 5, rows=2, start=2000)
    with transaction(rt.engine) as s:
        row = s.scalars(select(ManagedTable)).one()
        bounded = sync_table(s, row, table, source="test", max_walk=3).new_event_ids
        first = s.get(TimelineEvent, bounded[0])
        assert first is not None and first.gap_before == {
            "last_recorded_snapshot_id": latest_snapshot,
            "missing_parent_snapshot_id": _commits(table)[-4],
            "why": "more than 3 new commits: older ones are past the walk's bound",
        }


# Every commit of these tables calls for compaction (each writes 2 small files).
EAGER = {"compaction": {"min_small_files": 2, "min_input_files": 2}}


def _fleet(client: TestClient, rt: Runtime, count: int, commits: int) -> dict[str, list[int]]:
    """`count` managed tables under EAGER with `commits` unreported commits each: their
    snapshot ids, oldest first, by name."""
    out = {}
    for k in range(count):
        name = f"t{k}"
        table = make_table(rt, name=name)
        r = client.post(
            "/api/v1/tables", json={"namespace": "sales", "name": name, "policy": EAGER}
        )
        assert r.status_code == 201, r.text
        out[name] = _commits(append_batches(table, commits))
    return out


def _items(commits: dict[str, list[int]]) -> list[dict[str, Any]]:
    return [
        {"namespace": "sales", "name": name, "snapshot_id": s}
        for name, snaps in commits.items()
        for s in snaps
    ]


def test_concurrent_overlapping_batches_record_each_commit_and_open_each_task_once(
    client: TestClient, rt: Runtime
) -> None:
    commits = _fleet(client, rt, 4, 3)
    items = _items(commits)
    orders = [items, items[::-1], items[5:] + items[:5]]
    answers: list[dict[str, Any]] = []
    start = threading.Barrier(len(orders))

    def post(events: list[dict[str, Any]]) -> None:
        start.wait()
        r = client.post("/api/v1/events/batch", json={"events": events})
        assert r.status_code == 202, r.text
        answers.append(r.json())

    threads = [threading.Thread(target=post, args=(o,)) for o in orders]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(answers) == len(orders) and all(a["failed"] == 0 for a in answers)
    assert sum(a["new_events"] for a in answers) == len(items)  # each commit new once
    assert sorted(_snapshot_ids(rt)) == sorted(s for snaps in commits.values() for s in snaps)
    with transaction(rt.engine) as s:
        tasks = s.execute(
            text(
                "SELECT m.name, t.kind, t.state, t.trigger, e.snapshot_id FROM tasks t "
                "JOIN managed_tables m ON m.id = t.table_id "
                "JOIN timeline_events e ON e.id = (t.trigger->>'event_id')::bigint"
            )
        ).all()
        found = s.execute(text("SELECT snapshot_id, decision FROM timeline_events"))
        decisions: dict[int, str] = {snapshot_id: decision for snapshot_id, decision in found}
        births = s.execute(
            text("SELECT count(*) FROM task_transitions WHERE from_state IS NULL")
        ).scalar_one()
    # One task per table, born once, triggered by (and saying why) the table's newest commit.
    assert sorted(name for name, *_ in tasks) == sorted(commits) and births == len(commits)
    for name, kind, state, trigger, snapshot_id in tasks:
        assert (kind, state) == ("compaction", "pending")
        assert snapshot_id == trigger["snapshot_id"] == commits[name][-1]
        assert trigger["source"] == "event" and "reducible files" in trigger["reason"]
        assert trigger["policy_version"] == 1
    for snaps in commits.values():
        assert [decisions[s] for s in snaps] == ["superseded", "superseded", "task-created"]


def test_a_batch_costs_the_same_statements_for_two_tables_or_six(
    client: TestClient, rt: Runtime
) -> None:
    """Set-based ingest: what a batch runs does not grow with its tables (each table cost
    ~18 statements before)."""
    commits = _fleet(client, rt, 8, 2)
    names = sorted(commits)
    counted = []
    for few in (names[:2], names[2:]):
        with _statements(rt) as seen:
            r = client.post(
                "/api/v1/events/batch", json={"events": _items({n: commits[n] for n in few})}
            )
        assert r.status_code == 202 and r.json()["new_events"] == 2 * len(few), r.text
        counted.append(len(seen))
    assert counted[0] == counted[1], counted


def test_one_table_failing_in_a_wave_fails_its_items_alone(client: TestClient, rt: Runtime) -> None:
    commits = _fleet(client, rt, 3, 1)
    broken = rt.catalog.load_table("sales.t1")
    with _catalog_unreadable(broken):
        r = client.post("/api/v1/events/batch", json={"events": _items(commits)})
    assert r.status_code == 202, r.text
    assert [x["status"] for x in r.json()["results"]] == [202, 500, 202]
    assert "the server log has it" in r.json()["results"][1]["error"]
    assert sorted(_snapshot_ids(rt)) == sorted([commits["t0"][0], commits["t2"][0]])


def test_the_metadata_view_reads_what_the_full_parse_reads(rt: Runtime) -> None:
    """What ingest reads of a table through `find_tables` (a `MetadataView`: snapshots parsed
    one by one as asked for) is what pyiceberg's full parse of the same file says: pointer,
    current snapshot, every snapshot by id, the ancestry walk, properties and location."""
    table = make_table(rt)
    table = append_batches(table, 12, rows=2)
    ref = TableRef("sales", "orders")
    view = find_tables(rt.catalog, [ref])[ref]
    assert isinstance(view, MetadataView)
    assert view.metadata_location == table.metadata_location
    assert view.current_snapshot() == table.current_snapshot()
    for snap in table.snapshots():
        assert view.snapshot_by_id(snap.snapshot_id) == snap
    assert view.snapshot_by_id(12345) is None
    assert not has_snapshot(view, 12345) and not has_snapshot(table, 12345)
    head = table.current_snapshot()
    assert head is not None and has_snapshot(view, head.snapshot_id)
    walked = [s.snapshot_id for s in history.ancestors(table, head, 5)]
    assert list(ancestor_ids(view, 5)) == list(ancestor_ids(table, 5)) == walked
    assert list(ancestors(view, view.current_snapshot(), 5)) == list(
        history.ancestors(table, table.current_snapshot(), 5)
    )
    assert sorted(view.snapshots, key=lambda s: s.snapshot_id) == sorted(
        table.snapshots(), key=lambda s: s.snapshot_id
    )
    assert view.properties == table.properties and view.location() == table.location()
    # A file a view does not read (compressed) is parsed in full.
    assert read_view(table.io, table.metadata_location + ".gz.metadata.json") is None


def test_a_batch_with_no_turn_to_ingest_is_a_503_to_retry(
    client: TestClient, rt: Runtime, app: FastAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every turn taken (a burst of batches in progress): the next batch waits on the event
    loop, then is answered 503 with Retry-After and nothing of it ingested; sent again once
    a turn is free, it is ingested."""
    table = make_table(rt)
    _register(client)
    table = append_batches(table, 1)  # a commit not ingested yet
    before = _snapshot_ids(rt)
    monkeypatch.setattr(deps, "INGEST_WAIT_S", 0.2)
    monkeypatch.setattr(app.state, "ingest_gate", asyncio.Semaphore(0))  # every turn taken
    items = {"events": [ORDERS | {"snapshot_id": _commits(table)[-1]}]}
    r = client.post("/api/v1/events/batch", json=items)
    assert r.status_code == 503 and r.headers["Retry-After"] == "2", r.text
    assert "ingest is at capacity" in r.json()["detail"] and _snapshot_ids(rt) == before
    app.state.ingest_gate.release()  # a batch in progress finished
    r = client.post("/api/v1/events/batch", json=items)
    assert r.status_code == 202 and r.json()["new_events"] == 1, r.text
    assert not app.state.ingest_gate.locked()  # the turn given back
