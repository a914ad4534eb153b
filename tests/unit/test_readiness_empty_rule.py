"""Empty partitions, pure: how a heartbeat's partition is read (and refused), which periods
no commit touched are looked at (bounded), and how an empty one is judged: ready on a
heartbeat or the watermark passing it, overdue past its deadline, waiting otherwise."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pyiceberg.transforms import (
    DayTransform,
    HourTransform,
    IdentityTransform,
    MonthTransform,
    YearTransform,
)
from pyiceberg.types import DateType, StringType, TimestamptzType

from lakewarden.policy.model import ReadinessPolicy
from lakewarden.readiness import (
    Heartbeat,
    PartitionField,
    ReadinessProblem,
    empty_periods,
    judge_empty,
    next_deadline,
    parse_partition,
)

HOUR = datetime(2026, 11, 23, 5, tzinfo=UTC)  # the start of 2026-11-23-05


def _field(transform: Any, source: Any = None) -> PartitionField:
    return PartitionField("ts", 1, source or TimestamptzType(), transform)


def _policy(**kw: Any) -> ReadinessPolicy:
    return ReadinessPolicy.model_validate({"enabled": True, "partition": "ts", **kw})


@pytest.mark.parametrize(
    ("field", "text", "end"),
    [
        (_field(HourTransform()), "2026-11-23-05", HOUR + timedelta(hours=1)),
        (_field(DayTransform()), "2026-11-23", datetime(2026, 11, 24, tzinfo=UTC)),
        (_field(IdentityTransform(), DateType()), "2026-11-23", datetime(2026, 11, 24, tzinfo=UTC)),
        (_field(MonthTransform()), "2026-12", datetime(2027, 1, 1, tzinfo=UTC)),
        (_field(YearTransform()), "2026", datetime(2027, 1, 1, tzinfo=UTC)),
        (_field(IdentityTransform(), StringType()), "eu/west", None),
    ],
)
def test_a_partition_is_read_as_readiness_names_it(
    field: PartitionField, text: str, end: datetime | None
) -> None:
    assert parse_partition(field, text) == (text, end)


@pytest.mark.parametrize(
    ("field", "text", "form"),
    [
        (_field(HourTransform()), "2026-11-23", "YYYY-MM-DD-HH, e.g. 2026-11-23-05"),  # a day
        (_field(HourTransform()), "2026-11-23-24", "YYYY-MM-DD-HH"),  # no such hour
        (_field(DayTransform()), "2026-11-23-05", "YYYY-MM-DD, e.g. 2026-11-23"),  # an hour
        (_field(DayTransform()), "2026-1-5", "YYYY-MM-DD"),
        (_field(DayTransform()), "2026-02-30", "YYYY-MM-DD"),
        (_field(DayTransform()), "yesterday", "YYYY-MM-DD"),
        (_field(MonthTransform()), "2026-13", "YYYY-MM, e.g. 2026-11"),
        (_field(YearTransform()), "9999", "YYYY, e.g. 2026"),  # its end is past year 9999
    ],
)
def test_a_partition_of_another_form_says_the_expected_one(
    field: PartitionField, text: str, form: str
) -> None:
    with pytest.raises(ReadinessProblem) as caught:
        parse_partition(field, text)
    assert f"name it {form}" in str(caught.value)


def test_the_empty_periods_are_those_between_the_earliest_recorded_and_the_bound() -> None:
    hours = _field(HourTransform())
    recorded = [HOUR + timedelta(hours=1), HOUR + timedelta(hours=4)]  # 05 and 08 have data
    found = empty_periods(hours, recorded, HOUR + timedelta(hours=7, minutes=30))
    assert found.periods == [
        ("2026-11-23-06", HOUR + timedelta(hours=2)),
        ("2026-11-23-07", HOUR + timedelta(hours=3)),
        ("2026-11-23-09", HOUR + timedelta(hours=5)),
        ("2026-11-23-10", HOUR + timedelta(hours=6)),
        ("2026-11-23-11", HOUR + timedelta(hours=7)),
    ]  # 12 has not ended by 12:30
    assert found.more == 0
    assert empty_periods(hours, [], HOUR + timedelta(days=1)).periods == []  # nothing recorded


def test_the_empty_periods_are_capped_and_say_how_many_more() -> None:
    hours = _field(HourTransform())
    recorded = [HOUR + timedelta(hours=1), HOUR + timedelta(hours=10)]  # 05 and 14
    found = empty_periods(hours, recorded, HOUR + timedelta(hours=20), limit=3)
    assert [label for label, _ in found.periods] == [
        "2026-11-23-06",
        "2026-11-23-07",
        "2026-11-23-08",
    ]
    # 06..23 and the 24th's 00 ended by 01:00 on the 24th (19), 14 has data, 3 returned.
    assert found.more == 19 - 1 - 3


def test_the_next_deadline_is_the_first_period_not_yet_overdue() -> None:
    hours = _field(HourTransform())
    now = HOUR + timedelta(hours=3, minutes=10)  # 08:10; deadline 30 min: 07 is due 08:30
    assert next_deadline(hours, timedelta(minutes=30), now) == HOUR + timedelta(hours=3, minutes=30)


def test_a_heartbeat_makes_an_empty_partition_ready_with_no_data() -> None:
    beat = Heartbeat(HOUR + timedelta(hours=1, minutes=2), "writer")
    judged, overdue = judge_empty(_policy(), "2026-11-23-05", HOUR, beat, None, HOUR)
    assert judged.ready and not overdue
    assert judged.reason == "no data: writer heartbeat at 2026-11-23T06:02:00+00:00 by writer"


def test_the_watermark_passing_an_empty_partition_makes_it_ready_with_no_data() -> None:
    end = HOUR + timedelta(hours=1)
    policy = _policy(rule="watermark")
    judged, _ = judge_empty(policy, "2026-11-23-05", end, None, end, end)
    assert judged.ready and judged.reason == (
        "no data: the watermark 2026-11-23T06:00:00+00:00 passed its end "
        "2026-11-23T06:00:00+00:00 and no commit touched it"
    )
    behind, _ = judge_empty(policy, "2026-11-23-05", end, None, end - timedelta(seconds=1), end)
    assert not behind.ready
    assert behind.reason == (
        "waiting for data, or the writer's heartbeat, or the watermark to pass its end"
    )


def test_an_empty_partition_past_its_deadline_is_overdue_and_not_before() -> None:
    end = HOUR + timedelta(hours=1)
    policy = _policy(rule="quiet", deadline_minutes=30)
    early, overdue = judge_empty(policy, "2026-11-23-05", end, None, None, end)
    assert not early.ready and not overdue
    late, overdue = judge_empty(
        policy, "2026-11-23-05", end, None, None, end + timedelta(minutes=30)
    )
    assert not late.ready and overdue
    assert late.reason.startswith(
        "late: no data and no heartbeat 30 min after its end 2026-11-23T06:00:00+00:00 "
        "(due 2026-11-23T06:30:00+00:00)"
    )
    # Without a deadline an empty partition is never overdue.
    _, never = judge_empty(_policy(), "2026-11-23-05", end, None, None, end + timedelta(days=9))
    assert not never
