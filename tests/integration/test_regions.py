"""Regions (issue 31 goal 6): each region's scheduler leads only its own catalogs' tables.

The fault test runs two regions with a scheduler pair each (real processes, the test-only
executor of `benchmarks.capacity`: the control plane's own rounds and transitions, no
Spark job), kills one region's leader with SIGKILL, and checks that the other region's
tasks keep completing while the dead region's resume on its standby. The guard tests
check, in process, that a region's fence cannot move another region's task even if asked.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from conftest import serve
from fastapi.testclient import TestClient
from helpers import append_batches, issue_token, make_table, register_catalog, wait_for
from sqlalchemy import select, text

from benchmarks import processes
from benchmarks.capacity import POLICY, ROOT, TEST_EXECUTOR
from lakewarden.alerts.rules import evaluate_leader_rule
from lakewarden.catalogs.catalog import CatalogEntry
from lakewarden.catalogs.regions import lease_name
from lakewarden.db.locks import DBLocks
from lakewarden.db.models import Alert, Catalog, JobRun, ManagedTable, Task
from lakewarden.db.session import transaction
from lakewarden.events.poller import PollResult, poll_due
from lakewarden.leader import Fence, acquire_or_renew
from lakewarden.runtime import Runtime
from lakewarden.states import RunState, TaskState
from lakewarden.tasks import repo
from lakewarden.tasks.runs import finish_run
from services.api.access import TOKEN_COOKIE
from services.scheduler import dispatch
from services.scheduler.reaper import abandon_orphans
from services.worker.main import Worker

EU = "eu"
EU_CATALOG = "eu_lake"
TTL_S = 3.0


def _in_two_regions(rt: Runtime) -> None:
    """This test's deployment: regions default and eu, an `eu_lake` catalog in eu (its
    tables never reach storage here: the executor runs no job)."""
    rt.settings.regions = ["default", EU]
    with transaction(rt.engine) as s:
        s.add(
            Catalog(
                name=EU_CATALOG,
                type="jdbc",
                properties={"uri": "postgresql://unused/eu", "warehouse": "file:///unused"},
                region=EU,
            )
        )


def _planned(rt: Runtime, catalog: str, names: list[str]) -> list[int]:
    """A compaction task per new table of `catalog`, planned (as a worker leaves it)."""
    ids = []
    with transaction(rt.engine) as s:
        for name in names:
            row = ManagedTable(catalog=catalog, namespace="regions", name=name, policy=POLICY)
            s.add(row)
            s.flush()
            task_id = repo.create_task(
                s, table_id=row.id, kind="compaction", trigger={"reason": "test"}, actor="test"
            )
            assert task_id is not None
            repo.transition(s, task_id, TaskState.PLANNING, actor="planner", holder="planner")
            repo.transition(
                s,
                task_id,
                TaskState.PLANNED,
                actor="planner",
                plan={"files_before": 4, "expected_files_after": 1},
                holder=None,
            )
            ids.append(task_id)
    return ids


def _take(rt: Runtime, lease: str, who: str) -> Fence:
    with rt.engine.begin() as conn:
        fence = acquire_or_renew(conn, lease, who, 60.0)
    assert fence is not None
    return fence


# --- the guard: a region's fence moves its region's tasks only ---------------------------


def test_a_leader_of_one_region_cannot_move_another_regions_task(rt: Runtime) -> None:
    _in_two_regions(rt)
    (home,) = _planned(rt, rt.settings.catalog_name, ["home"])
    (away,) = _planned(rt, EU_CATALOG, ["away"])
    default = _take(rt, lease_name("default"), "leader-default")
    assert default.region == "default"

    refused = f"task {away} is not in region 'default'"
    with pytest.raises(repo.TransitionRejected, match=refused), transaction(rt.engine) as s:
        repo.transition(s, away, TaskState.RUNNING, actor="x", fence=default, attempt=1)
    with transaction(rt.engine) as s:  # in bulk too: only its own region's task moves
        moved = repo.transition_all(
            s, Task.id.in_([home, away]), TaskState.CANCELLED, actor="x", fence=default
        )
    assert moved == [home]

    # A run of the eu task, reported under the default region's fence: refused, unchanged.
    eu = _take(rt, lease_name(EU), "leader-eu")
    with transaction(rt.engine) as s:
        repo.transition(
            s, away, TaskState.RUNNING, actor="leader-eu", fence=eu, attempt=1, holder="leader-eu"
        )
        s.add(
            JobRun(
                task_id=away,
                attempt=1,
                state=RunState.RUNNING,
                scheduler_id="leader-eu",
                leader_epoch=eu.epoch,
            )
        )
    assert finish_run(rt, default, away, 1, metrics={}) == "rejected"
    # Nor does the default region's reaper take the eu leader's running task as an orphan.
    assert abandon_orphans(rt, default, 30, inflight=set()) == 0
    with transaction(rt.engine) as s:
        task = s.get(Task, away)
        assert task is not None and (task.state, task.holder) == (TaskState.RUNNING, "leader-eu")
        run = s.scalars(select(JobRun).where(JobRun.task_id == away)).one()
        assert run.state == RunState.RUNNING  # the refused report left the run as it was
    # Its own region's leader finishes it.
    assert finish_run(rt, eu, away, 1, metrics={}) == TaskState.SUCCEEDED


def test_each_region_dispatches_its_own_tasks_within_its_own_pools(rt: Runtime) -> None:
    """Dispatch's next task is its region's; a pool's limit counts that region's running
    jobs only (an eu job, or a dead eu leader's orphan, takes no default-region slot)."""
    _in_two_regions(rt)
    (home,) = _planned(rt, rt.settings.catalog_name, ["home"])
    (away, busy) = _planned(rt, EU_CATALOG, ["away", "busy"])
    with transaction(rt.engine) as s:  # eu's leader runs one job in pool "default"
        repo.transition(s, busy, TaskState.RUNNING, actor="x", holder="leader-eu", attempt=1)

    def pick(region: str) -> int | None:
        limits = json.dumps({"default": 1})
        with transaction(rt.engine) as s:
            row = s.execute(
                dispatch._NEXT_PLANNED, {"pool_limits": limits, "region": region}
            ).one_or_none()
        return None if row is None else int(row[0])

    assert pick("default") == home  # eu's running job does not fill default's pool
    assert pick(EU) is None  # eu's pool is full: one job of its limit of one runs
    with transaction(rt.engine) as s:
        repo.transition(s, busy, TaskState.SUCCEEDED, actor="x")
    assert pick(EU) == away


def test_a_worker_of_one_region_plans_only_that_regions_tasks(rt: Runtime) -> None:
    """A worker started with LAKEWARDEN_REGION (beside its data center's storage) claims
    only its region's pending tasks; an unpinned worker plans every region's. Real tables,
    written by pyiceberg, in a default-region catalog and an eu one."""
    rt.settings.regions = ["default", EU]
    register_catalog(rt, EU_CATALOG, "jdbc", dict(rt.catalogs.default.properties), region=EU)
    tasks = {}
    for catalog in (rt.settings.catalog_name, EU_CATALOG):  # default's task is older: first
        append_batches(make_table(rt, catalog=catalog), 2)
        with transaction(rt.engine) as s:
            row = ManagedTable(catalog=catalog, namespace="sales", name="orders", policy={})
            s.add(row)
            s.flush()
            tasks[catalog] = repo.create_task(
                s, table_id=row.id, kind="compaction", trigger={}, actor="test"
            )
    home, away = tasks[rt.settings.catalog_name], tasks[EU_CATALOG]

    def worker(**region: str) -> Worker:
        settings = rt.settings.model_copy(update=region)
        return Worker(Runtime(settings=settings, db_url=rt.db_url, engine=rt.engine, role="w"))

    def state(task_id: int | None) -> str:
        with transaction(rt.engine) as s:
            task = s.get(Task, task_id)
            assert task is not None
            return task.state

    in_eu = worker(region=EU)
    assert in_eu.rt.settings.pinned_region == EU
    assert in_eu.run_once()
    assert state(away) in ("planned", "skipped") and state(home) == "pending"
    assert not in_eu.run_once()  # the default region's task is not its to plan
    assert state(home) == "pending"

    anywhere = worker()  # no LAKEWARDEN_REGION: every region's
    assert anywhere.rt.settings.pinned_region is None
    assert anywhere.run_once()
    assert state(home) in ("planned", "skipped")


def test_a_replica_of_one_region_polls_only_that_regions_catalogs(rt: Runtime) -> None:
    """An API replica started with LAKEWARDEN_REGION polls (and follows, and listens to)
    its region's catalogs only; an unpinned one polls the rest."""
    _in_two_regions(rt)
    rt.catalogs.forget()
    polled: list[tuple[str, str]] = []

    def replica(who: str, **region: str) -> None:
        settings = rt.settings.model_copy(update=region)
        pinned = Runtime(settings=settings, db_url=rt.db_url, engine=rt.engine, role=who)

        def poll(_: Runtime, entry: CatalogEntry) -> PollResult:
            polled.append((who, entry.name))
            return PollResult(entry.name)

        poll_due(pinned, poll)

    replica("in-eu", region=EU)
    assert polled == [("in-eu", EU_CATALOG)]
    replica("anywhere")  # eu's catalog is not due again: only the default region's is left
    assert polled == [("in-eu", EU_CATALOG), ("anywhere", rt.settings.catalog_name)]


# --- the fault: one region's leader killed -------------------------------------------------


@pytest.fixture
def schedulers(rt: Runtime, db_url: str, tmp_path: Path) -> Iterator[dict[str, list[Any]]]:
    """A leader and a standby per region: four real scheduler processes."""
    _in_two_regions(rt)
    procs: dict[str, list[subprocess.Popen[bytes]]] = {}
    for region in ("default", EU):
        env = processes.process_env(
            db_url,
            tmp_path / region,
            drop="LAKEWARDEN_",
            spark_warmup="false",
            regions=json.dumps(rt.settings.regions),
            region=region,
            lease_ttl_s=str(TTL_S),
            lease_renew_interval_s="0.5",
            scheduler_poll_interval_s="1",
            log_level="INFO",
        )
        procs[region] = [
            processes.start(
                [], env, tmp_path / f"{region}-{i}.log", module="benchmarks.capacity", cwd=ROOT
            )
            for i in range(2)
        ]
    yield procs
    processes.stop([p for pair in procs.values() for p in pair], timeout=10, crash=True)


def _holder(rt: Runtime, region: str | None) -> tuple[str, int] | None:
    """The live holder of a region's lease (None: the fleet-wide duties' lease) and epoch."""
    name = DBLocks.FLEET_LEASE if region is None else lease_name(region)
    with rt.engine.connect() as conn:
        row = conn.execute(
            text("SELECT holder, epoch FROM leader_lease WHERE name = :n AND expires_at > now()"),
            {"n": name},
        ).one_or_none()
    return (row[0], row[1]) if row else None


def _runs(rt: Runtime, task_ids: list[int]) -> dict[int, tuple[str, str, float]] | None:
    """Each task's scheduler and executor, once all succeeded (None before), and when."""
    with transaction(rt.engine) as s:
        rows = s.execute(
            select(Task.id, Task.state, JobRun.scheduler_id, JobRun.metrics, JobRun.finished_at)
            .join(JobRun, JobRun.task_id == Task.id)
            .where(Task.id.in_(task_ids), JobRun.state == RunState.SUCCEEDED)
        ).all()
    if len(rows) < len(task_ids) or any(r.state != TaskState.SUCCEEDED for r in rows):
        return None
    return {r.id: (r.scheduler_id, r.metrics["executor"], r.finished_at.timestamp()) for r in rows}


def _of(procs: list[subprocess.Popen[bytes]], holder: str) -> subprocess.Popen[bytes]:
    return next(p for p in procs if f"-{p.pid}-" in holder)


def test_one_regions_outage_stops_only_its_own_maintenance(
    rt: Runtime, schedulers: dict[str, list[subprocess.Popen[bytes]]], tmp_path: Path
) -> None:
    """The region whose leader also holds the fleet-wide duties' lease goes dark: its
    tasks wait for its standby while the other region's keep completing, and the fleet
    lease moves to a live region leader (a new epoch)."""
    leaders = {r: wait_for(partial(_holder, rt, r), 60, f"a leader in {r}") for r in schedulers}
    for region, (holder, _) in leaders.items():
        _of(schedulers[region], holder)  # its own region's process leads it
    fleet = wait_for(partial(_holder, rt, None), 30, "the fleet-wide duties' holder")
    dark = next(r for r, (holder, _) in leaders.items() if holder == fleet[0])
    (lit,) = set(schedulers) - {dark}
    catalogs = {"default": "lake", EU: EU_CATALOG}

    # Both regions run their own tables' tasks, each on its own region's leader.
    before = {r: _planned(rt, catalogs[r], [f"{r}1", f"{r}2", f"{r}3"]) for r in schedulers}
    for region, ids in before.items():
        runs = wait_for(partial(_runs, rt, ids), 60, f"{region}'s tasks")
        assert {(who, executor) for who, executor, _ in runs.values()} == {
            (leaders[region][0], TEST_EXECUTOR)
        }

    # The data center goes dark: its leader is killed (SIGKILL: no resignation).
    dark_leader = _of(schedulers[dark], leaders[dark][0])
    dark_standby = next(p for p in schedulers[dark] if p is not dark_leader)
    dark_leader.send_signal(signal.SIGKILL)
    dark_leader.wait(10)
    killed_at = time.time()
    after = {r: _planned(rt, catalogs[r], [f"{r}4", f"{r}5", f"{r}6"]) for r in schedulers}

    # The other region keeps completing its tasks, on the same leader.
    lit_runs = wait_for(lambda: _runs(rt, after[lit]), 30, f"{lit}'s tasks")
    assert {who for who, _, _ in lit_runs.values()} == {leaders[lit][0]}
    assert _holder(rt, lit) == leaders[lit]  # never lost its lease

    # The dark region's tasks resume on its standby (a new epoch), none run by the other.
    dark_runs = wait_for(
        lambda: _runs(rt, after[dark]),
        TTL_S + 60,
        f"{dark}'s tasks on its standby",
        lambda: "\n".join(p.read_text()[-3000:] for p in sorted(tmp_path.glob(f"{dark}-*.log"))),
    )
    new_holder, new_epoch = wait_for(lambda: _holder(rt, dark), 10, f"{dark}'s new leader")
    assert f"-{dark_standby.pid}-" in new_holder and new_epoch == leaders[dark][1] + 1
    assert {who for who, _, _ in dark_runs.values()} == {new_holder}
    # The outage stopped only that region: the other's tasks were done before its resumed.
    assert max(t for _, _, t in lit_runs.values()) < min(t for _, _, t in dark_runs.values())

    # The fleet-wide duties moved to a live region leader (whichever renewed first).
    def fleet_moved() -> tuple[str, int] | None:
        now = _holder(rt, None)
        return now if now is not None and now[1] > fleet[1] else None

    moved = wait_for(fleet_moved, TTL_S + 30, "the fleet lease to move")
    assert moved[0] in (leaders[lit][0], new_holder) and moved[1] == fleet[1] + 1
    print(
        f"{dark} resumed {min(t for _, _, t in dark_runs.values()) - killed_at:.1f}s after the "
        f"kill (lease TTL {TTL_S}s); {lit} finished its 3 tasks "
        f"{max(t for _, _, t in lit_runs.values()) - killed_at:.1f}s after it; the fleet "
        f"lease went from {dark}'s leader to {moved[0]}"
    )


# --- a stale region, as the on-call sees it ------------------------------------------------


def test_a_stale_region_is_named_by_its_alert_and_metric(rt: Runtime, client: TestClient) -> None:
    """The default region leads; eu never had a leader and its tasks wait: the no_leader
    alert names eu's lease (not the default's), /metrics says which region has none, and
    the fleet-wide duties' lease is the default leader's once it renews."""
    _in_two_regions(rt)
    rt.settings.alert_no_leader_s = 0
    _planned(rt, EU_CATALOG, ["waiting"])
    _take(rt, lease_name("default"), "leader-default")
    _take(rt, DBLocks.FLEET_LEASE, "leader-default")
    with transaction(rt.engine) as s:
        evaluate_leader_rule(s, rt.settings)
    with transaction(rt.engine) as s:
        firing = s.execute(select(Alert.key, Alert.summary).where(Alert.rule == "no_leader")).all()
    assert [key for key, _ in firing] == ["scheduler:eu"]
    assert "no scheduler of region eu has ever held the lease and 1 task(s) wait" in firing[0][1]

    body = client.get("/metrics").text
    assert 'lakewarden_region_leader{region="default"} 1.0' in body
    assert 'lakewarden_region_leader{region="eu"} 0.0' in body
    assert "lakewarden_fleet_leader 1.0" in body
    # the dark region's backlog, by its tables' region (the default region has none)
    assert 'lakewarden_region_tasks{region="eu",state="planned"} 1.0' in body
    assert 'lakewarden_region_tasks{region="default"' not in body


def test_the_dashboard_shows_which_region_has_no_leader(rt: Runtime) -> None:
    _in_two_regions(rt)
    _take(rt, lease_name("default"), "leader-default")
    token = issue_token(rt, "viewer")
    with serve(rt) as c:
        c.headers.pop("Authorization")
        c.cookies.set(TOKEN_COOKIE, token)
        page = c.get("/ui/")
    assert page.status_code == 200, page.text
    rows = page.text.split('<table class="regions">')[1].split("</table>")[0]
    assert "<td>default</td><td>leader-default</td>" in rows
    assert "<td>eu</td><td>none</td>" in rows and "no live leader: maintenance stalls" in rows
