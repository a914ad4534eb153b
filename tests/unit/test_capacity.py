"""Elastic capacity's decisions (lakewarden.capacity.decide) and the limits dispatch applies:
pure logic, every rule and both bounds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from lakewarden.capacity import Load, decide, describe_wait, limits
from lakewarden.settings import PoolCapacity, Settings

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
CFG = PoolCapacity(
    min=1, max=3, scale_up_wait_s=30, scale_up_queued_per_slot=2, scale_down_idle_s=60
)


def test_a_new_pool_starts_at_its_minimum() -> None:
    d = decide(CFG, None, Load(10, 0, 500.0), None, NOW)
    assert (d.before, d.after) == (0, 1)
    assert "minimum" in d.reason


def test_grows_while_every_slot_is_busy_and_the_queue_waits() -> None:
    d = decide(CFG, 1, Load(1, 1, 31.0), None, NOW)
    assert (d.after, d.changed) == (2, True)
    assert "waited 31s > 30s" in d.reason


def test_grows_when_more_tasks_wait_per_slot_than_allowed() -> None:
    d = decide(CFG, 2, Load(5, 2, 1.0), None, NOW)
    assert d.after == 3
    assert "5 tasks queued for 2 busy slots > 2 per slot" in d.reason


def test_does_not_grow_with_a_free_slot_nor_past_its_maximum() -> None:
    assert decide(CFG, 2, Load(9, 1, 500.0), None, NOW).after == 2  # a slot is free
    d = decide(CFG, 3, Load(9, 3, 500.0), None, NOW)
    assert (d.after, d.reason) == (3, "busy")


def test_a_short_queue_that_has_not_waited_does_not_grow() -> None:
    assert decide(CFG, 1, Load(2, 1, 5.0), None, NOW).after == 1


def test_step() -> None:
    cfg = CFG.model_copy(update={"max": 10, "step": 4})
    assert decide(cfg, 1, Load(9, 1, 500.0), None, NOW).after == 5
    assert decide(cfg, 8, Load(9, 8, 500.0), None, NOW).after == 10


def test_shrinks_to_what_runs_after_idling_never_below_its_minimum() -> None:
    first = decide(CFG, 3, Load(0, 1, None), None, NOW)
    assert (first.after, first.idle_since, first.reason) == (3, NOW, "idle")
    later = decide(CFG, 3, Load(0, 1, None), NOW, NOW + timedelta(seconds=59))
    assert later.after == 3
    d = decide(CFG, 3, Load(0, 1, None), NOW, NOW + timedelta(seconds=60))
    assert (d.after, d.idle_since) == (1, None)
    assert "2 of 3 slots idle for 60s >= 60s" in d.reason
    d = decide(CFG, 3, Load(0, 0, None), NOW, NOW + timedelta(seconds=600))
    assert d.after == 1  # the minimum, though nothing runs


def test_work_resets_the_idle_clock() -> None:
    d = decide(CFG, 3, Load(1, 1, 0.0), NOW, NOW + timedelta(seconds=600))
    assert (d.after, d.idle_since) == (3, None)


def test_changed_limits_bring_the_capacity_inside_them() -> None:
    assert decide(CFG, 7, Load(0, 0, None), None, NOW).after == 3
    assert decide(CFG.model_copy(update={"min": 2}), 1, Load(0, 0, None), None, NOW).after == 2


def test_scale_from_zero() -> None:
    cfg = PoolCapacity(min=0, max=2)
    assert decide(cfg, 0, Load(1, 0, 0.0), None, NOW).after == 1


def test_dispatch_limits_elastic_pools_at_their_capacity_capped_by_pool_limits() -> None:
    s = Settings.model_validate(
        {
            "pool_limits": {"default": 4, "big": 2},
            "pool_capacity": {"big": {"max": 8}, "etl": {"min": 2, "max": 5}},
        }
    )
    assert limits(s, {}) == {"default": 4, "big": 1, "etl": 2}
    assert limits(s, {"big": 6, "etl": 4}) == {"default": 4, "big": 2, "etl": 4}


def test_describe_wait() -> None:
    s = Settings.model_validate({"pool_capacity": {"big": {"max": 8}}})
    assert describe_wait(s, "default", 1, 1) is None
    assert describe_wait(s, "big", 2, 1) is None
    said = describe_wait(s, "big", 2, 2)
    assert (
        said
        == "waiting: pool big runs 2 of its capacity 2 (elastic 1..8: grows after 30s of waiting)"
    )


def test_bad_limits_are_refused_saying_what_to_fix() -> None:
    with pytest.raises(ValidationError, match=r"min \(3\) is above max \(2\)"):
        Settings.model_validate({"pool_capacity": {"big": {"min": 3, "max": 2}}})
    with pytest.raises(ValidationError, match="max"):
        Settings.model_validate({"pool_capacity": {"big": {"min": 1}}})
    with pytest.raises(ValidationError, match="Extra inputs"):
        Settings.model_validate({"pool_capacity": {"big": {"max": 2, "scale_up_after": 5}}})
