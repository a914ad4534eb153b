"""TTL on Hudi tables, planned from the rows hudi-rs reads (`kinds.hudi_ttl.plan_rows`):
partition level when the table is partitioned on the column by day, row level otherwise;
the holds; the plan checked again by the job. Pure: Arrow tables stand in for the rows."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pyarrow as pa
import pytest

from lakewarden.kinds.hudi_ttl import (
    PARTITION,
    checked_plan,
    partition_day,
    plan_rows,
    undo_expired,
)
from lakewarden.outcomes import PlanRejected
from lakewarden.policy.model import TTLPolicy

NOW = datetime(2026, 11, 26, 6, 0, tzinfo=UTC)
TABLE = {"base_path": "/wh/lake/ev", "head": "20261126060205410", "metadata_table": False}


def _rows(days_ago: list[int], hive: bool = True) -> pa.Table:
    """One row per entry, partitioned by its day (`dt=yyyy-MM-dd` or `yyyy/MM/dd`)."""
    days = [NOW.date() - timedelta(days=n) for n in days_ago]
    parts = [f"dt={d.isoformat()}" if hive else d.strftime("%Y/%m/%d") for d in days]
    return pa.table({PARTITION: parts, "dt": pa.array(days, pa.date32())})


def _policy(**kw: object) -> TTLPolicy:
    return TTLPolicy(enabled=True, column="dt", max_fraction=0.6, **kw)  # type: ignore[arg-type]


def test_partitions_wholly_before_the_cutoff_are_dropped_whole() -> None:
    rows = _rows([0, 0, 10, 10, 30, 30, 40])
    out = plan_rows(_policy(retention_days=25), rows, ["dt"], NOW, TABLE)
    assert out.plan is not None, out.reason
    assert out.plan["level"] == "partition"
    assert out.plan["partitions"] == ["dt=2026-10-17", "dt=2026-10-27"]
    assert out.plan["rows_to_delete"] == 3 and out.plan["rows_before"] == 7
    assert out.plan["base_path"] == "/wh/lake/ev"
    assert "delete_partition" in out.reason


def test_slash_day_partitions_and_row_level_on_request() -> None:
    rows = _rows([0, 0, 30, 40], hive=False)
    out = plan_rows(_policy(retention_days=25), rows, ["dt"], NOW, TABLE)
    assert out.plan and out.plan["partitions"] == ["2026/10/17", "2026/10/27"]
    out = plan_rows(_policy(retention_days=25, level="row"), rows, ["dt"], NOW, TABLE)
    assert out.plan and out.plan["level"] == "row" and out.plan["partitions"] == []
    assert out.plan["rows_to_delete"] == 2


def test_a_table_not_partitioned_on_the_column_deletes_rows() -> None:
    rows = _rows([0, 0, 30, 40])
    out = plan_rows(_policy(retention_days=25), rows, ["region"], NOW, TABLE)
    assert out.plan and out.plan["level"] == "row" and out.plan["rows_to_delete"] == 2
    out = plan_rows(_policy(retention_days=25, level="partition"), rows, ["region"], NOW, TABLE)
    assert out.plan is None and "level=partition needs the table partitioned on 'dt'" in out.reason


def test_timestamps_expire_by_the_exact_cutoff_at_row_level() -> None:
    ts = [NOW - timedelta(days=n, hours=1) for n in (0, 3, 5)]
    rows = pa.table({PARTITION: ["", "", ""], "at": pa.array(ts, pa.timestamp("us", "UTC"))})
    policy = TTLPolicy(enabled=True, column="at", retention_days=3, max_fraction=0.7)
    out = plan_rows(policy, rows, [], NOW, TABLE)
    assert out.plan and out.plan["rows_to_delete"] == 2 and out.plan["column_type"] == "timestamptz"


def test_holds_and_skips_say_why() -> None:
    every = plan_rows(_policy(retention_days=5), _rows([30, 40]), ["dt"], NOW, TABLE)
    assert every.plan is None and every.reason.startswith("held: every row is older")
    much = plan_rows(_policy(retention_days=5), _rows([0, 30, 40]), ["dt"], NOW, TABLE)
    assert much.plan is None and "max_fraction 60%" in much.reason
    none = plan_rows(_policy(retention_days=50), _rows([0, 30]), ["dt"], NOW, TABLE)
    assert none.plan is None and none.reason.startswith("nothing older than the cutoff")
    missing = plan_rows(_policy(retention_days=5), _rows([0]).drop(["dt"]), ["dt"], NOW, TABLE)
    assert missing.plan is None and "no column 'dt'" in missing.reason
    ints = pa.table({PARTITION: [""], "dt": [1]})
    assert (
        "not a date, timestamp" in plan_rows(_policy(retention_days=5), ints, [], NOW, TABLE).reason
    )


def test_a_partition_whose_day_is_past_but_holds_newer_rows_is_kept() -> None:
    """A day partition value lakewarden reads, yet a row in it inside retention (a
    partition path not derived from the column): never dropped whole."""
    rows = pa.table(
        {
            PARTITION: ["dt=2026-10-01", "dt=2026-10-01", "dt=2026-11-26"],
            "dt": pa.array([date(2026, 10, 1), NOW.date(), NOW.date()], pa.date32()),
        }
    )
    out = plan_rows(_policy(retention_days=25), rows, ["dt"], NOW, TABLE)
    assert out.plan is None and "1 partition(s) partly inside retention kept whole" in out.reason


def test_partition_days() -> None:
    assert partition_day("dt=2026-11-20", "dt") == date(2026, 11, 20)
    assert partition_day("20261120", "dt") == date(2026, 11, 20)
    assert partition_day("2026/11/20", "dt") == date(2026, 11, 20)
    assert partition_day("r1", "dt") is None


def test_the_job_checks_the_plan_again() -> None:
    out = plan_rows(_policy(retention_days=25), _rows([0, 0, 30]), ["dt"], NOW, TABLE)
    assert out.plan is not None
    level, condition, planned, fraction, undo = checked_plan(out.plan, NOW)
    assert (level, planned, fraction, undo) == ("partition", 1, 0.6, 7)
    assert condition == "`dt` < DATE '2026-11-01'"
    with pytest.raises(PlanRejected, match="inside the retention"):
        checked_plan({**out.plan, "cutoff": NOW.isoformat()}, NOW)
    with pytest.raises(PlanRejected, match="without partitions"):
        checked_plan({**out.plan, "partitions": []}, NOW)
    with pytest.raises(PlanRejected, match="invalid rows_to_delete"):
        checked_plan({**out.plan, "rows_to_delete": "1; DROP"}, NOW)


def test_pre_ttl_savepoints_lapse_after_the_undo_window() -> None:
    made = [("a", NOW - timedelta(days=8)), ("b", NOW - timedelta(days=2))]
    assert undo_expired(made, 7, NOW) == ["a"]
