"""Empty partitions on a real hour-partitioned Iceberg table (pyiceberg writes, the test
Postgres, the API in process): a writer's heartbeat makes an hour no commit touched ready,
"no data", and a data commit into it later re-judges it as data; the watermark passing
empty hours makes them ready (bounded a round); an hour with neither data nor a heartbeat
past the policy's deadline stays not ready and raises one alert; and the heartbeat's 4xx."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import pytest
from fastapi.testclient import TestClient
from helpers import past_quiet
from pyiceberg.table import Table
from pyiceberg.transforms import HourTransform
from sqlalchemy import select

from lakewarden import readiness
from lakewarden.alerts.rules import evaluate_task_rules
from lakewarden.db.locks import DBLocks
from lakewarden.db.models import Alert, AuditEntry, ManagedTable, PartitionReadiness
from lakewarden.db.session import transaction
from lakewarden.leader import Fence, acquire_or_renew
from lakewarden.runtime import Runtime
from lakewarden.states import AlertState
from services.scheduler.readiness import readiness_round

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("ts", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)


def _h0() -> datetime:
    """The hour three hours before the current one: every hour from it on has ended but
    the current one (read by each test: the hour may turn while the module runs)."""
    return datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=3)


def _label(at: datetime) -> str:
    return at.strftime("%Y-%m-%d-%H")


def _hourly(rt: Runtime, name: str, hours: list[datetime], policy: dict[str, Any]) -> Table:
    """sales.<name>, partitioned by hour of ts, a row in each of `hours`, managed."""
    rt.catalog.create_namespace_if_not_exists("sales")
    table = rt.catalog.create_table(f"sales.{name}", schema=SCHEMA)
    with table.update_spec() as spec:
        spec.add_field("ts", HourTransform(), "ts_hour")
    table = _append(table.refresh(), hours)
    with transaction(rt.engine) as s:
        s.add(
            ManagedTable(
                catalog=rt.settings.catalog_name, namespace="sales", name=name, policy=policy
            )
        )
    return table


def _append(table: Table, hours: list[datetime]) -> Table:
    if hours:
        stamps = [h + timedelta(minutes=10) for h in hours]
        table.append(pa.table({"id": list(range(len(stamps))), "ts": stamps}, schema=SCHEMA))
    return table.refresh()


@pytest.fixture
def fence(rt: Runtime) -> Fence:
    with rt.engine.begin() as conn:
        held = acquire_or_renew(conn, DBLocks.SCHEDULER_LEASE, "leader", 60.0)
    assert held is not None
    return held


def _round(rt: Runtime, fence: Fence) -> int:
    return readiness_round(rt, fence, past_quiet())


def _rows(rt: Runtime) -> dict[str, PartitionReadiness]:
    with transaction(rt.engine) as s:
        rows = s.scalars(select(PartitionReadiness)).all()
        s.expunge_all()
    return {r.partition: r for r in rows}


def _partitions(client: TestClient, name: str) -> dict[str, dict[str, Any]]:
    got = client.get(f"/api/v1/tables/sales/{name}/partitions")
    assert got.status_code == 200, got.text
    return {p["partition"]: p for p in got.json()["items"]}


def _beat(client: TestClient, name: str, partition: str) -> Any:
    return client.post(f"/api/v1/tables/sales/{name}/heartbeat", json={"partition": partition})


QUIET = {"enabled": True, "partition": "ts", "rule": "quiet", "quiet_minutes": 0.0001}


def test_a_heartbeat_makes_an_empty_hour_ready_and_a_later_commit_rejudges_it_as_data(
    rt: Runtime, client: TestClient, fence: Fence
) -> None:
    h0 = _h0()
    table = _hourly(rt, "beats", [h0], {"readiness": {**QUIET, "tag": True}})
    empty = h0 + timedelta(hours=1)
    assert _round(rt, fence) == 1  # h0, quiet: ready with data
    assert _rows(rt)[_label(h0)].ready and _label(empty) not in _rows(rt)

    posted = _beat(client, "beats", _label(empty))
    assert posted.status_code == 200, posted.text
    body = posted.json()
    assert (body["partition"], body["has_data"]) == (_label(empty), False)
    assert "becomes ready with no data in the leader's next round" in body["effect"]
    listed = _partitions(client, "beats")[_label(empty)]
    assert (listed["ready"], listed["no_data"], listed["last_commit_snapshot_id"]) == (
        False,
        True,
        None,
    )
    with transaction(rt.engine) as s:
        audit = s.scalars(select(AuditEntry).where(AuditEntry.action == "postHeartbeat")).one()
        assert (audit.outcome, audit.change) == (
            "ok",
            {"partition": _label(empty), "has_data": False},
        )

    assert _round(rt, fence) == 1
    current = table.refresh().current_snapshot()
    assert current is not None
    listed = _partitions(client, "beats")[_label(empty)]
    assert listed["ready"] and listed["no_data"] and listed["last_commit_at"] is None
    assert listed["reason"].startswith(
        f"no data: writer heartbeat at {listed['heartbeat_at'][:19]}"
    )
    assert listed["reason"].endswith(f"by {listed['heartbeat_by']}")
    # Tagged on the current snapshot, which holds no row of it.
    assert (listed["tag"], listed["snapshot_id"]) == (f"ready-{_label(empty)}", current.snapshot_id)
    assert table.refresh().refs()[f"ready-{_label(empty)}"].snapshot_id == current.snapshot_id
    assert not _partitions(client, "beats")[_label(h0)]["no_data"]

    # A heartbeat for an hour with data is recorded and changes nothing.
    again = _beat(client, "beats", _label(h0))
    assert again.status_code == 200 and again.json()["has_data"]
    assert "the heartbeat changes nothing" in again.json()["effect"]
    assert _rows(rt)[_label(h0)].heartbeat_at is not None
    assert _round(rt, fence) == 0

    # Data lands in the empty hour after all: un-readied by that commit, judged as data.
    table = _append(table, [empty])
    late = table.current_snapshot()
    assert late is not None
    # The quiet rule's 6 ms since that commit must have passed when the round judges it: a
    # quiet machine came back within them (un-ready only, the round returned 1).
    time.sleep(0.05)
    assert _round(rt, fence) == 2  # un-ready, then ready again by the (instant) quiet rule
    row = _rows(rt)[_label(empty)]
    assert row.unready_reason is not None
    assert row.unready_reason.startswith(f"late commit {late.snapshot_id} at ")
    assert row.ready and row.last_commit_snapshot_id == late.snapshot_id
    assert row.reason is not None and row.reason.startswith("complete: no commit touched it")
    assert not _partitions(client, "beats")[_label(empty)]["no_data"]


def test_the_watermark_passing_empty_hours_makes_them_ready_a_bounded_number_a_round(
    rt: Runtime, client: TestClient, fence: Fence, monkeypatch: pytest.MonkeyPatch
) -> None:
    h0 = _h0()
    _hourly(
        rt, "marks", [h0], {"readiness": {"enabled": True, "partition": "ts", "rule": "watermark"}}
    )
    assert _round(rt, fence) == 0  # no watermark yet: nothing is complete
    # Every row before the start of h0 + 3 is written: h0 (data), h0+1, h0+2 (none).
    mark = h0 + timedelta(hours=3)
    posted = client.post(
        "/api/v1/tables/sales/marks/watermark", json={"watermark": mark.isoformat()}
    )
    assert posted.status_code == 200, posted.text
    monkeypatch.setattr(readiness, "MAX_EMPTY", 1)
    assert _round(rt, fence) == 2  # h0, and the first empty hour (capped at one a round)
    first = _rows(rt)[_label(h0 + timedelta(hours=1))]
    assert first.ready and first.last_commit_snapshot_id is None
    assert first.reason == (
        f"no data: the watermark {mark.isoformat()} passed its end "
        f"{(h0 + timedelta(hours=2)).isoformat()} and no commit touched it (this round "
        "recorded the first 1 empty periods; 1 more follow in the next rounds)"
    )
    assert _label(h0 + timedelta(hours=2)) not in _rows(rt)
    assert _round(rt, fence) == 1  # the next round takes the rest, though nothing changed
    second = _rows(rt)[_label(h0 + timedelta(hours=2))]
    assert second.ready and second.reason is not None
    assert second.reason.startswith("no data: the watermark") and "this round" not in second.reason
    assert _label(h0 + timedelta(hours=3)) not in _rows(rt)  # not passed: nothing said
    assert _round(rt, fence) == 0
    assert {p: v["no_data"] for p, v in _partitions(client, "marks").items()} == {
        _label(h0): False,
        _label(h0 + timedelta(hours=1)): True,
        _label(h0 + timedelta(hours=2)): True,
    }


def test_an_hour_with_no_data_and_no_heartbeat_past_its_deadline_is_late_and_alerted_once(
    rt: Runtime, client: TestClient, fence: Fence
) -> None:
    """h0 and h0+1 have neither data nor a heartbeat over 60 min after their ends (a broken
    pipeline): not ready, 'late', and one alert each, however many rounds. A heartbeat for
    one makes it ready (no data) and resolves its alert."""
    h0 = _h0()
    # Data in the hour before h0; h0 and h0+1 ended over an hour ago, h0+2 less than one.
    policy = {"readiness": {**QUIET, "deadline_minutes": 60}}
    _hourly(rt, "broken", [h0 - timedelta(hours=1)], policy)
    for _ in range(2):
        _round(rt, fence)
        with transaction(rt.engine) as s:
            evaluate_task_rules(s, rt.settings, datetime.now(UTC))
    rows = _rows(rt)
    late = [_label(h0 + timedelta(hours=h)) for h in (0, 1)]
    for label in late:
        assert not rows[label].ready and rows[label].overdue_since is not None
        reason = rows[label].reason or ""
        assert reason.startswith("late: no data and no heartbeat 60 min after its end")
    assert _label(h0 + timedelta(hours=2)) not in rows  # not yet past its deadline
    with transaction(rt.engine) as s:
        alerts = s.scalars(select(Alert).where(Alert.rule == "partition_overdue")).all()
        assert sorted(a.details["partition"] for a in alerts) == late
        assert {a.state for a in alerts} == {AlertState.FIRING}
        assert alerts[0].summary.startswith("sales.broken partition ")
    explained = client.get("/api/v1/tables/sales/broken/explain")
    assert explained.status_code == 200, explained.text
    shown = {p["partition"]: p for p in explained.json()["readiness"]["partitions"]}
    assert all(shown[label]["overdue"] and shown[label]["no_data"] for label in late)
    assert shown[late[0]]["reason"].startswith("late: no data and no heartbeat")

    # The dashboard offers the operator a heartbeat on each overdue partition.
    page = client.get(f"/ui/t/{rt.settings.catalog_name}/sales/broken")
    assert page.status_code == 200 and page.text.count(">Heartbeat</button>") == 2
    r = client.post(
        f"/ui/t/{rt.settings.catalog_name}/sales/broken/heartbeat",
        data={"partition": late[0]},
        headers={"Origin": "http://testserver"},
        follow_redirects=False,
    )
    assert r.status_code == 303 and "error" not in r.headers["location"], r.headers
    assert _rows(rt)[late[0]].heartbeat_at is not None
    assert _round(rt, fence) == 1
    with transaction(rt.engine) as s:
        evaluate_task_rules(s, rt.settings, datetime.now(UTC))
    rows = _rows(rt)
    assert rows[late[0]].ready and rows[late[0]].overdue_since is None
    assert not rows[late[1]].ready
    with transaction(rt.engine) as s:
        states = {
            a.details["partition"]: a.state
            for a in s.scalars(select(Alert).where(Alert.rule == "partition_overdue"))
        }
    assert states == {late[0]: AlertState.RESOLVED, late[1]: AlertState.FIRING}


@pytest.fixture
def hourly(rt: Runtime) -> Iterator[str]:
    _hourly(rt, "refused", [_h0()], {"readiness": QUIET})
    yield "refused"


@pytest.mark.parametrize(
    ("partition", "says"),
    [
        ("2026-11-23", "name it YYYY-MM-DD-HH, e.g. 2026-11-23-05"),  # a day, of an hourly table
        ("2026-11-23-25", "name it YYYY-MM-DD-HH, e.g. 2026-11-23-05"),
        ("last night", "name it YYYY-MM-DD-HH, e.g. 2026-11-23-05"),
        (_label(datetime.now(UTC) + timedelta(hours=2)), "in the future"),
    ],
)
def test_a_bad_heartbeat_is_a_422_saying_what_to_send(
    client: TestClient, hourly: str, partition: str, says: str
) -> None:
    got = _beat(client, hourly, partition)
    assert got.status_code == 422, got.text
    assert says in got.json()["detail"]


def test_a_heartbeat_while_readiness_is_disabled_is_a_409(rt: Runtime, client: TestClient) -> None:
    h0 = _h0()
    _hourly(rt, "off", [h0], {})
    got = _beat(client, "off", _label(h0))
    assert got.status_code == 409
    assert "a heartbeat is only used with readiness.enabled: true" in got.json()["detail"]
    assert _rows(rt) == {}
