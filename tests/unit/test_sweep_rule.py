"""The sweep's rule (`lakewarden.policy.model.is_due`), which the leader's sweep and explain
share."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from lakewarden.policy.model import CleanPolicy, is_due

NOW = datetime(2026, 3, 1, 12, tzinfo=UTC)


def test_due_without_a_task_and_once_the_interval_has_passed() -> None:
    section = CleanPolicy(interval_minutes=60)
    assert is_due(section, None, NOW, kind="clean") == (True, "no clean task yet")
    assert is_due(section, NOW - timedelta(minutes=60), NOW, kind="clean") == (
        True,
        "last clean task 60 min ago, interval 60 min",
    )
    assert is_due(section, NOW - timedelta(hours=5), NOW, kind="clean") == (
        True,
        "last clean task 5.0 h ago, interval 60 min",
    )


def test_not_due_inside_the_interval_says_when() -> None:
    last = NOW - timedelta(minutes=59, seconds=59)
    due, why = is_due(CleanPolicy(interval_minutes=60), last, NOW, kind="clean")
    assert not due
    assert why == f"the next clean task is due at {(last + timedelta(minutes=60)).isoformat()}"
