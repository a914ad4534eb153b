"""CHECK constraints on every stored state: tasks, task transitions, job runs, alerts

The lists are lakewarden.states' enums as of this revision (a migration is history and
does not import them); tests/integration/test_state_vocabulary.py checks that the live
constraints still equal the enums.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

TASK = ("pending", "planning", "planned", "running", "succeeded", "skipped", "failed", "cancelled")
RUN = ("running", "succeeded", "failed", "cancelled", "held", "stopped", "abandoned")
ALERT = ("firing", "acknowledged", "resolved")

# (table, column, states)
CHECKS = (
    ("tasks", "state", TASK),
    ("task_transitions", "from_state", TASK),
    ("task_transitions", "to_state", TASK),
    ("job_runs", "state", RUN),
    ("alerts", "state", ALERT),
    ("alerts", "delivered_state", ALERT),
)


def upgrade() -> None:
    for table, column, states in CHECKS:
        literals = ", ".join(f"'{s}'" for s in states)
        op.create_check_constraint(op.f(f"ck_{table}_{column}"), table, f"{column} IN ({literals})")


def downgrade() -> None:
    for table, column, _ in reversed(CHECKS):
        op.drop_constraint(op.f(f"ck_{table}_{column}"), table, type_="check")
