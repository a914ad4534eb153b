"""Every stored state is one of its enum's members: the database's CHECK constraints
refuse anything else, and they hold exactly the enums (a new member needs a migration)."""

from __future__ import annotations

import re
from enum import StrEnum

import pytest
from sqlalchemy import CheckConstraint, Connection, create_engine, text
from sqlalchemy.exc import IntegrityError

from lakewarden.db.models import Base
from lakewarden.states import (
    AlertState,
    CatalogType,
    RunMode,
    RunState,
    TableFormatName,
    TaskState,
)

# Which enum each state column holds.
COLUMNS: dict[tuple[str, str], type[StrEnum]] = {
    ("tasks", "state"): TaskState,
    ("task_transitions", "from_state"): TaskState,
    ("task_transitions", "to_state"): TaskState,
    ("job_runs", "state"): RunState,
    ("alerts", "state"): AlertState,
    ("alerts", "delivered_state"): AlertState,
    ("catalogs", "type"): CatalogType,
    ("job_runs", "mode"): RunMode,
    ("managed_tables", "format"): TableFormatName,
}
# CHECKs that are no vocabulary: exactly one of a timeline event's two commit ids is set.
OTHER_CHECKS = {
    ("timeline_events", "ck_timeline_events_one_commit_id"),
    ("partition_readiness", "ck_partition_readiness_one_last_commit"),
}
VALUES = {column: {s.value for s in enum} for column, enum in COLUMNS.items()}


def _drift(conn: Connection, expected: dict[tuple[str, str], set[str]]) -> list[str]:
    """How the live CHECK constraints differ from the `expected` values of each
    (table, column) (empty: they agree)."""
    live = {
        name: set(re.findall(r"'([^']*)'", definition))
        for name, definition in conn.execute(
            text(
                "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint "
                "WHERE contype = 'c' AND connamespace = 'public'::regnamespace"
            )
        )
    }
    problems = []
    for (table, column), values in expected.items():
        name = f"ck_{table}_{column}"
        if name not in live:
            problems.append(f"{name} is missing")
        elif live[name] != values:
            problems.append(f"{name} holds {sorted(live[name])}, the enum {sorted(values)}")
    return problems


def test_check_constraints_equal_the_enums(db_url: str) -> None:
    engine = create_engine(db_url)
    with engine.connect() as conn:
        assert _drift(conn, VALUES) == []
    engine.dispose()


def test_drift_is_noticed(db_url: str) -> None:
    """An enum with a member the migrations lack is reported."""
    grown = VALUES["tasks", "state"] | {"paused"}
    engine = create_engine(db_url)
    with engine.connect() as conn:
        problems = _drift(conn, {**VALUES, ("tasks", "state"): grown})
    engine.dispose()
    assert len(problems) == 1 and "ck_tasks_state" in problems[0] and "paused" in problems[0]


def test_models_declare_the_same_checks() -> None:
    declared = {
        (table.name, c.name): str(c.sqltext)
        for table in Base.metadata.tables.values()
        for c in table.constraints
        if isinstance(c, CheckConstraint)
    }
    assert set(declared) == {(t, f"ck_{t}_{c}") for t, c in COLUMNS} | OTHER_CHECKS
    for (table, column), values in VALUES.items():
        assert set(re.findall(r"'([^']*)'", declared[table, f"ck_{table}_{column}"])) == values


def _a_task(conn: Connection) -> tuple[int, int]:
    """A managed table and a running task on it: (table id, task id)."""
    table_id = conn.execute(
        text(
            "INSERT INTO managed_tables (catalog, namespace, name, policy) "
            "VALUES ('lake', 'a', 'b', '{}') RETURNING id"
        )
    ).scalar_one()
    task_id = conn.execute(
        text(
            "INSERT INTO tasks (table_id, kind, state, trigger) "
            "VALUES (:t, 'compaction', 'running', '{}') RETURNING id"
        ),
        {"t": table_id},
    ).scalar_one()
    return table_id, task_id


@pytest.mark.parametrize(
    ("insert", "valid"),
    [
        (
            "INSERT INTO tasks (table_id, kind, state, trigger) VALUES (:t, 'ttl', :s, '{}')",
            TaskState.PENDING,
        ),
        (
            "INSERT INTO task_transitions (task_id, from_state, to_state, actor) "
            "VALUES (:task, 'running', :s, 'test')",
            TaskState.SUCCEEDED,
        ),
        (
            "INSERT INTO task_transitions (task_id, from_state, to_state, actor) "
            "VALUES (:task, :s, 'pending', 'test')",
            TaskState.RUNNING,
        ),
        (
            "INSERT INTO job_runs (task_id, attempt, state, scheduler_id, leader_epoch) "
            "VALUES (:task, 1, :s, 'test', 1)",
            RunState.ABANDONED,
        ),
        (
            "INSERT INTO alerts (rule, key, severity, state, summary, details) "
            "VALUES ('r', 'k', 'info', :s, 's', '{}')",
            AlertState.RESOLVED,
        ),
        (
            "INSERT INTO alerts (rule, key, severity, state, summary, details, delivered_state)"
            " VALUES ('r', 'k', 'info', 'resolved', 's', '{}', :s)",
            AlertState.ACKNOWLEDGED,
        ),
    ],
    ids=["task", "transition-to", "transition-from", "run", "alert", "alert-delivered"],
)
def test_check_refuses_an_unknown_state(db_url: str, insert: str, valid: StrEnum) -> None:
    engine = create_engine(db_url)
    with engine.begin() as conn:
        table_id, task_id = _a_task(conn)
    params = {"t": table_id, "task": task_id}
    with engine.begin() as conn:  # a state of the enum is accepted...
        conn.execute(text(insert), {**params, "s": valid})
    with pytest.raises(IntegrityError, match="violates check constraint"), engine.begin() as conn:
        conn.execute(text(insert), {**params, "s": "bogus"})  # ... a made-up one is not
    engine.dispose()


def test_every_run_state_is_accepted(db_url: str) -> None:
    """`abandoned` (abandon_orphans), `held` and `stopped` (RUN_STATE_OF) included."""
    engine = create_engine(db_url)
    with engine.begin() as conn:
        _, task_id = _a_task(conn)
        for attempt, state in enumerate(RunState, start=1):
            conn.execute(
                text(
                    "INSERT INTO job_runs (task_id, attempt, state, scheduler_id, leader_epoch) "
                    "VALUES (:task, :a, :s, 'test', 1)"
                ),
                {"task": task_id, "a": attempt, "s": state},
            )
    engine.dispose()
