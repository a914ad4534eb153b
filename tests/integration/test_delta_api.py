"""Delta tables through the API: a `delta` catalog (a warehouse of table paths), a table
registered by name, its new versions polled end to end (`poll_once`, the replicas' poll)
into events on a real Postgres, and its health checked against the files on disk, on real
tables delta-rs wrote."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from delta_tables import parquet_on_disk, rows, write_orders, write_unreadable
from deltalake import CommitProperties, DeltaTable, write_deltalake
from fastapi.testclient import TestClient
from sqlalchemy import select

from lakewarden.db.models import ManagedTable, TimelineEvent
from lakewarden.db.session import transaction
from lakewarden.events.poller import poll_once
from lakewarden.runtime import Runtime

CATALOGS = "/api/v1/catalogs"
TABLES = f"{CATALOGS}/dlake/tables"


def _delta_catalog(client: TestClient, warehouse: Path) -> None:
    got = client.post(
        CATALOGS,
        json={"name": "dlake", "type": "delta", "properties": {"warehouse": str(warehouse)}},
    )
    assert got.status_code == 201, got.text


def _tasks(client: TestClient) -> list[dict[str, Any]]:
    got = client.get("/api/v1/tasks", params={"table": "sales.orders", "catalog": "dlake"})
    assert got.status_code == 200, got.text
    return list(got.json()["items"])


def test_a_delta_catalog_needs_a_warehouse_that_is_there(
    client: TestClient, tmp_path: Path
) -> None:
    no_warehouse = client.post(CATALOGS, json={"name": "d1", "type": "delta", "properties": {}})
    assert no_warehouse.status_code == 422
    assert "a delta catalog needs the property 'warehouse'" in no_warehouse.json()["detail"]
    missing = client.post(
        CATALOGS,
        json={"name": "d2", "type": "delta", "properties": {"warehouse": str(tmp_path / "no")}},
    )
    assert missing.status_code == 422 and "is not a directory" in missing.json()["detail"]


def test_registration_refuses_a_path_without_a_log_and_an_unreadable_protocol(
    client: TestClient, tmp_path: Path
) -> None:
    warehouse = tmp_path / "wh"
    (warehouse / "lake" / "plain").mkdir(parents=True)
    write_unreadable(warehouse / "lake" / "future")
    _delta_catalog(client, warehouse)
    plain = client.post(TABLES, json={"namespace": "lake", "name": "plain"})
    assert plain.status_code == 404 and "is not a Delta table" in plain.json()["detail"]
    nope = client.post(TABLES, json={"namespace": "lake", "name": "nope"})
    assert nope.status_code == 404 and "has no _delta_log" in nope.json()["detail"]
    future = client.post(TABLES, json={"namespace": "lake", "name": "future"})
    assert future.status_code == 422 and "futureFeature" in future.json()["detail"], future.text
    assert client.get(f"{TABLES}/lake/future").status_code == 404  # nothing was registered


def test_register_poll_and_explain_a_delta_table(
    rt: Runtime, client: TestClient, tmp_path: Path
) -> None:
    """Registered at version 2 (the baseline event), then three writes land; each poll
    makes the versions after the cursor events, in order, once."""
    warehouse = tmp_path / "wh"
    path = warehouse / "sales" / "orders"
    write_orders(path)
    _delta_catalog(client, warehouse)
    got = client.post(TABLES, json={"namespace": "sales", "name": "orders"})
    assert got.status_code == 201, got.text
    events = client.get(f"{TABLES}/sales/orders/events").json()["items"]
    assert [(e["commit"], e["operation"], e["source"]) for e in events] == [
        ("2", "DELETE", "register")
    ]
    assert events[0]["snapshot_id"] is None and events[0]["sequence_number"] == 2

    assert poll_once(rt) == 0  # nothing moved
    write_deltalake(str(path), rows(range(40, 50), "d2"), mode="append")
    assert poll_once(rt) == 1
    marked = CommitProperties(custom_metadata={"userMetadata": "backfill"})
    write_deltalake(str(path), rows(range(50, 60), "d3"), mode="append", commit_properties=marked)
    DeltaTable(str(path)).delete("id >= 55")
    assert poll_once(rt) == 1
    assert poll_once(rt) == 0

    events = client.get(f"{TABLES}/sales/orders/events").json()["items"]  # newest first
    assert [e["commit"] for e in events] == ["5", "4", "3", "2"]
    assert [e["operation"] for e in events] == ["DELETE", "WRITE", "WRITE", "DELETE"]
    assert {e["source"] for e in events[:3]} == {"poll"}
    # the newest of each batch judged by the kinds that run on Delta tables, the rest
    # superseded by it: register (2), the first poll (3), the second poll (4, 5)
    assert [e["decision"] for e in events] == ["no-action", "superseded", "no-action", "no-action"]
    assert events[1]["summary"]["user-metadata"] == "backfill"
    assert events[1]["summary"]["metric.num_added_rows"] == "10"
    assert events[0]["summary"]["parent"] == "4"
    assert events[0]["summary"]["metric.num_deleted_rows"] == "5"
    with transaction(rt.engine) as session:
        row = session.scalars(select(ManagedTable).where(ManagedTable.catalog == "dlake")).one()
        assert row.format == "delta" and row.metadata_location == f"{5:020d}.json"
        details: dict[str, Any] = dict(
            session.execute(
                select(TimelineEvent.commit_id, TimelineEvent.decision_detail).where(
                    TimelineEvent.table_id == row.id
                )
            ).all()
        )
    assert details["4"] == {"reason": f"evaluated together with newer event {events[0]['id']}"}
    for judged in ("2", "3", "5"):
        assert "no partition has min_input_files 5" in details[judged]["compaction"]["reason"]
        assert details[judged]["zorder"]["decision"] == "disabled"
        assert details[judged]["clustering"]["decision"] == "disabled"

    health = client.get(f"{TABLES}/sales/orders/delta")
    assert health.status_code == 200, health.text
    body = health.json()
    disk = parquet_on_disk(path)  # not vacuumed: the disk also holds removed files
    live = DeltaTable(str(path)).file_uris()
    live_sizes = [size for name, size in disk.items() if any(u.endswith(name) for u in live)]
    facts = body["facts"]
    assert facts["version"] == 5 and facts["files"] == len(live) == len(live_sizes)
    assert facts["bytes"] == sum(live_sizes) and facts["records"] == 35 + 10 + 5
    assert facts["small_files"] == facts["files"]  # KB-sized files, a 128 MB target
    assert facts["checkpoint_version"] == 2 and facts["versions_since_checkpoint"] == 3
    assert facts["deletion_vector_files"] == 0 and facts["commit_files"] == 6
    assert sum(body["file_sizes"].values()) == facts["files"] == body["file_sizes"]["<1/16"]
    optimize = next(c for c in body["commands"] if c["command"] == "optimize")
    assert f"{facts['files']} of {facts['files']} files" in optimize["reason"]
    # as lakewarden's compaction judges it: the default policy wants 5 small files in one
    assert not optimize["due"] and "no partition has min_input_files 5" in optimize["reason"]

    iceberg_view = client.get(f"{TABLES}/sales/orders/health")
    assert iceberg_view.status_code == 409
    assert "/sales/orders/delta" in iceberg_view.json()["detail"]
    explain = client.get(f"{TABLES}/sales/orders/explain")
    assert explain.status_code == 409 and "is a delta table" in explain.json()["detail"]
    hudi_view = client.get(f"{TABLES}/sales/orders/hudi")
    assert hudi_view.status_code == 409 and "is not a Hudi table" in hudi_view.json()["detail"]
    refs = client.get(f"{TABLES}/sales/orders/refs")  # any Iceberg-only route: a 409
    assert refs.status_code == 409 and "holds Delta tables" in refs.json()["detail"], refs.text


def test_a_polled_delta_version_opens_the_compaction_it_calls_for(
    rt: Runtime, client: TestClient, tmp_path: Path
) -> None:
    """Small files land in one partition; the poll that sees the version judges it as the
    worker's planner would and opens one compaction task saying why."""
    warehouse = tmp_path / "wh"
    path = warehouse / "sales" / "orders"
    write_orders(path)
    _delta_catalog(client, warehouse)
    policy = {"compaction": {"min_small_files": 4, "min_input_files": 4}}
    got = client.post(TABLES, json={"namespace": "sales", "name": "orders", "policy": policy})
    assert got.status_code == 201, got.text
    assert _tasks(client) == []
    for i in range(4):
        write_deltalake(str(path), rows(range(100 + i, 101 + i), "d9"), mode="append")
    assert poll_once(rt) == 1
    (listed,) = _tasks(client)
    task = client.get(f"/api/v1/tasks/{listed['id']}").json()
    assert task["kind"] == "compaction" and task["state"] == "pending"
    assert task["trigger"]["source"] == "event" and task["trigger"]["commit"] == "6"
    assert "small files" in task["trigger"]["reason"] and "d9" in task["trigger"]["reason"]
    assert poll_once(rt) == 0  # nothing moved: no second task


def test_an_operator_restores_a_delta_table_to_a_version(
    client: TestClient, tmp_path: Path
) -> None:
    """POST …/rollback on a Delta table restores a version (delta-rs' RESTORE commit):
    its rows are the version's again; a tag, or a version the table never had, is a 422."""
    warehouse = tmp_path / "wh"
    path = warehouse / "sales" / "orders"
    write_orders(path)  # versions 0-2
    _delta_catalog(client, warehouse)
    got = client.post(TABLES, json={"namespace": "sales", "name": "orders"})
    assert got.status_code == 201, got.text
    rollback = f"{TABLES}/sales/orders/rollback"
    tag = client.post(rollback, json={"to_tag": "daily"})
    assert tag.status_code == 422 and "has no tags" in tag.json()["detail"]
    future = client.post(rollback, json={"to_snapshot": 9})
    assert future.status_code == 422 and "not in the table's history (0..2)" in future.text
    done = client.post(rollback, json={"to_snapshot": 1})
    assert done.status_code == 200, done.text
    assert done.json() == {
        "table": "sales.orders",
        "from_snapshot_id": 2,
        "to_snapshot_id": 1,
        "to_tag": None,
        "rolled_back": True,
        "restore_version": 3,
    }
    restored = DeltaTable(str(path))
    assert restored.history(1)[0]["operation"] == "RESTORE"
    before = DeltaTable(str(path), version=1).to_pyarrow_table().sort_by("id")
    assert restored.to_pyarrow_table().sort_by("id") == before
    again = client.post(rollback, json={"to_snapshot": 3})
    assert again.status_code == 200 and again.json()["rolled_back"] is False


def test_rules_adopt_a_path_catalogs_tables_from_its_warehouse(
    rt: Runtime, client: TestClient, tmp_path: Path
) -> None:
    """A `delta` catalog has no server to list: its poll walks the warehouse for Delta
    logs. A rule adopts the tables it covers (not a plain directory, not one it excludes,
    not one opted out), and a table whose directory is gone retires as dropped."""
    warehouse = tmp_path / "wh"
    for ns, name in [("lake", "orders"), ("lake", "tmp_scratch"), ("lake.eu", "sales")]:
        write_orders(warehouse.joinpath(*ns.split("."), name))
    write_orders(warehouse / "lake" / "kept_out")
    (warehouse / "lake" / "notes").mkdir()
    (warehouse / "lake" / "notes" / "readme.txt").write_text("not a table")
    (warehouse / "lake" / "orders" / "_delta_log" / "_staged").mkdir()  # never walked into
    _delta_catalog(client, warehouse)
    rule = client.post(f"{CATALOGS}/dlake/rules", json={"namespace": "lake*", "exclude": ["tmp_*"]})
    assert rule.status_code == 201, rule.text
    out = client.put(f"{CATALOGS}/dlake/tables/lake/kept_out/opt-out")
    assert out.status_code == 200, out.text

    def managed() -> dict[str, tuple[str | None, str]]:
        with transaction(rt.engine) as s:
            found = s.execute(
                select(
                    ManagedTable.namespace,
                    ManagedTable.name,
                    ManagedTable.retired_reason,
                    ManagedTable.format,
                )
            ).all()
        return {f"{r[0]}.{r[1]}": (r[2], r[3]) for r in found}

    poll_once(rt)
    assert managed() == {
        "lake.orders": (None, "delta"),
        "lake.eu.sales": (None, "delta"),
        "lake.kept_out": ("opted out", "delta"),
    }
    events = client.get(f"{CATALOGS}/dlake/tables/lake/orders/events").json()["items"]
    assert events, "an adopted table's log is read at once"

    shutil.rmtree(warehouse / "lake" / "eu" / "sales")
    poll_once(rt)
    assert managed()["lake.eu.sales"][0] == "dropped from the catalog"
    assert managed()["lake.orders"][0] is None
