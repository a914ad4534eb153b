"""TTL and clean planning as pure logic: cutoffs, holds, skips, and the SQL they build."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from lakewarden.catalog import TableRef
from lakewarden.kinds.base import PlanRejected
from lakewarden.kinds.clean import TableState, clean_sql, plan_from_state
from lakewarden.kinds.ttl import EPOCH, boundary, delete_sql
from lakewarden.kinds.ttl import plan_from_files as ttl_plan
from lakewarden.metadata import DataFile
from lakewarden.policy import CleanPolicy, TTLPolicy

NOW = datetime(2026, 11, 22, 15, 30, tzinfo=UTC)
REF = TableRef("ns", "t")


def _micros(at: datetime) -> int:
    return int((at - EPOCH).total_seconds() * 1_000_000)


def _day_file(day: datetime, rows: int = 100) -> DataFile:
    lo, hi = day, day + timedelta(hours=23, minutes=59)
    return DataFile(f"{day:%d}", 1000, rows, 0, (), bounds={"ts": (_micros(lo), _micros(hi))})


def _days(n: int) -> list[DataFile]:
    start = NOW.replace(hour=0, minute=0) - timedelta(days=n - 1)
    return [_day_file(start + timedelta(days=i)) for i in range(n)]


def test_boundaries_round_down_to_the_partition() -> None:
    cut = datetime(2026, 11, 12, 15, 30, 12, tzinfo=UTC)
    assert boundary(cut, "day", "timestamptz") == datetime(2026, 11, 12, tzinfo=UTC)
    assert boundary(cut, "hour", "timestamptz") == datetime(2026, 11, 12, 15, tzinfo=UTC)
    assert boundary(cut, "month", "timestamptz") == datetime(2026, 11, 1, tzinfo=UTC)
    assert boundary(cut, "year", "timestamptz") == datetime(2026, 1, 1, tzinfo=UTC)
    assert boundary(cut, "identity", "timestamptz") == cut
    assert boundary(cut, "identity", "date") == datetime(2026, 11, 12, tzinfo=UTC)


def test_partition_level_keeps_the_partition_that_straddles_the_cutoff() -> None:
    policy = TTLPolicy(enabled=True, column="ts", retention_days=3.5, max_fraction=0.8)
    outcome = ttl_plan(policy, "timestamptz", "day", _days(10), 1, NOW)
    assert outcome.plan is not None
    plan = outcome.plan
    # cutoff 2026-11-19 03:30 rounds down to the 19th: days 13..18 expire (6 of 10 files)
    assert plan["cutoff"] == "2026-11-19T00:00:00+00:00" and plan["level"] == "partition"
    assert plan["files_entirely_expired"] == 6 and plan["estimated_rows"] == 600


def test_row_level_uses_the_exact_cutoff() -> None:
    policy = TTLPolicy(enabled=True, column="ts", retention_days=3.5, level="row", max_fraction=0.9)
    plan = ttl_plan(policy, "timestamptz", "day", _days(10), 1, NOW).plan
    assert plan is not None and plan["cutoff"] == "2026-11-19T03:30:00+00:00"
    assert plan["level"] == "row"


def test_holds_instead_of_emptying_or_gutting_the_table() -> None:
    old = [_day_file(NOW - timedelta(days=30 + i)) for i in range(3)]
    policy = TTLPolicy(enabled=True, column="ts", retention_days=7)
    outcome = ttl_plan(policy, "timestamptz", "day", old, 1, NOW)
    assert outcome.plan is None and outcome.reason.startswith("held: every row is older")
    greedy = TTLPolicy(enabled=True, column="ts", retention_days=1, max_fraction=0.5)
    outcome = ttl_plan(greedy, "timestamptz", "day", _days(10), 1, NOW)
    assert outcome.plan is None and outcome.reason.startswith("held: would remove ~")


def test_skips_with_reasons() -> None:
    policy = TTLPolicy(enabled=True, column="ts", retention_days=30)
    assert "nothing older" in ttl_plan(policy, "timestamptz", "day", _days(5), 1, NOW).reason
    strict = TTLPolicy(enabled=True, column="ts", retention_days=3, level="partition")
    assert "level=row" in ttl_plan(strict, "timestamptz", None, _days(5), 1, NOW).reason
    nostats = [DataFile("x", 1, 1, 0, ())]
    assert "lack statistics" in ttl_plan(policy, "timestamptz", "day", nostats, 1, NOW).reason


def test_delete_sql_rebuilds_the_literal_and_rejects_tampering() -> None:
    plan = {
        "action": "delete",
        "column": "ts",
        "column_type": "timestamptz",
        "cutoff": "2026-11-19T00:00:00+00:00",
        "level": "partition",
    }
    assert delete_sql("lake", REF, plan) == (
        "DELETE FROM `lake`.`ns`.`t` WHERE `ts` < TIMESTAMP '2026-11-19 00:00:00.000000'"
    )
    assert delete_sql("lake", REF, {**plan, "column_type": "date"}).endswith("< DATE '2026-11-19'")
    assert "TIMESTAMP_NTZ '2026-11-19" in delete_sql(
        "lake", REF, {**plan, "column_type": "timestamp"}
    )
    for bad in (
        {"column": "ts; drop"},
        {"cutoff": "yesterday"},
        {"cutoff": "2026-11-19"},
        {"column_type": "string"},
        {"action": "drop"},
    ):
        with pytest.raises(PlanRejected):
            delete_sql("lake", REF, {**plan, **bad})


def _state(n: int, manifests: int = 3, refs: set[int] | None = None) -> TableState:
    snaps = [(i, NOW - timedelta(hours=24 * (n - i))) for i in range(1, n + 1)]
    return TableState(
        current_snapshot_id=n,
        snapshots=snaps,
        referenced=refs or {n},
        manifest_sizes=[5000] * manifests,
    )


def test_clean_expires_old_snapshots_beyond_the_kept_ones_but_never_protected_ones() -> None:
    policy = CleanPolicy(keep_last_snapshots=3, max_snapshot_age_hours=48, remove_orphans=False)
    outcome = plan_from_state(policy, _state(10, refs={10, 2}), NOW)
    assert outcome.plan is not None
    (expire,) = outcome.plan["actions"]
    # 10 snapshots a day apart: 7 beyond the last 3, all older than 48 h, minus tag on 2
    assert expire["name"] == "expire_snapshots" and expire["expected_expired"] == 6
    assert expire["retain_last"] == 3 and 2 in outcome.plan["protected_snapshots"]


def test_clean_actions_and_skip() -> None:
    policy = CleanPolicy(rewrite_manifests_min_count=5)
    outcome = plan_from_state(policy, _state(2, manifests=6), NOW)
    assert [a["name"] for a in outcome.plan["actions"]] == [  # type: ignore[index]
        "remove_orphan_files",
        "rewrite_manifests",
    ]
    quiet = CleanPolicy(remove_orphans=False)
    assert "nothing to clean" in plan_from_state(quiet, _state(2), NOW).reason


def test_clean_sql() -> None:
    at = "2026-11-19T00:00:00+00:00"
    assert clean_sql(
        "lake", REF, {"name": "expire_snapshots", "older_than": at, "retain_last": 5}
    ) == (
        "CALL `lake`.system.expire_snapshots(table => 'ns.t', older_than => "
        "TIMESTAMP '2026-11-19 00:00:00.000000', retain_last => 5)"
    )
    assert clean_sql(
        "lake", REF, {"name": "remove_orphan_files", "older_than": at}, dry_run=True
    ).endswith("dry_run => true)")
    assert clean_sql("lake", REF, {"name": "rewrite_manifests"}) == (
        "CALL `lake`.system.rewrite_manifests(table => 'ns.t')"
    )
    for bad in (
        {"name": "drop_table"},
        {"name": "expire_snapshots", "older_than": at, "retain_last": "5; --"},
        {"name": "remove_orphan_files", "older_than": "now"},
    ):
        with pytest.raises(PlanRejected):
            clean_sql("lake", REF, bad)
