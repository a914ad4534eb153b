"""Repair one partition, revert a range (issue 33 §2): a dry run says which files and rows
change; applied, main holds exactly the planned files (checked with pyiceberg against the
table's own past), other partitions and later commits are kept, and the change is audited.
Refused clearly when it cannot be exact, or when main moved since the dry run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
from fastapi.testclient import TestClient
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform

from lakewarden.runtime import Runtime

SCHEMA = pa.schema(
    [pa.field("id", pa.int64(), nullable=False), pa.field("region", pa.string(), nullable=False)]
)
PATH = "/api/v1/catalogs/{c}/tables/sales/{name}/{action}"


def _table(rt: Runtime, client: TestClient, name: str) -> Table:
    rt.catalog.create_namespace_if_not_exists("sales")
    table = rt.catalog.create_table(f"sales.{name}", schema=SCHEMA)
    with table.update_spec() as spec:
        spec.add_field("region", IdentityTransform(), "region")
    r = client.post("/api/v1/tables", json={"namespace": "sales", "name": name})
    assert r.status_code == 201, r.text
    return rt.catalog.load_table(f"sales.{name}")


def _append(table: Table, *ids: int) -> int:
    regions = ["eu" if i % 2 else "us" for i in ids]
    table.append(pa.table({"id": list(ids), "region": regions}, schema=SCHEMA))
    snapshot = table.refresh().current_snapshot()
    assert snapshot is not None
    return snapshot.snapshot_id


def _rows(table: Table, region: str | None = None, snapshot: int | None = None) -> list[int]:
    rows = table.refresh().scan(snapshot_id=snapshot).to_arrow().to_pylist()
    return sorted(r["id"] for r in rows if region is None or r["region"] == region)


def _post(client: TestClient, rt: Runtime, name: str, action: str, body: dict[str, Any]) -> Any:
    path = PATH.format(c=rt.settings.catalog_name, name=name, action=action)
    return client.post(path, json=body)


def test_a_partition_is_repaired_after_a_dry_run(client: TestClient, rt: Runtime) -> None:
    table = _table(rt, client, "repaired")
    good = _append(table, 1, 2)
    _append(table, 3, 4)  # a bad load into both partitions
    _append(table, 5, 6)
    head = _append(table, 8)  # us only
    body: dict[str, Any] = {"partition": {"region": "eu"}, "to_snapshot": good}

    dry = _post(client, rt, "repaired", "repair", body)
    assert dry.status_code == 200, dry.text
    plan = dry.json()
    assert plan["dry_run"] and plan["main_snapshot_id"] == head
    assert (len(plan["files_removed"]), plan["rows_removed"], plan["rows_restored"]) == (2, 2, 0)
    assert _rows(table) == [1, 2, 3, 4, 5, 6, 8]  # a dry run changes nothing

    done = _post(
        client, rt, "repaired", "repair", {**body, "dry_run": False, "main_snapshot_id": head}
    )
    assert done.status_code == 200, done.text
    now = table.refresh().current_snapshot()
    assert now is not None and done.json()["committed_snapshot_id"] == now.snapshot_id
    assert _rows(table, "eu") == _rows(table, "eu", good) == [1]
    assert _rows(table, "us") == [2, 4, 6, 8]  # the other partition's later changes kept
    audit = client.get("/api/v1/audit", params={"action": "repairPartition"}).json()["items"]
    assert audit and audit[0]["change"]["rows_removed"] == 2

    # The same dry run is stale now: main moved since.
    stale = _post(
        client, rt, "repaired", "repair", {**body, "dry_run": False, "main_snapshot_id": head}
    )
    assert stale.status_code == 409 and "main moved since your dry run" in stale.json()["detail"]


def test_a_range_of_commits_is_reverted_and_later_ones_kept(
    client: TestClient, rt: Runtime
) -> None:
    table = _table(rt, client, "reverted")
    base = _append(table, 1, 2)
    _append(table, 3)
    bad_end = _append(table, 5, 7)
    _append(table, 9, 10)  # after the range: kept
    body = {"from_snapshot": base, "to_snapshot": bad_end, "dry_run": False}
    r = _post(client, rt, "reverted", "revert", body)
    assert r.status_code == 200, r.text
    assert r.json()["rows_removed"] == 3 and r.json()["files_restored"] == []
    assert _rows(table) == [1, 2, 9, 10]


def test_what_cannot_be_exact_is_refused_and_nothing_changes(
    client: TestClient, rt: Runtime
) -> None:
    table = _table(rt, client, "refused")
    first = _append(table, 1, 2)
    second = _append(table, 3, 4)
    body: dict[str, Any] = {"partition": {"region": "eu"}, "to_snapshot": first}
    assert _post(client, rt, "refused", "repair", {**body, "dry_run": False}).status_code == 200
    after = table.refresh().current_snapshot()

    # The range's added eu file was taken out by the repair since: its rows are elsewhere.
    r = _post(client, rt, "refused", "revert", {"from_snapshot": first, "to_snapshot": second})
    assert r.status_code == 422 and "rewritten or removed by a later commit" in r.json()["detail"]
    # A partition field the table does not have; a snapshot it never had.
    r = _post(client, rt, "refused", "repair", {**body, "partition": {"zone": "eu"}})
    assert r.status_code == 422 and "partition fields (region)" in r.json()["detail"]
    r = _post(client, rt, "refused", "repair", {**body, "to_snapshot": 42})
    assert r.status_code == 404 and "no snapshot 42" in r.json()["detail"]
    # A file the repair would put back is gone from storage (expired by clean).
    dry = _post(client, rt, "refused", "repair", {**body, "to_snapshot": second}).json()
    (gone,) = dry["files_restored"]
    Path(gone.removeprefix("file://")).unlink()
    r = _post(client, rt, "refused", "repair", {**body, "to_snapshot": second, "dry_run": False})
    assert r.status_code == 422 and "gone from storage" in r.json()["detail"]
    assert table.refresh().current_snapshot() == after  # nothing committed


def test_an_audit_branch_commit_is_cherry_picked_onto_main(client: TestClient, rt: Runtime) -> None:
    """Write-audit-publish by hand: a commit to an audit branch, applied to main by an
    operator, once; main's own later commits kept."""
    table = _table(rt, client, "picked")
    base = _append(table, 1, 2)
    table.manage_snapshots().create_branch(base, "audit").commit()
    table = table.refresh()
    table.append(pa.table({"id": [11, 12], "region": ["eu", "us"]}, schema=SCHEMA), branch="audit")
    audited = table.refresh().metadata.refs["audit"].snapshot_id
    _append(table, 3)  # main moved on meanwhile: a fast-forward is impossible, a pick is not
    body: dict[str, Any] = {"snapshot": audited}
    dry = _post(client, rt, "picked", "cherry-pick", body).json()
    assert (dry["dry_run"], dry["rows_restored"], dry["snapshot_id"]) == (True, 2, audited)
    assert _rows(table) == [1, 2, 3]
    done = _post(client, rt, "picked", "cherry-pick", {**body, "dry_run": False})
    assert done.status_code == 200, done.text
    assert _rows(table) == [1, 2, 3, 11, 12]
    again = _post(client, rt, "picked", "cherry-pick", body)
    assert again.status_code == 422 and "main already holds" in again.json()["detail"]
    on_main = _post(client, rt, "picked", "cherry-pick", {"snapshot": base})
    assert on_main.status_code == 422 and "in main's history already" in on_main.json()["detail"]
