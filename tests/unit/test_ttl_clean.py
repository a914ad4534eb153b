"""TTL and clean as pure logic over synthetic inputs: cutoffs per transform, holds, skips,
what clean keeps and why, and the exact SQL they build (or refuse to build)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta, timezone

import pytest
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import BucketTransform, DayTransform, IdentityTransform, MonthTransform
from pyiceberg.types import DateType, LongType, NestedField, StringType, TimestamptzType

from lakewarden.catalogs.catalog import TableRef
from lakewarden.kinds import REGISTRY, clean, ttl
from lakewarden.kinds.base import PlanRejected
from lakewarden.kinds.clean import Ref, TableState, clean_sql, plan_from_state, retained_snapshots
from lakewarden.kinds.ttl import EPOCH, boundary, cutoff_literal, delete_sql, plan_from_files
from lakewarden.metadata import DataFile
from lakewarden.policy.model import CleanPolicy, TTLPolicy

NOW = datetime(2026, 11, 22, 15, 30, tzinfo=UTC)
REF = TableRef("ns", "events")


def _us(at: datetime) -> int:
    return (at - EPOCH) // timedelta(microseconds=1)


def _file(lo: datetime, hi: datetime, rows: int = 100, name: str = "f") -> DataFile:
    return DataFile(name, 1000, rows, 0, (), bounds={"ts": (_us(lo), _us(hi))})


def _daily(days: int, end: datetime = NOW) -> list[DataFile]:
    """One file per UTC day (00:00..23:59), the last one being `end`'s day."""
    first = end.replace(hour=0, minute=0) - timedelta(days=days - 1)
    return [
        _file(first + timedelta(days=i), first + timedelta(days=i, hours=23, minutes=59))
        for i in range(days)
    ]


def _ttl(**kw: object) -> TTLPolicy:
    floors_off = {"allow_below_safety_floors": True}  # max_fraction 1.0, retention 0.5 d
    return TTLPolicy.model_validate({"enabled": True, "column": "ts", **floors_off, **kw})


def test_registered_as_swept_kinds_without_commit_verdicts() -> None:
    for name, module in (("ttl", ttl), ("clean", clean)):
        kind = REGISTRY[name]
        assert kind is module.KIND and kind.swept and kind.event_verdict is None


# --- TTL: cutoffs ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("transform", "column_type", "expected"),
    [
        ("hour", "timestamptz", datetime(2026, 11, 12, 15, tzinfo=UTC)),
        ("day", "timestamptz", datetime(2026, 11, 12, tzinfo=UTC)),
        ("month", "timestamptz", datetime(2026, 11, 1, tzinfo=UTC)),
        ("year", "timestamptz", datetime(2026, 1, 1, tzinfo=UTC)),
        ("identity", "timestamptz", datetime(2026, 11, 12, 15, 30, 12, 345, tzinfo=UTC)),
        ("identity", "date", datetime(2026, 11, 12, tzinfo=UTC)),
        ("day", "date", datetime(2026, 11, 12, tzinfo=UTC)),
        ("month", "date", datetime(2026, 11, 1, tzinfo=UTC)),
    ],
)
def test_cutoff_rounds_down_to_the_transform_boundary(
    transform: str, column_type: str, expected: datetime
) -> None:
    cut = datetime(2026, 11, 12, 15, 30, 12, 345, tzinfo=UTC)
    assert boundary(cut, transform, column_type) == expected
    # rounding happens in UTC, as Iceberg's transforms do, whatever zone `now` came in
    assert boundary(cut.astimezone(timezone(timedelta(hours=-8))), transform, column_type) == (
        expected
    )
    with pytest.raises(ValueError):
        boundary(cut, "bucket[4]", column_type)


def test_partition_level_keeps_the_partition_straddling_the_cutoff() -> None:
    # retention 3.5 days from 2026-11-22 15:30 -> 2026-11-19 03:30 -> day boundary the 19th
    out = plan_from_files(
        _ttl(retention_days=3.5, max_fraction=0.8), "timestamptz", "day", _daily(10), 7, NOW
    )
    plan = out.plan
    assert plan is not None, out.reason
    assert plan["cutoff"] == "2026-11-19T00:00:00+00:00"
    assert plan["retention_cutoff"] == "2026-11-19T03:30:00+00:00"
    assert (plan["level"], plan["transform"], plan["action"]) == ("partition", "day", "delete")
    assert (plan["files_entirely_expired"], plan["files_straddling"]) == (6, 0)
    assert (plan["estimated_rows"], plan["estimated_fraction"], plan["rows_before"]) == (
        600,
        0.6,
        1000,
    )
    assert plan["expected_metadata_only"] is True and plan["expected_files_after"] == 4
    assert plan["snapshot_id"] == 7 and "rounded down to the day" in out.reason


def test_row_level_uses_the_exact_cutoff_and_estimates_straddlers_by_time_span() -> None:
    policy = _ttl(retention_days=3.5, level="row", max_fraction=0.9)
    plan = plan_from_files(policy, "timestamptz", "day", _daily(10), 1, NOW).plan
    assert plan is not None and plan["level"] == "row" and plan["transform"] is None
    assert plan["cutoff"] == plan["retention_cutoff"] == "2026-11-19T03:30:00+00:00"
    # the 19th's file (00:00..23:59) is cut at 03:30: 210/1439 of its 100 rows
    assert plan["files_straddling"] == 1 and plan["expected_metadata_only"] is False
    assert plan["estimated_rows"] == round(600 + 100 * 210 / 1439)
    # no aligned spec field: auto falls back to row level
    auto = plan_from_files(
        _ttl(retention_days=3.5, max_fraction=0.9), "timestamptz", None, _daily(10), 1, NOW
    ).plan
    assert auto is not None and auto["level"] == "row"


def test_date_columns_keep_the_day_the_cutoff_falls_in() -> None:
    days = [
        DataFile(str(d), 1, 10, 0, (), bounds={"ts": (d, d + 1)})  # two days per file
        for d in range(20400, 20414, 2)
    ]
    now = EPOCH + timedelta(days=20414, hours=15)  # retention 4 days -> 20410 15:00
    plan = plan_from_files(_ttl(retention_days=4, max_fraction=0.9), "date", None, days, 1, now)
    assert plan.plan is not None
    assert plan.plan["cutoff"] == (EPOCH + timedelta(days=20410)).isoformat()
    # files [20400..20409] wholly before it; [20410, 20411] not touched
    assert plan.plan["files_entirely_expired"] == 5 and plan.plan["files_straddling"] == 0


def test_never_a_row_inside_retention() -> None:
    """Over random tables, policies and clocks: every row the DELETE would remove (value
    < plan cutoff) is older than now - retention_days, and rows newer than the cutoff are
    never counted as expired."""
    rng = random.Random(7)
    planned = 0
    for _ in range(400):
        now = NOW + timedelta(minutes=rng.randrange(0, 60 * 24 * 400))
        retention = rng.choice([0.04, 0.5, 1, 2.5, 7, 30, 45.25])
        transform = rng.choice(["hour", "day", "month", "year", "identity", None])
        level = rng.choice(["auto", "row", "partition"])
        files = []
        for i in range(rng.randrange(1, 12)):
            lo = now - timedelta(hours=rng.uniform(0, 24 * 90))
            files.append(_file(lo, lo + timedelta(hours=rng.uniform(0, 48)), name=str(i)))
        policy = _ttl(retention_days=retention, level=level, max_fraction=1.0)
        plan = plan_from_files(policy, "timestamptz", transform, files, 1, now).plan
        if plan is None:
            continue
        planned += 1
        cutoff = datetime.fromisoformat(plan["cutoff"])
        assert cutoff <= now - timedelta(days=retention)
        assert delete_sql("lake", REF, plan, now=now)  # and the run's own check agrees
        if plan["level"] == "partition":
            assert cutoff == boundary(now - timedelta(days=retention), transform or "", "x")
    assert planned > 100


# --- TTL: holds and skips ----------------------------------------------------------------


def test_held_when_every_row_is_past_retention() -> None:
    stale = _daily(3, end=NOW - timedelta(days=30))
    out = plan_from_files(
        _ttl(retention_days=7, max_fraction=1.0), "timestamptz", "day", stale, 1, NOW
    )
    assert out.plan is None
    assert out.reason.startswith("held: every row is older than the retention")
    assert "would remove every row" in out.reason


def test_held_when_the_newest_row_is_past_retention_even_if_rounding_would_keep_it() -> None:
    # newest 2026-11-20 01:00 < retention cutoff 2026-11-20 13:06, though the day boundary
    # (the 20th, 00:00) would keep it: the writer has stopped, so hold
    files = [_file(NOW - timedelta(days=5), NOW - timedelta(days=2, hours=14, minutes=30))]
    out = plan_from_files(
        _ttl(retention_days=2.1, max_fraction=1.0), "timestamptz", "day", files, 1, NOW
    )
    assert out.plan is None and out.reason.startswith("held: every row")


def test_held_over_max_fraction() -> None:
    out = plan_from_files(
        _ttl(retention_days=1, max_fraction=0.5), "timestamptz", "day", _daily(10), 1, NOW
    )
    assert out.plan is None
    assert out.reason.startswith("held: would remove ~80.0% > max_fraction 50%")
    assert "proportion" in out.reason  # says how it estimated
    # one file over 10 days, cut in the middle: half its rows, by time span
    wide = [_file(NOW - timedelta(days=10), NOW)]
    out = plan_from_files(
        _ttl(retention_days=5, level="row", max_fraction=0.4), "timestamptz", None, wide, 1, NOW
    )
    assert out.reason.startswith("held: would remove ~50.0% > max_fraction 40%")
    assert (
        plan_from_files(
            _ttl(retention_days=5, level="row", max_fraction=0.5), "timestamptz", None, wide, 1, NOW
        ).plan
        is not None
    )


def test_deleted_rows_do_not_count() -> None:
    old = DataFile(
        "old", 1, 100, 0, (), bounds={"ts": (_us(NOW - timedelta(days=9)),) * 2}, deleted_records=90
    )
    new = _file(NOW - timedelta(hours=1), NOW)
    plan = plan_from_files(_ttl(retention_days=1), "timestamptz", None, [old, new], 1, NOW).plan
    assert plan is not None and (plan["estimated_rows"], plan["rows_before"]) == (10, 110)


def test_skips_say_why() -> None:
    def reason(policy: TTLPolicy, transform: str | None, files: list[DataFile]) -> str:
        out = plan_from_files(policy, "timestamptz", transform, files, 1, NOW)
        assert out.plan is None
        return out.reason

    assert reason(_ttl(retention_days=30), "day", _daily(5)).startswith(
        "nothing older than the cutoff: cutoff 2026-10-23T00:00:00+00:00 (partition level"
    )
    # older than the exact cutoff but inside the kept partition: nothing to drop
    assert reason(
        _ttl(retention_days=0.5), "day", [_file(NOW - timedelta(hours=14), NOW)]
    ).startswith("nothing older than the cutoff")
    strict = reason(_ttl(retention_days=3, level="partition"), None, _daily(5))
    assert "level=partition" in strict and "use level=row" in strict
    assert "lack statistics" in reason(_ttl(retention_days=3), "day", [DataFile("x", 1, 1, 0, ())])
    assert reason(_ttl(retention_days=3), "day", []) == "table has no data: nothing to expire"
    assert "needs column" in reason(TTLPolicy(), "day", _daily(2))


def test_what_the_table_offers() -> None:
    schema = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "ts", TimestamptzType()),
        NestedField(3, "d", DateType()),
        NestedField(4, "name", StringType()),
    )
    by_day = PartitionSpec(PartitionField(2, 1000, DayTransform(), "ts_day"))
    by_bucket = PartitionSpec(PartitionField(2, 1000, BucketTransform(8), "ts_b"))
    by_d = PartitionSpec(
        PartitionField(1, 1000, IdentityTransform(), "id"),
        PartitionField(3, 1001, MonthTransform(), "d_month"),
    )
    assert ttl.ttl_target(schema, by_day, "ts") == ("timestamptz", "day")
    assert ttl.ttl_target(schema, by_bucket, "ts") == ("timestamptz", None)
    assert ttl.ttl_target(schema, by_d, "d") == ("date", "month")
    assert ttl.ttl_target(schema, by_day, "d") == ("date", None)
    assert "not a timestamp" in str(ttl.ttl_target(schema, by_day, "name"))
    assert "no column 'gone'" in str(ttl.ttl_target(schema, by_day, "gone"))


# --- TTL: SQL ------------------------------------------------------------------------------


def _ttl_plan(**kw: object) -> dict[str, object]:
    return {
        "action": "delete",
        "column": "ts",
        "column_type": "timestamptz",
        "cutoff": "2026-11-19T00:00:00+00:00",
        "retention_days": 3.5,
        "level": "partition",
        **kw,
    }


def test_delete_sql_exact_output() -> None:
    assert delete_sql("lake", REF, _ttl_plan(), now=NOW) == (
        "DELETE FROM `lake`.`ns`.`events` WHERE `ts` < TIMESTAMP '2026-11-19 00:00:00.000000'"
    )
    assert delete_sql("lake", REF, _ttl_plan(column_type="date")) == (
        "DELETE FROM `lake`.`ns`.`events` WHERE `ts` < DATE '2026-11-19'"
    )
    assert delete_sql("lake", REF, _ttl_plan(column_type="timestamp", level="row")) == (
        "DELETE FROM `lake`.`ns`.`events` WHERE `ts` < TIMESTAMP_NTZ '2026-11-19 00:00:00.000000'"
    )
    # the literal is rebuilt from a parsed datetime: another zone is converted to UTC
    assert delete_sql("lake", REF, _ttl_plan(cutoff="2026-11-18T21:30:00.5-03:00")).endswith(
        "TIMESTAMP '2026-11-19 00:30:00.500000'"
    )
    assert cutoff_literal("date", datetime(2026, 11, 19, 23, tzinfo=UTC)) == "DATE '2026-11-19'"


@pytest.mark.parametrize(
    "bad",
    [
        {"column": "ts; DROP TABLE x"},
        {"column": "`ts`"},
        {"cutoff": "yesterday"},
        {"cutoff": "2026-11-19"},  # no zone
        {"cutoff": "2026-11-19 00:00:00' OR '1'='1"},
        {"cutoff": None},
        {"column_type": "string"},
        {"action": "drop"},
        {"action": None},
        {"level": "table"},
    ],
)
def test_delete_sql_rejects_tampered_plans(bad: dict[str, object]) -> None:
    with pytest.raises(PlanRejected):
        delete_sql("lake", REF, _ttl_plan(**bad), now=NOW)
    with pytest.raises(PlanRejected):
        delete_sql("lake; x", REF, _ttl_plan())


@pytest.mark.parametrize(
    "bad",
    [
        {"cutoff": "2026-11-20T00:00:00+00:00"},  # inside 3.5 days of NOW
        {"cutoff": "2027-01-01T00:00:00+00:00"},  # the future
        {"retention_days": None},
        {"retention_days": "3"},
        {"retention_days": 0},
        {"retention_days": float("nan")},
        {"retention_days": True},
    ],
)
def test_the_run_refuses_a_cutoff_inside_retention(bad: dict[str, object]) -> None:
    with pytest.raises(PlanRejected):
        delete_sql("lake", REF, _ttl_plan(**bad), now=NOW)


# --- clean: what is expired, what is kept ---------------------------------------------------


def _state(
    n: int,
    *,
    hours_apart: float = 24,
    manifests: tuple[int, ...] = (5000, 5000, 5000),
    refs: dict[str, Ref] | None = None,
    parents: dict[int, int | None] | None = None,
) -> TableState:
    """Snapshots 1..n, `hours_apart` apart, n the newest and current; linear history."""
    snaps = [(i, NOW - timedelta(hours=hours_apart * (n - i))) for i in range(1, n + 1)]
    refs = refs if refs is not None else {"main": Ref("branch", n)}
    return TableState(
        current_snapshot_id=n,
        snapshots=snaps,
        referenced={r.snapshot_id for r in refs.values()},
        manifest_sizes=list(manifests),
        parents=parents if parents is not None else {i: (i - 1 or None) for i in range(1, n + 1)},
        refs=refs,
    )


def _quiet(**kw: object) -> CleanPolicy:
    return CleanPolicy.model_validate({"remove_orphans": False, **kw})


def test_expires_old_snapshots_beyond_the_last_n() -> None:
    out = plan_from_state(_quiet(keep_last_snapshots=3, max_snapshot_age_hours=48), _state(10), NOW)
    assert out.plan is not None
    (expire,) = out.plan["actions"]
    assert expire == {
        "name": "expire_snapshots",
        "older_than": "2026-11-20T15:30:00+00:00",
        "retain_last": 3,
        "expected_expired": 7,  # 1..7: beyond 8, 9, 10 and older than 48 h
        "expected_snapshots_after": 3,
    }
    assert out.plan["snapshots_before"] == 10
    assert out.plan["snapshot_age_hours"] == {"oldest": 216.0, "newest": 0.0}
    assert out.plan["refs"] == [{"name": "main", "type": "branch", "snapshot_id": 10}]
    assert out.reason.startswith("7 of 10 snapshots are older than 48 h and beyond the last 3")


def test_branches_and_tags_keep_their_snapshots() -> None:
    # 1..6 on main, 7..9 on branch "dev" forked from 3, a tag on 2; all days apart
    parents: dict[int, int | None] = {1: None, 2: 1, 3: 2, 4: 3, 5: 4, 6: 5, 7: 3, 8: 7, 9: 8}
    snaps_state = _state(
        9,
        refs={"main": Ref("branch", 6), "dev": Ref("branch", 9), "v1": Ref("tag", 2)},
        parents=parents,
    )
    state = TableState(
        6, snaps_state.snapshots, snaps_state.referenced, [1], parents, snaps_state.refs
    )
    policy = _quiet(keep_last_snapshots=2, max_snapshot_age_hours=1)
    why = retained_snapshots(state, policy, NOW)
    assert why == {
        6: "current",
        2: "tag v1",
        9: "referenced by a branch or tag",
        5: "one of the last 2 of branch main",
        8: "one of the last 2 of branch dev",
    }
    out = plan_from_state(policy, state, NOW)
    assert out.plan is not None and out.plan["actions"][0]["expected_expired"] == 4  # 1, 3, 4, 7
    assert out.plan["protected_snapshots"] == [2, 6, 9]
    assert {r["name"]: r["type"] for r in out.plan["refs"]} == {
        "dev": "branch",
        "main": "branch",
        "v1": "tag",
    }
    # a branch's own min-snapshots-to-keep wins over retain_last, as in Iceberg
    own = {**state.refs, "dev": Ref("branch", 9, min_snapshots_to_keep=4)}
    kept = retained_snapshots(TableState(6, state.snapshots, set(), [1], parents, own), policy, NOW)
    assert {3, 7, 8, 9} <= set(kept)


def test_no_expiry_at_or_under_keep_last_or_when_nothing_is_old() -> None:
    few = plan_from_state(_quiet(keep_last_snapshots=5, max_snapshot_age_hours=1), _state(5), NOW)
    assert few.plan is None
    young = _state(12, hours_apart=0.1)  # the oldest is 1.1 h old
    out = plan_from_state(_quiet(keep_last_snapshots=3, max_snapshot_age_hours=2), young, NOW)
    assert out.plan is None
    assert out.reason == (
        "nothing to clean: 12 snapshots (keep_last 3, none older than 2 h beyond them and "
        "unprotected), 3 manifests < rewrite_manifests_min_count 50, orphan removal disabled"
    )


def test_orphan_removal_whenever_enabled() -> None:
    out = plan_from_state(CleanPolicy(orphan_min_age_hours=72), _state(2), NOW)
    assert out.plan is not None
    assert out.plan["actions"] == [
        {
            "name": "remove_orphan_files",
            "older_than": "2026-11-19T15:30:00+00:00",
            "min_age_hours": 72.0,
            "dry_run_first": True,
        }
    ]


def test_rewrite_manifests_by_count_or_average_size() -> None:
    many = plan_from_state(
        _quiet(rewrite_manifests_min_count=5), _state(2, manifests=(7000,) * 6), NOW
    )
    assert many.plan is not None
    assert many.plan["actions"] == [
        {"name": "rewrite_manifests", "manifests_before": 6, "expected_manifests_after": 1}
    ]
    assert (many.plan["manifest_bytes"], many.plan["manifest_avg_bytes"]) == (42000, 7000.0)
    assert "6 manifests >= rewrite_manifests_min_count 5" in many.reason
    # below the count, small on average: only with an average threshold
    small = _state(2, manifests=(7000, 9000))
    assert plan_from_state(_quiet(), small, NOW).plan is None
    by_avg = plan_from_state(_quiet(), small, NOW, manifest_min_avg_bytes=1 << 20)
    assert by_avg.plan is not None and by_avg.reason == (
        "2 manifests averaging 8000 bytes < 1048576"
    )
    assert plan_from_state(_quiet(), _state(2, manifests=(7000,)), NOW, 1 << 20).plan is None
    big = plan_from_state(_quiet(), _state(2, manifests=(2 << 20,) * 2), NOW, 1 << 20)
    assert big.plan is None and "avg 2097152 bytes >= 1048576" in big.reason


def test_actions_come_in_order() -> None:
    policy = CleanPolicy(
        keep_last_snapshots=2, max_snapshot_age_hours=1, rewrite_manifests_min_count=3
    )
    out = plan_from_state(policy, _state(6), NOW)
    assert out.plan is not None
    assert [a["name"] for a in out.plan["actions"]] == list(clean.ACTIONS)


def test_no_snapshot_nothing_to_clean() -> None:
    out = plan_from_state(CleanPolicy(), TableState(None, [], set(), []), NOW)
    assert (out.plan, out.reason) == (None, "table has no snapshot: nothing to clean")


# --- clean: SQL -------------------------------------------------------------------------------

AT = "2026-11-19T00:00:00+00:00"


def test_clean_sql_exact_output() -> None:
    expire = {"name": "expire_snapshots", "older_than": AT, "retain_last": 5}
    assert clean_sql("lake", REF, expire, now=NOW) == (
        "CALL `lake`.system.expire_snapshots(table => 'lake.ns.events', older_than => "
        "TIMESTAMP '2026-11-19 00:00:00.000000', retain_last => 5)"
    )
    orphans = {"name": "remove_orphan_files", "older_than": AT}
    assert clean_sql("lake", REF, orphans, dry_run=True, now=NOW) == (
        "CALL `lake`.system.remove_orphan_files(table => 'lake.ns.events', older_than => "
        "TIMESTAMP '2026-11-19 00:00:00.000000', dry_run => true)"
    )
    assert clean_sql("lake", REF, orphans, now=NOW).endswith("dry_run => false)")
    assert clean_sql("lake", REF, {"name": "rewrite_manifests"}) == (
        "CALL `lake`.system.rewrite_manifests(table => 'lake.ns.events')"
    )


@pytest.mark.parametrize(
    "bad",
    [
        {"name": "drop_table"},
        {"name": None},
        {"name": "expire_snapshots", "older_than": AT, "retain_last": "5; --"},
        {"name": "expire_snapshots", "older_than": AT, "retain_last": 0},
        {"name": "expire_snapshots", "older_than": AT, "retain_last": True},
        {"name": "expire_snapshots", "older_than": "2026-11-23T00:00:00+00:00", "retain_last": 1},
        {"name": "expire_snapshots", "older_than": "2026-11-19", "retain_last": 1},
        {"name": "remove_orphan_files", "older_than": "now"},
        {"name": "remove_orphan_files", "older_than": "2026-11-22T00:00:00+00:00"},  # < 24 h
        {"name": "remove_orphan_files"},
    ],
)
def test_clean_sql_rejects_tampered_actions(bad: dict[str, object]) -> None:
    with pytest.raises(PlanRejected):
        clean_sql("lake", REF, bad, now=NOW)


def test_clean_run_rejects_bad_plans_before_touching_spark() -> None:
    for bad in (
        {"action": "delete", "actions": [{"name": "rewrite_manifests"}]},
        {"action": "clean", "actions": []},
        {"action": "clean", "actions": "rewrite_manifests"},
        {"action": "clean", "actions": [{"name": "rewrite_manifests"}, {"name": "vacuum"}]},
        {"action": "clean", "actions": [["rewrite_manifests"]]},
    ):
        with pytest.raises(PlanRejected):
            clean.run(None, "lake", REF, bad)  # type: ignore[arg-type]


def test_the_run_time_hold_of_every_format() -> None:
    """`ttl.hold_if_too_much`, which Iceberg's, Delta's and Hudi's TTL jobs each ask on the
    exact count taken right before the delete."""
    from lakewarden.kinds.ttl import hold_if_too_much
    from lakewarden.outcomes import JobHeld

    metrics: dict[str, object] = {"counted_rows": 10}
    hold_if_too_much(30, 100, 0.5, metrics)  # under the limit: goes on
    hold_if_too_much(0, 0, 0.5, metrics)  # an empty table: nothing to hold
    with pytest.raises(JobHeld, match="all 100 rows would go") as emptied:
        hold_if_too_much(100, 100, 1.0, metrics)
    assert emptied.value.metrics is metrics
    with pytest.raises(JobHeld, match=r"remove 60 of 100 rows \(60.0%\) > max_fraction 50%"):
        hold_if_too_much(60, 100, 0.5, metrics)
