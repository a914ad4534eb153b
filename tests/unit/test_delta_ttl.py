"""TTL on a Delta table, planned from its log (`lakewarden.kinds.delta_ttl`): which column
aligns with the TTL column (the column itself, or a date Delta generates from it), the
predicate the DELETE runs (a partition column alone at partition level), and plans of
small delta-rs tables: partition level, row level, the holds."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from lakewarden.formats.delta.timeline import DeltaTimeline
from lakewarden.kinds.delta_ttl import derived_from, encode, plan, predicate, ttl_target
from lakewarden.outcomes import PlanRejected
from lakewarden.policy.model import TTLPolicy

NOW = datetime(2026, 6, 10, 12, tzinfo=UTC)
TYPES = {"id": "long", "ts": "timestamp", "day": "date", "name": "string"}


def test_the_partition_column_that_aligns_with_the_ttl_column() -> None:
    assert derived_from("CAST(ts AS DATE)") == "ts" and derived_from("to_date(`ts`)") == "ts"
    assert derived_from("date_format(ts, 'yyyy')") is None
    gen = {"day": "CAST(ts AS DATE)"}
    assert ttl_target(TYPES, gen, ["day"], "ts") == ("timestamptz", "day", "day")
    assert ttl_target(TYPES, {}, ["day"], "day") == ("date", "day", "identity")
    assert ttl_target(TYPES, {}, ["day"], "ts") == ("timestamptz", None, None)  # not derived
    assert "no column 'nope'" in str(ttl_target(TYPES, {}, [], "nope"))
    assert "not a timestamp" in str(ttl_target(TYPES, {}, [], "name"))


def test_bounds_are_encoded_as_the_ttl_arithmetic_reads_them() -> None:
    assert encode(date(1970, 1, 3), "date") == 2
    assert encode(datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC), "timestamptz") == 1_000_000
    assert encode(datetime(1970, 1, 1, 0, 0, 1), "timestamp") == 1_000_000  # naive: UTC


def _plan(level: str, **extra: object) -> dict[str, object]:
    return {
        "action": "delete",
        "level": level,
        "column": "ts",
        "column_type": "timestamptz",
        "cutoff": "2026-06-03T00:00:00+00:00",
        "retention_days": 7,
        **extra,
    }


def test_the_predicate_names_the_partition_column_alone_at_partition_level() -> None:
    assert predicate(_plan("partition", partition_column="day"), NOW) == (
        "`day` < DATE '2026-06-03'"
    )
    row = predicate(_plan("row"), NOW)
    assert row.startswith("`ts` < TIMESTAMP '2026-06-03")
    with pytest.raises(PlanRejected, match="inside the retention"):
        predicate(_plan("row", cutoff="2026-06-09T00:00:00+00:00"), NOW)
    with pytest.raises(PlanRejected, match="not a day's start"):
        predicate(_plan("partition", partition_column="day", cutoff="2026-06-02T05:00:00Z"))


def _table(path: Path, days: int, partitioned: bool) -> DeltaTimeline:
    """Ten rows a day for `days` days before NOW (day = the date of ts)."""
    for d in range(days):
        at = NOW - timedelta(days=days - d)
        rows = pa.table(
            {
                "id": pa.array(range(10 * d, 10 * d + 10), pa.int64()),
                "ts": pa.array(
                    [at + timedelta(minutes=i) for i in range(10)], pa.timestamp("us", "UTC")
                ),
                "day": [at.date()] * 10,
            }
        )
        write_deltalake(
            str(path), rows, partition_by=["day"] if partitioned else None, mode="append"
        )
    return DeltaTimeline(str(path))


def test_a_table_partitioned_on_the_column_loses_whole_partitions(tmp_path: Path) -> None:
    timeline = _table(tmp_path / "t", 10, partitioned=True)
    policy = TTLPolicy(enabled=True, column="day", retention_days=7)
    found = plan(policy, timeline, NOW)
    assert found.plan is not None, found.reason
    assert found.plan["level"] == "partition" and found.plan["partition_column"] == "day"
    assert found.plan["rows_to_delete"] == 30  # May 31 to June 2: before June 3 (7 days)
    assert found.plan["expected_metadata_only"] is True and found.plan["format"] == "delta"
    assert predicate(found.plan, NOW) == "`day` < DATE '2026-06-03'"


def test_a_table_not_partitioned_on_it_deletes_rows(tmp_path: Path) -> None:
    timeline = _table(tmp_path / "t", 10, partitioned=False)
    policy = TTLPolicy(enabled=True, column="ts", retention_days=7.5)
    found = plan(policy, timeline, NOW)
    assert found.plan is not None, found.reason
    assert found.plan["level"] == "row" and found.plan["partition_column"] is None
    # cutoff 2026-06-03T00:00: days 10, 9 and 8 before NOW are older (8: 2026-06-02T12:..)
    assert found.plan["rows_to_delete"] == 30 and found.plan["estimate_method"].startswith("exact")
    held = plan(TTLPolicy(enabled=True, column="ts", retention_days=1), timeline, NOW)
    assert held.plan is None and held.reason.startswith("held:") and "max_fraction" in held.reason
    asked = TTLPolicy(enabled=True, column="ts", retention_days=7, level="partition")
    refused = plan(asked, timeline, NOW)
    assert refused.plan is None and "level=partition" in refused.reason
