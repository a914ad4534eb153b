"""Auto-management end to end on a JDBC catalog: a rule's scope is followed as the catalog
changes (the commit trigger heard by the listener, or a poll): a new table is managed within
seconds, one another optimizer maintains is left alone (and says why), a dropped one is
retired, a renamed one keeps its history."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from helpers import SCHEMA, append_batches, current, wait_for
from sqlalchemy import func, select

from lakewarden.db.models import ManagedTable, ManagementRule, TimelineEvent
from lakewarden.db.session import transaction
from lakewarden.events.listener import CommitListener
from lakewarden.events.poller import poll_once
from lakewarden.runtime import Runtime


@pytest.fixture
def rule(rt: Runtime) -> int:
    """Manage every table of namespaces sales* but the scratch_* ones, compaction on."""
    with transaction(rt.engine) as s:
        row = ManagementRule(
            catalog="lake",
            namespace="sales*",
            include=["*"],
            exclude=["scratch_*"],
            policy={"compaction": {"enabled": True}},
        )
        s.add(row)
        s.flush()
        return row.id


@pytest.fixture
def listening(rt: Runtime) -> Iterator[CommitListener]:
    stop = threading.Event()
    listener = CommitListener(rt, stop)
    listener.start()
    assert listener.connected.wait(20)
    yield listener
    stop.set()
    listener.join(5)


def _row(rt: Runtime, namespace: str, name: str) -> ManagedTable | None:
    with transaction(rt.engine) as s:
        return s.scalars(
            select(ManagedTable).where(
                ManagedTable.namespace == namespace, ManagedTable.name == name
            )
        ).one_or_none()


def test_a_new_table_in_scope_is_managed_by_the_listener(
    rt: Runtime, rule: int, listening: CommitListener, client: TestClient
) -> None:
    rt.catalog.create_namespace_if_not_exists("sales")
    table = rt.catalog.create_table("sales.orders", schema=SCHEMA)
    rt.catalog.create_table("sales.scratch_tmp", schema=SCHEMA)  # excluded
    # Heard through the trigger (no poll runs here); how fast is measured by B10.
    row = wait_for(lambda: _row(rt, "sales", "orders"), 10, "sales.orders adopted")
    assert row.managed_by == f"rule:{rule}" and row.retired_at is None
    assert _row(rt, "sales", "scratch_tmp") is None
    # Its commits are heard from then on, and evaluated under the rule's policy.
    append_batches(table, 2)

    def ingested() -> bool:
        r = _row(rt, "sales", "orders")
        return r is not None and r.current_snapshot_id == current(table.refresh()).snapshot_id

    wait_for(ingested, 10, "the new table's commits ingested")
    got = client.get("/api/v1/tables/sales/orders").json()
    assert got["policy"]["compaction"]["enabled"] is True


def test_a_table_another_optimizer_maintains_is_left_alone_and_says_why(
    rt: Runtime, rule: int, client: TestClient
) -> None:
    rt.catalog.create_namespace_if_not_exists("sales")
    table = rt.catalog.create_table(
        "sales.amoro_made", schema=SCHEMA, properties={"self-optimizing.enabled": "true"}
    )
    append_batches(table, 1)
    poll_once(rt)
    row = _row(rt, "sales", "amoro_made")
    assert row is not None and row.retired_at is not None
    assert "maintained by amoro" in (row.retired_reason or "")
    r = client.get("/api/v1/tables/sales/amoro_made")
    assert r.status_code == 404 and "self-optimizing.enabled" in r.json()["detail"]
    body = {"namespace": "sales", "name": "amoro_made"}
    r = client.post("/api/v1/tables", json=body)
    assert r.status_code == 409 and '"force": true' in r.json()["detail"]
    assert client.post("/api/v1/tables", json=body | {"force": True}).status_code == 201
    poll_once(rt)  # a forced table stays managed
    assert _row(rt, "sales", "amoro_made").retired_at is None  # type: ignore[union-attr]


def test_dropped_tables_retire_and_renamed_ones_keep_their_history(
    rt: Runtime, rule: int, client: TestClient
) -> None:
    rt.catalog.create_namespace_if_not_exists("sales")
    keep = append_batches(rt.catalog.create_table("sales.keep", schema=SCHEMA), 2)
    append_batches(rt.catalog.create_table("sales.gone", schema=SCHEMA), 1)
    poll_once(rt)
    before = _row(rt, "sales", "keep")
    assert before is not None and before.metadata_location == keep.metadata_location
    rt.catalog.drop_table("sales.gone")
    rt.catalog.rename_table("sales.keep", "sales.kept")
    poll_once(rt)
    gone = _row(rt, "sales", "gone")
    assert gone is not None and gone.retired_reason == "dropped from the catalog"
    renamed = _row(rt, "sales", "kept")
    assert renamed is not None and renamed.id == before.id and renamed.retired_at is None
    assert _row(rt, "sales", "keep") is None
    with transaction(rt.engine) as s:
        events = s.scalar(select(func.count()).where(TimelineEvent.table_id == before.id))
    assert events == 1  # its baseline, kept under the new name
    assert client.get("/api/v1/tables/sales/kept").status_code == 200
    r = client.get("/api/v1/tables/sales/gone")
    assert r.status_code == 404 and "dropped from the catalog" in r.json()["detail"]


def test_the_listener_follows_drops_and_renames_without_listing_the_catalog(
    rt: Runtime, rule: int, listening: CommitListener
) -> None:
    rt.catalog.create_namespace_if_not_exists("sales")
    keep = append_batches(rt.catalog.create_table("sales.keep", schema=SCHEMA), 1)
    rt.catalog.create_table("sales.gone", schema=SCHEMA)

    def ingested() -> bool:
        row = _row(rt, "sales", "keep")
        gone = _row(rt, "sales", "gone")  # (created and dropped in one burst: never managed)
        return (
            gone is not None and row is not None and row.metadata_location == keep.metadata_location
        )

    wait_for(ingested, 10, "sales.keep and sales.gone adopted, sales.keep ingested")
    before = _row(rt, "sales", "keep")
    assert before is not None
    rt.catalog.drop_table("sales.gone")
    rt.catalog.rename_table("sales.keep", "sales.kept")

    def followed() -> bool:
        gone, kept = _row(rt, "sales", "gone"), _row(rt, "sales", "kept")
        return bool(gone and gone.retired_at and kept and kept.retired_at is None)

    wait_for(followed, 10, "the drop and the rename followed")
    kept = _row(rt, "sales", "kept")
    assert kept is not None and kept.id == before.id  # the same row: its history kept
    assert _row(rt, "sales", "keep") is None
