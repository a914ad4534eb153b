"""Readiness on a Delta table (issue 29), without Spark: delta-rs writes the table, the
leader's round reads its log on a real Postgres. A ready partition records the log version
it was judged at; reading that version (delta-rs, the independent reader) gives the
partition's rows as they were then, also after later writes and an OPTIMIZE."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from fastapi.testclient import TestClient
from helpers import Receiver, lead, past_quiet, readiness_rows
from sqlalchemy import update

from lakewarden.db.models import ManagedTable, PartitionReadiness, Task
from lakewarden.db.session import transaction
from lakewarden.events.poller import poll_once
from lakewarden.runtime import Runtime
from lakewarden.states import TaskState
from services.scheduler.readiness import readiness_round

TABLES = "/api/v1/catalogs/dlake/tables"
POLICY = {
    "readiness": {
        "enabled": True,
        "partition": "day",
        "rule": "quiet",
        "quiet_minutes": 0.0001,  # quiet once the commit's millisecond has passed
    }
}
D1, D2 = date(2026, 11, 23), date(2026, 11, 24)


def _rows(ids: range, day: date) -> pa.Table:
    return pa.table({"id": list(ids), "day": [day] * len(ids), "v": [i * 10 for i in ids]})


def _ids_at(path: Path, version: int, day: date) -> list[int]:
    """The partition's ids as of `version`, read by delta-rs."""
    table = DeltaTable(str(path), version=version).to_pyarrow_table(filters=[("day", "=", day)])
    return sorted(table.column("id").to_pylist())


def _register(client: TestClient, rt: Runtime, warehouse: Path) -> None:
    got = client.post(
        "/api/v1/catalogs",
        json={"name": "dlake", "type": "delta", "properties": {"warehouse": str(warehouse)}},
    )
    assert got.status_code == 201, got.text
    got = client.post(TABLES, json={"namespace": "sales", "name": "orders"})
    assert got.status_code == 201, got.text
    with transaction(rt.engine) as s:
        s.execute(update(ManagedTable).values(policy=POLICY))


def test_a_ready_partition_records_its_version_and_reads_back_as_it_was(
    rt: Runtime, client: TestClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    receiver = Receiver()
    monkeypatch.setattr(rt.settings, "alert_webhook_url", receiver.url)
    path = tmp_path / "wh" / "sales" / "orders"
    write_deltalake(str(path), _rows(range(0, 5), D1), partition_by=["day"])  # version 0
    write_deltalake(str(path), _rows(range(5, 10), D1), mode="append")  # 1
    write_deltalake(str(path), _rows(range(10, 20), D2), mode="append")  # 2
    _register(client, rt, tmp_path / "wh")
    fence = lead(rt)

    assert readiness_round(rt, fence, past_quiet()) == 2
    states = readiness_rows(rt)
    assert {p: (r.ready, r.snapshot_id, r.last_commit_snapshot_id) for p, r in states.items()} == {
        "2026-11-23": (True, 2, 1),
        "2026-11-24": (True, 2, 2),
    }
    assert states["2026-11-23"].tag is None  # Delta has no tags: the version is the pin

    # An OPTIMIZE rewrites 2026-11-23's two files as one (dataChange false): no data changed.
    DeltaTable(str(path)).optimize.compact()
    assert DeltaTable(str(path)).version() == 3
    assert poll_once(rt) == 1  # the poller ingests version 3: the round reads the log again
    assert readiness_round(rt, fence, past_quiet()) == 0
    # A late write into 2026-11-23: un-readied, and ready again at the new version.
    write_deltalake(str(path), _rows(range(100, 105), D1), mode="append")  # 4
    # Until the poller ingests it the table is idle: nothing new at the head it knows.
    assert (
        readiness_round(rt, fence, past_quiet()) == 0
        and readiness_rows(rt)["2026-11-23"].snapshot_id == 2
    )
    assert poll_once(rt) == 1
    changed = readiness_round(rt, fence, past_quiet())
    states = readiness_rows(rt)
    assert changed == 2, {p: r.reason for p, r in states.items()}
    late = states["2026-11-23"]
    assert (late.ready, late.snapshot_id, late.last_commit_snapshot_id) == (True, 4, 4)
    assert late.unready_reason is not None and late.unready_reason.startswith("late commit 4 at ")
    assert states["2026-11-24"].snapshot_id == 2

    # Later writes into both: each pinned version still reads the partition as it was.
    write_deltalake(str(path), _rows(range(200, 203), D2), mode="append")
    DeltaTable(str(path)).delete("id < 3 or id = 15")
    assert _ids_at(path, 2, D2) == list(range(10, 20))
    assert _ids_at(path, 4, D1) == [*range(0, 10), *range(100, 105)]

    got = client.get(f"{TABLES}/sales/orders/partitions", params={"ready": True})
    assert got.status_code == 200, got.text
    pins = {i["partition"]: i["pin"] for i in got.json()["items"]}
    assert pins["2026-11-24"] == {
        "format": "delta",
        "kind": "version",
        "commit": "2",
        "read": f"SELECT * FROM delta.`{path}` VERSION AS OF 2; "
        f"deltalake.DeltaTable('{path}', version=2)",
    }
    assert pins["2026-11-23"]["commit"] == "4"
    # The partition_ready notifications carry the pin too.
    ready = [b["details"] for _, b in receiver.received if b["event"] == "partition_ready"]
    assert [(d["partition"], d["pin"]["commit"]) for d in ready] == [
        ("2026-11-23", "2"),
        ("2026-11-24", "2"),
        ("2026-11-23", "4"),
    ]
    assert ready[1]["pin"] == pins["2026-11-24"]
    receiver.close()


def test_a_column_the_table_is_not_partitioned_by_is_refused_with_its_columns(
    rt: Runtime, client: TestClient, tmp_path: Path
) -> None:
    path = tmp_path / "wh" / "sales" / "orders"
    write_deltalake(str(path), _rows(range(0, 3), D1), partition_by=["day"])
    _register(client, rt, tmp_path / "wh")
    with transaction(rt.engine) as s:
        s.execute(
            update(ManagedTable).values(
                policy={"readiness": {**POLICY["readiness"], "partition": "v"}}
            )
        )
    got = client.post(f"{TABLES}/sales/orders/heartbeat", json={"partition": "x"})
    assert got.status_code == 409, got.text
    assert got.json()["detail"] == (
        "readiness.partition: the Delta table is not partitioned by 'v' (its partition "
        "columns: day)"
    )
    wrong = {"readiness": {**POLICY["readiness"], "partition": "v"}}
    got = client.put(f"{TABLES}/sales/orders/policy", json=wrong)
    assert got.status_code == 422, got.text
    assert "the Delta table is not partitioned by 'v'" in got.json()["detail"]

    # A string partition column has no end in time: no watermark rule on it.
    watermark = {"readiness": {**POLICY["readiness"], "rule": "watermark"}}
    write_deltalake(
        str(tmp_path / "wh" / "sales" / "text"),
        _rows(range(3), D1).set_column(1, "day", pa.array(["a", "b", "c"])),
        partition_by=["day"],
    )
    got = client.post(TABLES, json={"namespace": "sales", "name": "text"})
    assert got.status_code == 201, got.text
    got = client.put(f"{TABLES}/sales/text/policy", json=watermark)
    assert got.status_code == 422, got.text
    assert "readiness.rule watermark needs partitions that end in time" in got.json()["detail"]
    # A date one has: days named as Iceberg's day partitions are.
    assert client.put(f"{TABLES}/sales/orders/policy", json=watermark).status_code == 200
    bad = client.post(f"{TABLES}/sales/orders/heartbeat", json={"partition": "2026-11"})
    assert bad.status_code == 422 and "name it YYYY-MM-DD" in bad.json()["detail"], bad.text
    got = client.post(f"{TABLES}/sales/orders/heartbeat", json={"partition": "2026-11-22"})
    assert got.status_code == 200 and got.json()["has_data"] is False, got.text


def test_vacuum_keeps_what_a_pinned_version_reads_while_its_pin_is_kept(
    rt: Runtime, client: TestClient, tmp_path: Path
) -> None:
    """The clean kind's VACUUM would retain 0.36 s (the policy consents to go below Delta's
    check); a ready partition pinned at version 1 holds it to the hours since the commit
    after it, so that version still reads whole after a VACUUM at that retention. Once the
    pin lapses (`tag_retention_days` after it became ready), VACUUM is the policy's."""
    from services.worker.main import Worker

    path = tmp_path / "wh" / "sales" / "orders"
    write_deltalake(str(path), _rows(range(0, 10), D1), partition_by=["day"])  # version 0
    write_deltalake(str(path), _rows(range(10, 20), D2), mode="append")  # 1
    _register(client, rt, tmp_path / "wh")
    clean = {"max_snapshot_age_hours": 0.0001, "allow_below_safety_floors": True}
    with transaction(rt.engine) as s:
        s.execute(update(ManagedTable).values(policy={**POLICY, "clean": clean}))
    assert readiness_round(rt, lead(rt), past_quiet()) == 2  # both pinned at version 1
    DeltaTable(str(path)).delete("id >= 5")  # 2: rewrites both partitions' files

    def ask_clean() -> Task:
        got = client.post(f"{TABLES}/sales/orders/tasks", json={"kind": "clean"})
        assert got.status_code == 201, got.text
        assert Worker(rt).run_once()
        with transaction(rt.engine) as s:
            task = s.get(Task, int(got.json()["id"]))
            assert task is not None
            s.expunge(task)
        return task

    held = ask_clean()
    assert held.state == TaskState.SKIPPED, held.reason
    assert held.reason is not None and "no file was removed longer ago than RETAIN 2 HOURS" in (
        held.reason
    )
    assert "held to 2 h for version 1, which ready partition 2026-11-23 is pinned at until " in (
        held.reason
    )
    # delta-rs' own VACUUM at the held retention deletes nothing the pinned version reads.
    DeltaTable(str(path)).vacuum(retention_hours=2, enforce_retention_duration=False, dry_run=False)
    assert _ids_at(path, 1, D2) == list(range(10, 20))
    assert _ids_at(path, 1, D1) == list(range(0, 10))

    with transaction(rt.engine) as s:  # the pins were made 8 days ago: kept 7, lapsed
        s.execute(update(PartitionReadiness).values(since=datetime.now(UTC) - timedelta(days=8)))
    lapsed = ask_clean()
    assert lapsed.state == TaskState.PLANNED, lapsed.reason
    assert lapsed.plan is not None and lapsed.plan["retain_hours"] == 0.0001
    assert "readiness_hold" not in lapsed.plan
