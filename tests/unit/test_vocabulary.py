"""One source of truth per vocabulary: states come from lakewarden.states, kinds from the
policy's sections and the kind registry, and SQL renders them from there."""

from __future__ import annotations

from enum import StrEnum

import pytest

from lakewarden.kinds import REGISTRY
from lakewarden.policy.model import KINDS, KindPolicy, Policy
from lakewarden.states import (
    OPEN_TASK_STATES,
    TERMINAL_TASK_STATES,
    WAITING_TASK_STATES,
    AlertState,
    TaskState,
    sql_in,
)
from lakewarden.tasks.machine import ALLOWED


def test_sql_in_renders_the_states_as_literals() -> None:
    assert sql_in("state", OPEN_TASK_STATES) == (
        "state IN ('pending', 'planning', 'planned', 'running')"
    )
    assert sql_in("t.state", TaskState.PLANNED) == "t.state = 'planned'"
    assert sql_in("state", WAITING_TASK_STATES) == "state IN ('pending', 'planned')"
    assert sql_in("state", AlertState.RESOLVED, negate=True) == "state <> 'resolved'"
    assert sql_in("state", [TaskState.PENDING, TaskState.RUNNING], negate=True) == (
        "state NOT IN ('pending', 'running')"
    )


def test_sql_in_takes_states_only() -> None:
    class Evil(StrEnum):
        X = "x') OR ('1' = '1"

    with pytest.raises(ValueError, match="not a list of states"):
        sql_in("state", Evil)
    with pytest.raises(ValueError, match="not a list of states"):
        sql_in("state", [])


def test_every_task_state_is_open_or_terminal_and_in_the_machine() -> None:
    assert set(OPEN_TASK_STATES) | set(TERMINAL_TASK_STATES) == set(TaskState)
    assert not set(OPEN_TASK_STATES) & set(TERMINAL_TASK_STATES)
    assert set(ALLOWED) == set(TaskState)
    assert all(targets <= set(TaskState) for targets in ALLOWED.values())


def test_kinds_are_the_policy_sections_and_the_registry() -> None:
    """Every policy section that is a KindPolicy is a kind, with one Kind in the registry;
    the others (slo, readiness, tags, ...) are not maintenance kinds."""
    policy = Policy()
    sections = [n for n in Policy.model_fields if isinstance(getattr(policy, n), KindPolicy)]
    assert list(KINDS) == sections
    assert {"slo", "tags"} <= set(Policy.model_fields) - set(KINDS)
    assert list(REGISTRY) == list(KINDS)
    assert all(isinstance(REGISTRY[k].section(policy), KindPolicy) for k in KINDS)
