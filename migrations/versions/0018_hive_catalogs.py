"""Hive catalogs: the type `hive`, and each catalog's cursor in its metastore's
notification log with the claim that lets one replica follow it

Revision ID: 0018
Revises: 0017
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None
# Expand only: a wider CHECK and nullable columns that code at 0017 never names.
oldest_compatible_head = "0017"

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.drop_constraint(op.f("ck_catalogs_type"), "catalogs", type_="check")
    op.create_check_constraint(
        op.f("ck_catalogs_type"), "catalogs", "type IN ('jdbc', 'rest', 'hive')"
    )
    # The last notification event followed (lakewarden.events.metastore), and when the
    # log is next due: a replica follows it only when it wins that due time.
    op.add_column("catalog_polls", sa.Column("notification_id", sa.BigInteger(), nullable=True))
    op.add_column("catalog_polls", sa.Column("notifications_due_at", TS, nullable=True))


def downgrade() -> None:
    op.drop_column("catalog_polls", "notifications_due_at")
    op.drop_column("catalog_polls", "notification_id")
    op.drop_constraint(op.f("ck_catalogs_type"), "catalogs", type_="check")
    op.create_check_constraint(op.f("ck_catalogs_type"), "catalogs", "type IN ('jdbc', 'rest')")
