"""Readiness on a Hudi table (issue 28): Spark's Hudi datasource writes a copy-on-write
table partitioned by `region` (the session's Hudi writer, `spark_writers`); the leader's
round reads its timeline on a real Postgres. A ready partition records the write instant
it was judged at; reading the table as of that instant (hudi-rs, the independent reader)
gives the partition's rows as they were then."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from helpers import lead
from sqlalchemy import select, update

from lakewarden.db.models import ManagedTable, PartitionReadiness, Task
from lakewarden.db.session import transaction
from lakewarden.events.poller import poll_once
from lakewarden.formats.hudi.file_versions import savepoint_comments
from lakewarden.formats.hudi.timeline import HudiTimeline
from lakewarden.kinds import hudi_clean
from lakewarden.policy.model import CleanPolicy
from lakewarden.runtime import Runtime
from services.scheduler.readiness import readiness_round

TABLES = "/api/v1/catalogs/hlake/tables"
POLICY = {
    "readiness": {"enabled": True, "partition": "region", "rule": "quiet", "quiet_minutes": 0.01}
}


def _states(rt: Runtime) -> dict[str, tuple[bool, int | None, int | None]]:
    with transaction(rt.engine) as s:
        rows = s.scalars(select(PartitionReadiness)).all()
        return {r.partition: (r.ready, r.snapshot_id, r.last_commit_snapshot_id) for r in rows}


def _rows_as_of(path: Path, instant: int, region: str) -> dict[int, int]:
    """id -> v of the region's rows as of `instant`, read by hudi-rs."""
    from hudi import HudiReadOptions, HudiTable

    options = HudiReadOptions().with_as_of_timestamp(str(instant))
    out: dict[int, int] = {}
    for batch in HudiTable(str(path)).read(options):
        for row in batch.to_pylist():
            if row["region"] == region:
                out[int(row["id"])] = int(row["v"])
    return out


def _step(path: Path, op: str, ids: list[int], value: int) -> dict[str, Any]:
    return {
        "path": path.as_uri(),
        "type": "COPY_ON_WRITE",
        "partitioned": True,
        "op": op,
        "ids": ids,
        "value": value,
    }


@pytest.mark.spark
@pytest.mark.timeout(1200)
def test_a_ready_hudi_partition_records_its_instant_and_reads_back_as_it_was(
    rt: Runtime, client: TestClient, spark_writers: Any, tmp_path: Path
) -> None:
    path = tmp_path / "wh" / "lake" / "ready"
    path.parent.mkdir(parents=True)
    spark_writers.run("hudi", [_step(path, "insert", [0, 30], 0)])
    first = int(HudiTimeline(str(path)).completed()[-1].requested)
    got = client.post(
        "/api/v1/catalogs",
        json={"name": "hlake", "type": "hudi", "properties": {"warehouse": str(tmp_path / "wh")}},
    )
    assert got.status_code == 201, got.text
    got = client.post(TABLES, json={"namespace": "lake", "name": "ready"})
    assert got.status_code == 201, got.text
    with transaction(rt.engine) as s:
        s.execute(update(ManagedTable).values(policy=POLICY))
    fence = lead(rt)
    later = datetime.now(UTC) + timedelta(minutes=1)  # past the quiet time

    assert readiness_round(rt, fence, later) == 3
    assert _states(rt) == {r: (True, first, first) for r in ("r0", "r1", "r2")}

    spark_writers.run("hudi", [_step(path, "upsert", [1, 2], 5)])  # id 1: region r1 only
    late = int(HudiTimeline(str(path)).completed()[-1].requested)
    assert poll_once(rt) == 1  # the poller ingests it: the round reads the timeline again
    assert readiness_round(rt, fence, later + timedelta(minutes=1)) == 2  # r1: un, then ready
    assert _states(rt) == {
        "r0": (True, first, first),
        "r1": (True, late, late),
        "r2": (True, first, first),
    }
    assert _rows_as_of(path, first, "r1") == {i: i * 10 for i in range(1, 30, 3)}
    assert _rows_as_of(path, late, "r1") == {**{i: i * 10 for i in range(1, 30, 3)}, 1: 15}

    got = client.get(f"{TABLES}/lake/ready/partitions", params={"ready": True})
    assert got.status_code == 200, got.text
    pins = {i["partition"]: i["pin"] for i in got.json()["items"]}
    assert pins["r0"]["kind"] == "instant" and pins["r0"]["commit"] == str(first)
    assert f".option('as.of.instant', '{late}').load('{path}')" in pins["r1"]["read"]


CLEAN: dict[str, Any] = {
    "keep_last_snapshots": 1,
    "max_snapshot_age_hours": 0.000001,
    "allow_below_safety_floors": True,
}
SAVEPOINTED = {
    "readiness": {**POLICY["readiness"], "tag": True, "tag_retention_days": 7},
    "clean": CLEAN,
}


def _task(rt: Runtime, task_id: int) -> Task:
    with transaction(rt.engine) as s:
        task = s.get(Task, task_id)
        assert task is not None
        s.expunge(task)
    return task


def _base_files(path: Path) -> set[str]:
    return {p.name for p in path.glob("r*/*.parquet")}


@pytest.mark.spark
@pytest.mark.timeout(2400)
def test_a_ready_instant_is_savepointed_before_a_clean_and_released_when_its_pin_lapses(
    rt: Runtime, client: TestClient, db_url: str, spark_writers: Any, tmp_path: Path
) -> None:
    """readiness.tag on Hudi: the round pins every region at the insert's instant and opens
    a clean task; two upserts then rewrite every file group, so the cleaner (keeping
    one commit) would delete the insert's files, but the job savepoints the pinned instant
    first: the files stay, the instant reads whole, and the clean's verdict says which
    savepoint keeps them. Once the pins lapse, the next clean deletes that savepoint."""
    from helpers import run_hudi_pass

    path = tmp_path / "wh" / "lake" / "pinned"
    path.parent.mkdir(parents=True)
    spark_writers.run("hudi", [_step(path, "insert", [0, 30], 0)])
    first = int(HudiTimeline(str(path)).completed()[-1].requested)
    got = client.post(
        "/api/v1/catalogs",
        json={"name": "hlake", "type": "hudi", "properties": {"warehouse": str(tmp_path / "wh")}},
    )
    assert got.status_code == 201, got.text
    got = client.post(TABLES, json={"namespace": "lake", "name": "pinned"})
    assert got.status_code == 201, got.text
    with transaction(rt.engine) as s:
        s.execute(update(ManagedTable).values(policy=SAVEPOINTED))
    assert readiness_round(rt, lead(rt), datetime.now(UTC) + timedelta(minutes=1)) == 3
    with transaction(rt.engine) as s:
        (task_id,) = s.scalars(select(Task.id).where(Task.kind == "clean")).all()
    assert _task(rt, task_id).trigger["reason"].startswith(f"readiness: savepoint instant {first}")

    pinned_files = _base_files(path)
    # Every file group written anew twice: the cleaner keeping one commit would delete
    # the insert's versions (the newest version older than the kept commit stays).
    spark_writers.run(
        "hudi", [_step(path, "upsert", [0, 30], 1), _step(path, "upsert", [0, 30], 2)]
    )
    plans, states, runs = run_hudi_pass(db_url, tmp_path, {"clean": task_id})
    assert states == {"clean": "succeeded"}, (runs["clean"].error, runs["clean"].log_tail)
    plan = plans["clean"].plan or {}
    assert plan[hudi_clean.READY_SAVEPOINTS] == [str(first)] and plan["clean"] is True
    assert (runs["clean"].metrics or {})[hudi_clean.READY_SAVEPOINTS] == [str(first)]

    assert pinned_files <= _base_files(path)  # the cleaner kept what the savepoint reads
    assert _rows_as_of(path, first, "r1") == {i: i * 10 for i in range(1, 30, 3)}
    timeline = HudiTimeline(str(path))
    assert savepoint_comments(timeline) == {str(first): hudi_clean.READY_SAVEPOINT}
    with transaction(rt.engine) as s:
        tags = {r.partition: r.tag for r in s.scalars(select(PartitionReadiness))}
    assert tags == {r: str(first) for r in ("r0", "r1", "r2")}
    got = client.get(f"{TABLES}/lake/pinned/partitions").json()["items"]
    assert {i["pin"]["kind"] for i in got} == {"savepoint"}
    why = hudi_clean.judge(CleanPolicy(**CLEAN), timeline, set(), datetime.now(UTC))
    assert f"stay for savepoint(s) {first} ({hudi_clean.READY_SAVEPOINT})" in why.reason, why

    # The pins lapse (they became ready 8 days ago, kept 7): the next clean deletes it.
    with transaction(rt.engine) as s:
        s.execute(update(PartitionReadiness).values(since=datetime.now(UTC) - timedelta(days=8)))
    got = client.post(f"{TABLES}/lake/pinned/tasks", json={"kind": "clean"})
    assert got.status_code == 201, got.text
    plans, states, runs = run_hudi_pass(db_url, tmp_path, {"clean": int(got.json()["id"])})
    assert states == {"clean": "succeeded"}, (runs["clean"].error, runs["clean"].log_tail)
    assert (plans["clean"].plan or {})[hudi_clean.RELEASED_SAVEPOINTS] == [str(first)]
    assert savepoint_comments(HudiTimeline(str(path))) == {}
    with transaction(rt.engine) as s:
        assert {r.tag for r in s.scalars(select(PartitionReadiness))} == {None}
