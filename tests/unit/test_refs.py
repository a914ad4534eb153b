"""Scheduled tag names and retention (lakewarden.refs), and what clean keeps for a tag before
and after its max-ref-age (pure: no table)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from lakewarden.kinds.clean import Ref, TableState, plan_from_state
from lakewarden.policy.model import CleanPolicy
from lakewarden.refs import tag_max_ref_age_ms, tag_name

NOW = datetime(2026, 11, 24, 5, 30, tzinfo=UTC)


def test_tag_names_follow_the_period_in_utc() -> None:
    assert tag_name("daily", NOW) == "daily-20261124"
    assert tag_name("hourly", NOW) == "hourly-2026112405"
    late = datetime(2026, 11, 24, 23, 59, tzinfo=UTC).astimezone(datetime.now().astimezone().tzinfo)
    assert tag_name("daily", late) == "daily-20261124"  # whatever zone the clock is in


def test_retention_counts_from_the_tagging_not_the_snapshot() -> None:
    day = 86_400_000
    assert tag_max_ref_age_ms(7, NOW, NOW) == 7 * day
    assert tag_max_ref_age_ms(7, NOW - timedelta(days=10), NOW) == 17 * day


def _state(lapses_at: datetime | None) -> TableState:
    old = NOW - timedelta(days=3)
    snapshots = [(1, old), (2, old + timedelta(hours=1)), (3, old + timedelta(hours=2))]
    return TableState(
        current_snapshot_id=3,
        snapshots=snapshots,
        referenced={1, 3},
        manifest_sizes=[100],
        parents={1: None, 2: 1, 3: 2},
        refs={"main": Ref("branch", 3), "daily-1": Ref("tag", 1, lapses_at=lapses_at)},
    )


def test_clean_keeps_a_tagged_snapshot_until_the_tag_lapses() -> None:
    policy = CleanPolicy(keep_last_snapshots=1, max_snapshot_age_hours=1, remove_orphans=False)
    kept = plan_from_state(policy, _state(NOW + timedelta(days=1)), NOW).plan
    assert kept is not None and kept["actions"][0]["expected_expired"] == 1  # snapshot 2
    assert kept["lapsed_refs"] == [] and 1 in kept["protected_snapshots"]

    lapsed = plan_from_state(policy, _state(NOW - timedelta(minutes=1)), NOW).plan
    assert lapsed is not None and lapsed["actions"][0]["expected_expired"] == 2  # 1 and 2
    assert lapsed["lapsed_refs"] == ["daily-1"] and 1 not in lapsed["protected_snapshots"]
