"""The stats kind (lakewarden.kinds.stats) as pure logic: when column statistics are due,
every skip's reason, the commit verdict and the exact CALL text."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from lakewarden.catalogs.catalog import TableRef
from lakewarden.kinds import REGISTRY
from lakewarden.kinds.base import EventFacts, PlanRejected
from lakewarden.kinds.stats import Change, StatsState, event_verdict, plan_from_state, stats_sql
from lakewarden.policy.model import StatsPolicy

NOW = datetime(2026, 11, 26, 12, tzinfo=UTC)
ON = StatsPolicy(enabled=True)
COLUMNS = {"columns": ["id", "city", "payload"], "sketchable": ["id", "city"]}


def _state(
    hours_old: float | None, *changes: Change, covered: set[str] | None = None
) -> StatsState:
    if hours_old is None:
        return StatsState(9, changes=list(changes), **COLUMNS)  # type: ignore[arg-type]
    return StatsState(
        9,
        5,
        NOW - timedelta(hours=hours_old),
        frozenset(covered if covered is not None else {"id", "city"}),
        list(changes),
        **COLUMNS,
    )


def test_stats_is_a_swept_and_event_driven_kind_off_by_default() -> None:
    kind = REGISTRY["stats"]
    assert kind.swept and kind.event_verdict is not None
    assert StatsPolicy().enabled is False


def test_a_table_without_statistics_gets_them_for_every_primitive_column() -> None:
    outcome = plan_from_state(ON, _state(None, Change(9, "append", 3)), NOW)
    assert outcome.plan is not None
    assert (outcome.plan["snapshot_id"], outcome.plan["columns"]) == (9, ["id", "city"])
    assert outcome.reason.startswith("the table has no column statistics")


def test_statistics_of_the_current_snapshot_are_fresh() -> None:
    fresh = StatsState(9, 9, NOW, frozenset({"id", "city"}), [], **COLUMNS)
    outcome = plan_from_state(ON, fresh, NOW)
    assert outcome.plan is None and "is the current one" in outcome.reason


def test_a_rewrite_since_makes_them_stale_at_once() -> None:
    state = _state(0.5, Change(9, "replace", 40), Change(8, "append", 2))
    outcome = plan_from_state(ON, state, NOW)
    assert outcome.plan is not None and outcome.plan["stats_snapshot_before"] == 5
    assert "1 rewrite(s) changed files since" in outcome.reason
    assert "42 data files added or removed in 2 snapshot(s)" in outcome.reason


def test_appends_wait_for_max_age() -> None:
    young = plan_from_state(ON, _state(2, Change(9, "append", 1)), NOW)
    assert young.plan is None and "< max_age_hours 24" in young.reason
    old = plan_from_state(ON, _state(30, Change(9, "append", 1)), NOW)
    assert old.plan is not None and ">= max_age_hours 24" in old.reason


def test_named_columns_not_covered_or_not_in_the_table() -> None:
    policy = StatsPolicy(enabled=True, columns=["city"])
    lacking = plan_from_state(policy, _state(1, covered={"id"}), NOW)
    assert lacking.plan is not None and lacking.plan["columns"] == ["city"]
    assert "do not cover ['city']" in lacking.reason
    gone = plan_from_state(StatsPolicy(enabled=True, columns=["zip"]), _state(1), NOW)
    assert gone.plan is None and "['zip'] are not columns of the table" in gone.reason


def test_an_empty_table_has_nothing_to_compute() -> None:
    outcome = plan_from_state(ON, StatsState(None), NOW)
    assert outcome.plan is None and "no snapshot" in outcome.reason


def test_the_commit_verdict_answers_rewrites_only() -> None:
    replace = event_verdict(ON, EventFacts({"operation": "replace"}, 0))
    append = event_verdict(ON, EventFacts({"operation": "append"}, 5))
    assert replace.needed and not append.needed
    assert "judged by the sweep" in append.reason
    assert not event_verdict(StatsPolicy(), EventFacts({"operation": "replace"}, 0)).needed


def test_stats_sql_exactly_and_tampered_plans_refused() -> None:
    plan = {"action": "compute_table_stats", "snapshot_id": 9, "columns": ["id", "city"]}
    assert stats_sql("lake", TableRef("sales", "orders"), plan) == (
        "CALL `lake`.system.compute_table_stats(table => 'lake.sales.orders', "
        "snapshot_id => 9, columns => array('id', 'city'))"
    )
    for bad in (
        {**plan, "columns": ["id'); DROP"]},
        {**plan, "columns": []},
        {**plan, "snapshot_id": "9"},
        {**plan, "action": "clean"},
    ):
        with pytest.raises(PlanRejected):
            stats_sql("lake", TableRef("sales", "orders"), bad)


def test_stats_columns_are_plain_and_unrepeated() -> None:
    with pytest.raises(ValueError, match="invalid column name"):
        StatsPolicy(columns=["a b"])
    with pytest.raises(ValueError, match="must not repeat"):
        StatsPolicy(columns=["a", "a"])
