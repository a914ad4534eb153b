"""Every state lakewarden stores, in one place: tasks, their job runs, alerts.

It imports nothing of lakewarden, so every layer (db/, tasks/, spark/, services) can use
it. The CHECK constraints of migration 0007 hold the same lists, and a test compares the
live database's constraints with these enums, so a new member needs a migration. SQL that
must name states as literals (a partial index's predicate, ON CONFLICT's inference clause,
a CHECK constraint) renders them with `sql_in` instead of typing them out.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum


class TaskState(StrEnum):
    """A task's state; the moves between them are `tasks/machine.py`."""

    PENDING = "pending"
    PLANNING = "planning"
    PLANNED = "planned"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    SKIPPED = "skipped"
    FAILED = "failed"
    CANCELLED = "cancelled"


# Open: the task still holds its (table, kind) slot (the partial unique index).
OPEN_TASK_STATES = (TaskState.PENDING, TaskState.PLANNING, TaskState.PLANNED, TaskState.RUNNING)
TERMINAL_TASK_STATES = tuple(s for s in TaskState if s not in OPEN_TASK_STATES)
# Waiting for a worker to plan it or for the scheduler to run it.
WAITING_TASK_STATES = (TaskState.PENDING, TaskState.PLANNED)
# Ended by its own work: terminal, but not cancelled.
FINISHED_TASK_STATES = tuple(s for s in TERMINAL_TASK_STATES if s is not TaskState.CANCELLED)
# Held by a process (a worker planning it, the scheduler running it) that heartbeats.
HELD_TASK_STATES = (TaskState.PLANNING, TaskState.RUNNING)


class RunState(StrEnum):
    """A job run's state (`job_runs.state`): one attempt at running a task on Spark."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    HELD = "held"  # the job measured that it must not act: the task is skipped
    STOPPED = "stopped"  # the policy changed under the job: the task is re-planned
    ABANDONED = "abandoned"  # its scheduler lost leadership mid-run


class AlertState(StrEnum):
    """An alert's state (`alerts.state`, and `alerts.delivered_state` once delivered)."""

    FIRING = "firing"
    ACKNOWLEDGED = "acknowledged"
    RESOLVED = "resolved"


OPEN_ALERT_STATES = (AlertState.FIRING, AlertState.ACKNOWLEDGED)


class CatalogType(StrEnum):
    """The kinds of Iceberg catalog lakewarden watches (`catalogs.type`)."""

    JDBC = "jdbc"  # an Iceberg JDBC catalog in Postgres
    REST = "rest"  # an Iceberg REST catalog
    HIVE = "hive"  # Iceberg tables in a Hive Metastore (lakewarden.metastore)
    HUDI = "hudi"  # Hudi tables by base path, <warehouse>/<namespace>/<name> (formats.hudi)
    DELTA = "delta"  # Delta tables by path, <warehouse>/<namespace>/<name> (formats.delta)


class TableFormatName(StrEnum):
    """The table formats a managed table can be in (`managed_tables.format`)."""

    ICEBERG = "iceberg"
    HUDI = "hudi"
    DELTA = "delta"


# The catalog types that are a warehouse of table paths (`formats.warehouse`), no catalog
# server, and the format of their tables.
PATH_CATALOGS = {CatalogType.HUDI: TableFormatName.HUDI, CatalogType.DELTA: TableFormatName.DELTA}


class RunMode(StrEnum):
    """How a job run executes (`job_runs.mode`, and a pool's mode in `pool_modes`)."""

    SESSION = "session"  # in the scheduler's warm Spark session
    APPLICATION = "application"  # as its own Spark application (spark-submit)


def sql_in(column: str, states: StrEnum | Iterable[StrEnum], *, negate: bool = False) -> str:
    """`column IN ('a', 'b')` (`column = 'a'` for one state), the states as SQL literals;
    `negate`: `column NOT IN (...)` (`column <> 'a'`).

    Only for this module's enum members, never for input: the values are checked to be
    plain lowercase words, so nothing needs quoting."""
    values = [states.value] if isinstance(states, StrEnum) else [s.value for s in states]
    if not values or not all(v.isidentifier() and v.islower() for v in values):
        raise ValueError(f"not a list of states: {values!r}")
    if len(values) == 1:
        return f"{column} {'<>' if negate else '='} '{values[0]}'"
    literals = ", ".join(f"'{v}'" for v in values)
    return f"{column} {'NOT IN' if negate else 'IN'} ({literals})"
