"""Pure rules of part 5: when a quota's next slot comes, and when clean removes orphans."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from lakewarden.kinds.clean import TableState, orphan_due, plan_from_state
from lakewarden.policy.model import CleanPolicy
from lakewarden.policy.quotas import Usage, minutes, next_slot

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


def _ago(minutes_ago: float) -> datetime:
    return NOW - timedelta(minutes=minutes_ago)


def test_the_next_slot_comes_when_enough_of_the_oldest_usage_slides_out() -> None:
    spans = [(_ago(30), _ago(17.7))]  # 12.3 minutes
    assert round(minutes(spans), 1) == 12.3
    slot = next_slot(spans, 10, NOW)
    # 2.3 minutes must leave the window: those from 30 minutes ago, an hour on
    assert slot is not None and abs(slot - (_ago(30 - 2.3) + timedelta(hours=1))) < timedelta(
        seconds=1
    )
    assert next_slot(spans, 20, NOW) is None  # under the quota


def test_overlapping_runs_of_a_pool_slide_out_together() -> None:
    spans = [(_ago(40), _ago(20)), (_ago(40), _ago(20))]  # two jobs at once: 40 minutes
    slot = next_slot(spans, 30, NOW)
    # 10 minutes must go; both spans lose one minute per minute: 5 minutes after they began
    assert slot is not None and abs(slot - (_ago(35) + timedelta(hours=1))) < timedelta(seconds=1)


def test_a_usage_says_what_waits_and_until_when() -> None:
    usage = Usage("table", "sales.t", 10, 12.34, datetime(2026, 11, 24, 13, 27, tzinfo=UTC))
    assert usage.over
    assert usage.describe() == (
        "waiting: table sales.t used 12.3 of 10 Spark minutes in the last hour; "
        "next slot ~13:27 UTC"
    )


def test_orphan_removal_runs_once_per_interval() -> None:
    policy = CleanPolicy(orphan_interval_minutes=1440)
    assert orphan_due(policy, None, NOW).due
    recent = orphan_due(policy, _ago(60), NOW)
    assert not recent.due and recent.next_due == _ago(60) + timedelta(days=1)
    assert "next due at 2026-11-25T11:00:00+00:00" in recent.reason
    assert orphan_due(policy, _ago(1441), NOW).due
    assert not orphan_due(CleanPolicy(remove_orphans=False), None, NOW).due


def test_clean_plans_expiry_without_orphan_removal_inside_the_interval() -> None:
    policy = CleanPolicy(keep_last_snapshots=1, max_snapshot_age_hours=1)
    state = TableState(2, [(1, _ago(600)), (2, _ago(1))], set(), [100])
    planned = plan_from_state(policy, state, NOW, last_orphan_removal=_ago(60))
    assert planned.plan is not None
    assert [a["name"] for a in planned.plan["actions"]] == ["expire_snapshots"]
    assert "orphan removal not due" in planned.reason
    skipped = plan_from_state(
        CleanPolicy(),
        TableState(2, [(2, _ago(1))], set(), [100]),
        NOW,
        last_orphan_removal=_ago(60),
    )
    assert skipped.plan is None and "orphan removal not due" in skipped.reason
