"""A Hudi table's completed instants become timeline events (lakewarden.events.path_tables), on
a real Postgres, from real tables Spark's Hudi datasource wrote (`hudi_tables`)."""

from __future__ import annotations

import shutil
from pathlib import Path

from conftest import HudiTables
from fastapi.testclient import TestClient
from sqlalchemy import select

from lakewarden.catalogs.catalog import TableRef
from lakewarden.db.models import ManagedTable, TimelineEvent
from lakewarden.db.session import transaction
from lakewarden.events.path_tables import UNJUDGED, sync_path_table
from lakewarden.formats.hudi.timeline import HudiTimeline
from lakewarden.runtime import Runtime
from lakewarden.tables import add_table


def _row(rt: Runtime, name: str) -> int:
    with transaction(rt.engine) as session:
        return add_table(
            session, rt.settings.catalog_name, TableRef("hudi", name), {}, format="hudi"
        ).id


def _events(rt: Runtime, table_id: int) -> list[TimelineEvent]:
    with transaction(rt.engine) as session:
        rows = session.scalars(
            select(TimelineEvent)
            .where(TimelineEvent.table_id == table_id)
            .order_by(TimelineEvent.id)
        ).all()
        session.expunge_all()
        return list(rows)


def _sync(rt: Runtime, table_id: int, timeline: HudiTimeline, **kw: object) -> list[int]:
    with transaction(rt.engine) as session:
        row = session.get(ManagedTable, table_id, with_for_update=True)
        assert row is not None
        return sync_path_table(session, row, timeline, source="poll", **kw).new_event_ids  # type: ignore[arg-type]


def test_every_completed_instant_is_one_event_in_order(
    rt: Runtime, hudi_tables: HudiTables
) -> None:
    table_id = _row(rt, "mor")
    timeline = HudiTimeline(hudi_tables.mor)
    assert len(_sync(rt, table_id, timeline, page=1)) == 3  # page by page from the cursor
    assert _sync(rt, table_id, timeline) == []  # same head token: nothing read or written
    events = _events(rt, table_id)
    completed = timeline.completed()
    assert [e.commit_id for e in events] == [i.requested for i in completed]
    assert [e.commit for e in events] == [i.requested for i in completed]
    assert all(e.snapshot_id is None for e in events)
    assert [e.sequence_number for e in events] == [i.seq for i in completed]
    assert [e.summary["parent"] for e in events] == [None, *[i.requested for i in completed[:-1]]]
    assert [e.summary["records-written"] for e in events] == ["300", "30", "30"]
    assert {e.operation for e in events} == {"deltacommit"}
    assert {e.decision for e in events} == {"no-action"}
    assert events[-1].decision_detail == {"reason": UNJUDGED}
    assert events[-1].metadata_location == timeline.head_token()
    with transaction(rt.engine) as session:
        row = session.get(ManagedTable, table_id)
        assert row is not None and row.metadata_location == timeline.head_token()
        assert row.format == "hudi"


def test_registration_baselines_then_a_new_instant_follows_the_cursor(
    rt: Runtime, hudi_tables: HudiTables, tmp_path: Path
) -> None:
    """The table as it was before its last commit (its timeline without the newest
    completed instant) is registered: one event, its head; the last commit then lands and
    is the one new event, its parent the baseline."""
    before = tmp_path / "cow"
    shutil.copytree(Path(hudi_tables.cow) / ".hoodie", before / ".hoodie")
    full = HudiTimeline(hudi_tables.cow)
    *older, newest = full.completed()
    (before / ".hoodie" / "timeline" / newest.file_name).unlink()
    table_id = _row(rt, "cow")
    [baseline] = _sync(rt, table_id, HudiTimeline(str(before)), baseline=True)
    [landed] = _sync(rt, table_id, full)
    events = {e.id: e for e in _events(rt, table_id)}
    assert events[baseline].commit_id == older[-1].requested
    assert events[landed].commit_id == newest.requested
    assert events[landed].summary["parent"] == older[-1].requested
    assert events[landed].summary["records-deleted"] == "10"
    assert len(events) == 2  # history before registration is not replayed


def test_the_events_api_shows_a_hudi_instant(
    rt: Runtime, client: TestClient, hudi_tables: HudiTables
) -> None:
    table_id = _row(rt, "api")
    _sync(rt, table_id, HudiTimeline(hudi_tables.cow))
    got = client.get(f"/api/v1/catalogs/{rt.settings.catalog_name}/tables/hudi/api/events")
    assert got.status_code == 200, got.text
    items = got.json()["items"]
    instants = [i.requested for i in HudiTimeline(hudi_tables.cow).completed()]
    assert sorted(e["commit"] for e in items) == instants
    assert all(e["snapshot_id"] is None for e in items)
