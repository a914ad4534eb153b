"""The readiness rule, pure: completeness by watermark or quiet time, the required kinds,
how partitions are named and when they end, and the policy's own checks."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any, cast

import pytest
from pydantic import ValidationError
from pyiceberg.partitioning import PartitionField as PartitionField_
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import (
    BucketTransform,
    DayTransform,
    HourTransform,
    IdentityTransform,
    MonthTransform,
    YearTransform,
)
from pyiceberg.types import DateType, NestedField, StringType, TimestamptzType

from lakewarden.policy.model import ReadinessPolicy, parse_policy
from lakewarden.readiness import (
    Commit,
    PartitionFacts,
    PartitionField,
    ReadinessProblem,
    judge,
    partition_field,
    partition_label,
    policy_problem,
    tag_name,
)

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
END = datetime(2026, 11, 24, tzinfo=UTC)  # the end of 2026-11-23


def _facts(
    last_commit: datetime, end: datetime | None = END, missing: tuple[str, ...] = ()
) -> PartitionFacts:
    return PartitionFacts("2026-11-23", end, Commit(7, last_commit, 3), missing)


def _policy(**kw: Any) -> ReadinessPolicy:
    return ReadinessPolicy.model_validate({"enabled": True, "partition": "ts", **kw})


def test_quiet_counts_from_the_later_of_the_end_and_the_last_commit() -> None:
    policy = _policy(rule="quiet", quiet_minutes=30)
    early = judge(policy, _facts(END - timedelta(hours=2)), None, END + timedelta(minutes=20))
    assert not early.ready and not early.complete
    assert early.reason == (
        "waiting for 10.0 min more quiet (until 2026-11-24T00:30:00+00:00: 30 min after its end)"
    )
    assert judge(policy, _facts(END - timedelta(hours=2)), None, END + timedelta(minutes=30)).ready
    # A commit after the end restarts the quiet time from that commit.
    late_commit = END + timedelta(minutes=25)
    waiting = judge(policy, _facts(late_commit), None, END + timedelta(minutes=40))
    assert not waiting.ready and "after its last commit" in waiting.reason
    done = judge(policy, _facts(late_commit), None, late_commit + timedelta(minutes=30))
    assert done.ready and done.reason.startswith("complete: no commit touched it for 30 min")


def test_watermark_must_reach_the_partitions_end() -> None:
    policy = _policy(rule="watermark")
    none = judge(policy, _facts(END), None, NOW)
    assert not none.ready and none.waiting_for == (
        "a watermark at or past 2026-11-24T00:00:00+00:00: none posted yet",
    )
    behind = judge(policy, _facts(END), END - timedelta(minutes=1), NOW)
    assert not behind.ready and "it is at 2026-11-23T23:59:00+00:00" in behind.reason
    assert judge(policy, _facts(END), END, NOW).ready
    no_end = judge(policy, _facts(END, end=None), END, NOW)
    assert not no_end.ready and "has none (watermark rule)" in no_end.reason


def test_a_complete_partition_waits_for_each_missing_kind() -> None:
    policy = _policy(rule="watermark", require=["compaction"])
    found = judge(policy, _facts(END, missing=("compaction",)), END, NOW)
    assert found.complete and not found.ready
    assert found.missing_kinds == ("compaction",)
    assert found.waiting_for == ("compaction to run on it since its last commit 7",)
    ready = judge(policy, _facts(END), END, NOW)
    assert ready.ready and ready.reason.endswith("; compaction ran on it since")


def _field(transform: Any, source: Any = None) -> PartitionField:
    return PartitionField("ts", 1, source or TimestamptzType(), transform)


@pytest.mark.parametrize(
    ("field", "raw", "label", "end"),
    [
        (_field(DayTransform()), 20415, "2025-11-23", datetime(2025, 11, 24, tzinfo=UTC)),
        (_field(DayTransform()), date(2026, 11, 23), "2026-11-23", END),
        (_field(HourTransform()), 24, "1970-01-02-00", datetime(1970, 1, 2, 1, tzinfo=UTC)),
        (_field(MonthTransform()), 12 * 56 + 11, "2026-12", datetime(2027, 1, 1, tzinfo=UTC)),
        (_field(YearTransform()), 56, "2026", datetime(2027, 1, 1, tzinfo=UTC)),
        (
            _field(IdentityTransform(), DateType()),
            20415,
            "2025-11-23",
            datetime(2025, 11, 24, tzinfo=UTC),
        ),
        (_field(IdentityTransform(), StringType()), "eu/west", "eu/west", None),
        (_field(DayTransform()), None, "null", None),
    ],
)
def test_partition_labels_and_ends(field: PartitionField, raw: Any, label: str, end: Any) -> None:
    assert partition_label(field, raw) == (label, end)


def test_tag_names_keep_only_safe_characters() -> None:
    assert tag_name("2026-11-23") == "ready-2026-11-23"
    assert tag_name("eu/west 1") == "ready-eu_west_1"


def test_the_policy_section_is_off_by_default_and_checked() -> None:
    assert parse_policy({}).readiness.enabled is False
    with pytest.raises(ValidationError, match="needs partition"):
        parse_policy({"readiness": {"enabled": True}})
    enabled = {"enabled": True, "partition": "ts"}
    with pytest.raises(ValidationError, match=r"readiness\.require names clustering, disabled"):
        parse_policy({"readiness": {"enabled": True, "partition": "ts", "require": ["clustering"]}})
    with pytest.raises(
        ValidationError, match=r"Input should be 'compaction', 'clustering' or 'zorder'"
    ):
        parse_policy({"readiness": {"partition": "ts", "require": ["ttl"]}})
    on_branch = {"compaction": {"branch": "audit"}}
    with pytest.raises(ValidationError, match="compaction targets branch 'audit'"):
        parse_policy({**on_branch, "readiness": {**enabled, "require": ["compaction"]}})
    with pytest.raises(ValidationError, match="must not repeat"):
        parse_policy({"readiness": {"partition": "ts", "require": ["compaction", "compaction"]}})


class _Table:
    """What partition_field reads of a table: its schema and current spec (real objects)."""

    def __init__(self, *fields: PartitionField_) -> None:
        self._schema = Schema(
            NestedField(1, "ts", TimestamptzType(), required=True),
            NestedField(2, "region", StringType(), required=True),
        )
        self._spec = PartitionSpec(*fields)

    def schema(self) -> Schema:
        return self._schema

    def spec(self) -> PartitionSpec:
        return self._spec


def _table(field: PartitionField_) -> Table:
    return cast(Table, _Table(field))


def test_the_partition_column_must_be_partitioned_by_a_judged_transform() -> None:
    day = _table(PartitionField_(1, 1000, DayTransform(), "ts_day"))
    assert partition_field(day, "ts").transform == DayTransform()
    bucket = _table(PartitionField_(2, 1000, BucketTransform(4), "region_bucket"))
    with pytest.raises(ReadinessProblem, match=r"the table's spec has: bucket\[4\]"):
        partition_field(bucket, "region")
    with pytest.raises(ReadinessProblem, match="the table has no column 'nope'"):
        partition_field(day, "nope")
    with pytest.raises(ReadinessProblem, match="not partitioned by it"):
        partition_field(day, "region")
    region = _table(PartitionField_(2, 1000, IdentityTransform(), "region"))
    watermark = _policy(rule="watermark", partition="region")
    problem = policy_problem(region, watermark) or ""
    assert "needs partitions that end in time" in problem
    assert policy_problem(region, _policy(partition="region")) is None
    deadline = policy_problem(region, _policy(partition="region", deadline_minutes=30)) or ""
    assert deadline.startswith("readiness.deadline_minutes needs partitions that end in time")
    assert policy_problem(day, _policy(deadline_minutes=30)) is None
