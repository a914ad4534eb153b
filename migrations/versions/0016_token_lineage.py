"""Token lineage: the token that minted each token (revoking a token revokes what it
minted), and whether a token was minted for a dashboard session (logout revokes it)

Revision ID: 0016
Revises: 0015
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None
# Expand only: a nullable column and one with a default, which code at 0014 never names.
oldest_compatible_head = "0014"


def upgrade() -> None:
    op.add_column("api_tokens", sa.Column("parent_id", sa.BigInteger(), nullable=True))
    op.add_column(
        "api_tokens",
        sa.Column("for_session", sa.Boolean(), server_default=sa.text("false"), nullable=False),
    )
    op.create_foreign_key(
        op.f("fk_api_tokens_parent_id_api_tokens"),
        "api_tokens",
        "api_tokens",
        ["parent_id"],
        ["id"],
    )
    op.create_index(op.f("ix_api_tokens_parent_id"), "api_tokens", ["parent_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_api_tokens_parent_id"), "api_tokens")
    op.drop_constraint(op.f("fk_api_tokens_parent_id_api_tokens"), "api_tokens")
    op.drop_column("api_tokens", "for_session")
    op.drop_column("api_tokens", "parent_id")
