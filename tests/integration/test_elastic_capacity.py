"""Elastic capacity on real Spark (issue 32 §4): an application pool's backlog grows its
capacity (more applications at once), idling shrinks it back to its minimum, never past its
limits; every change is a decision row with its reason, made under the leader's fence. The
rewrites are checked with pyiceberg."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import application_leader, lead, task_of, wait_for
from sqlalchemy import select, text
from test_applications import _logs, app_runtime, planned_in_big_pool

from lakewarden import capacity
from lakewarden.db.models import CapacityDecision, PoolCapacityRow
from lakewarden.db.session import transaction
from lakewarden.fingerprint import fingerprint
from lakewarden.leader import FencedOut
from lakewarden.runtime import Runtime
from services.scheduler.main import Scheduler

pytestmark = pytest.mark.slow

ELASTIC = {"big": {"min": 1, "max": 2, "scale_up_wait_s": 0, "scale_down_idle_s": 3}}
TABLES = ("e1", "e2", "e3")


@pytest.fixture
def elastic_rt(db_url: str, tmp_path: Path) -> Iterator[Runtime]:
    rt = app_runtime(db_url, tmp_path, pool_capacity=ELASTIC)
    yield rt
    rt.engine.dispose()


@pytest.fixture
def leader(elastic_rt: Runtime) -> Iterator[Scheduler]:
    with application_leader(elastic_rt) as sched:
        yield sched


def _running(rt: Runtime) -> int:
    with rt.engine.begin() as conn:
        return int(
            conn.execute(
                text("SELECT count(*) FROM tasks WHERE pool = 'big' AND state = 'running'")
            ).scalar_one()
        )


def _decisions(rt: Runtime) -> list[CapacityDecision]:
    with transaction(rt.engine) as s:
        rows = list(s.scalars(select(CapacityDecision).order_by(CapacityDecision.id)))
        s.expunge_all()
    return rows


def test_a_backlog_grows_the_pool_and_idling_shrinks_it_to_its_minimum(
    leader: Scheduler, elastic_rt: Runtime
) -> None:
    rt = elastic_rt
    ids = [planned_in_big_pool(rt, name) for name in TABLES]
    before = {n: fingerprint(rt.catalog.load_table(f"sales.{n}")) for n in TABLES}

    # The leader's loop, by hand: decide capacity, dispatch, poll the applications.
    peak, seen = 0, set()
    deadline = time.monotonic() + 600
    while any(task_of(rt, i).state not in ("succeeded", "failed") for i in ids):
        assert time.monotonic() < deadline, _logs(leader)
        leader.decide_capacity()
        while leader.dispatch_once():
            pass
        leader.applications.poll(leader.leading())
        peak = max(peak, _running(rt))
        seen.add(leader.capacity.limits()["big"])
        time.sleep(0.5)
    assert [task_of(rt, i).state for i in ids] == ["succeeded"] * 3, _logs(leader)
    assert peak == 2  # grew past its minimum, never past its maximum
    assert seen <= {1, 2}

    # Idle: back to the minimum after scale_down_idle_s, and no lower.
    def shrunk() -> bool:
        leader.applications.poll(leader.leading())
        leader.decide_capacity()
        return leader.capacity.limits()["big"] == 1

    wait_for(shrunk, 60, "the pool to shrink")
    for _ in range(3):
        leader.decide_capacity()
    assert leader.capacity.limits()["big"] == 1

    decisions = _decisions(rt)
    assert [(d.before, d.after) for d in decisions] == [(0, 1), (1, 2), (2, 1)]
    up, down = decisions[1], decisions[2]
    assert up.reason.startswith("scaled up: the oldest of 2 queued tasks waited")
    assert (up.queued, up.running) == (2, 1)
    assert down.reason.startswith("scaled down: ") and "nothing queued" in down.reason
    assert {d.leader_epoch for d in decisions} == {leader.fence.epoch}  # type: ignore[union-attr]
    with transaction(rt.engine) as s:
        row = s.get(PoolCapacityRow, "big")
        assert row is not None and row.capacity == 1 and row.reason == down.reason

    # The jobs were real rewrites (pyiceberg reads the tables): fewer files, same rows.
    for name in TABLES:
        after = fingerprint(rt.catalog.load_table(f"sales.{name}"))
        assert after.data_files < before[name].data_files
        assert (after.rows, after.checksum) == (before[name].rows, before[name].checksum)


def test_a_deposed_leader_decides_nothing(elastic_rt: Runtime) -> None:
    fence = lead(elastic_rt, "old")
    with elastic_rt.engine.begin() as conn:
        conn.execute(text("UPDATE leader_lease SET epoch = epoch + 1, holder = 'new'"))
    with pytest.raises(FencedOut), transaction(elastic_rt.engine) as s:
        capacity.apply(s, fence, elastic_rt.settings)
    assert _decisions(elastic_rt) == []
