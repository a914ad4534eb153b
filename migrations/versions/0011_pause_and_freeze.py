"""Operator holds: a table's pause and the fleet-wide freeze are blockers without an end

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None
# Expand only: two NOT NULLs relaxed and a partial index. Code at 0010 reads blockers only
# through `table_id = :id AND expires_at > now()`, which never matches the new rows (NULL
# in either column), so it keeps running; it ignores pauses and the freeze until it is
# replaced, as code that predates a feature does.
oldest_compatible_head = "0010"

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    # NULL table: every table (the freeze). NULL expiry: until an operator lifts it.
    op.alter_column("table_blockers", "table_id", existing_type=sa.BigInteger(), nullable=True)
    op.alter_column("table_blockers", "expires_at", existing_type=TS, nullable=True)
    # At most one hold without an end per table, and one freeze (NULL table -> 0: ids start
    # at 1): pausing twice finds the first pause instead of stacking a second.
    op.create_index(
        "uq_table_blockers_hold",
        "table_blockers",
        [sa.text("coalesce(table_id, 0)")],
        unique=True,
        postgresql_where=sa.text("expires_at IS NULL"),
    )


def downgrade() -> None:
    op.drop_index("uq_table_blockers_hold", table_name="table_blockers")
    # The holds cannot be written in the older schema: they are lifted.
    op.execute("DELETE FROM table_blockers WHERE table_id IS NULL OR expires_at IS NULL")
    op.alter_column("table_blockers", "expires_at", existing_type=TS, nullable=False)
    op.alter_column("table_blockers", "table_id", existing_type=sa.BigInteger(), nullable=False)
