"""Delta Lake tables: the format 'delta' (a managed table's `format`; its events keep the
log version as `commit_id` text, as a Hudi table's keep an instant) and the catalog type
`delta` (Delta tables by path under a warehouse)

Revision ID: 0020
Revises: 0019
"""

from __future__ import annotations

from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None
# Expand only: two CHECKs widened; code at 0019 never writes the new values.
oldest_compatible_head = "0019"


def _recheck(table: str, name: str, condition: str) -> None:
    op.drop_constraint(op.f(name), table, type_="check")
    op.create_check_constraint(op.f(name), table, condition)


def upgrade() -> None:
    _recheck("catalogs", "ck_catalogs_type", "type IN ('jdbc', 'rest', 'hive', 'hudi', 'delta')")
    _recheck("managed_tables", "ck_managed_tables_format", "format IN ('iceberg', 'hudi', 'delta')")


def downgrade() -> None:
    op.execute(
        "DELETE FROM timeline_events WHERE table_id IN "
        "(SELECT id FROM managed_tables WHERE format = 'delta')"
    )
    op.execute("DELETE FROM managed_tables WHERE format = 'delta'")
    op.execute("DELETE FROM catalogs WHERE type = 'delta'")
    _recheck("managed_tables", "ck_managed_tables_format", "format IN ('iceberg', 'hudi')")
    _recheck("catalogs", "ck_catalogs_type", "type IN ('jdbc', 'rest', 'hive', 'hudi')")
