"""REST catalogs' ETags (issue 31 goal 2): the `ETag` a REST catalog answered for each
managed table's last load, sent back as `If-None-Match` on the next poll so an unchanged
table costs a `304` and no metadata. Only a cache: a missing or stale one costs a full load.

Revision ID: 0028
Revises: 0025
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0028"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("managed_tables", sa.Column("catalog_etag", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("managed_tables", "catalog_etag")
