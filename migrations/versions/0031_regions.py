"""Regions (issue 31 goal 6): a catalog carries the region whose scheduler leader runs its
tables. Existing catalogs (and the settings-configured one, which has no row) are in the
"default" region, so a deployment that names no region runs as before.

Safe on a live table: a column with a constant default is added without rewriting the
table (Postgres 11+), and the brief lock it takes is not queued behind a long transaction
(lock_timeout: the migration fails and can be run again, rather than stall every reader).
The per-region leases need no rows here: a region's first scheduler inserts its
`leader_lease` row (`scheduler` for the default region, `scheduler:<region>` for others).

Revision ID: 0031
Revises: 0030
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0031"
down_revision = "0030"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.add_column(
        "catalogs",
        sa.Column("region", sa.String(32), server_default=sa.text("'default'"), nullable=False),
    )
    op.execute("SET LOCAL lock_timeout TO DEFAULT")  # the next migrations' own choice


def downgrade() -> None:
    op.drop_column("catalogs", "region")
