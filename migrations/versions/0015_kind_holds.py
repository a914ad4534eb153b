"""Kind holds: a kind stopped on a table after a failed validation or repeated failures
(placeholder: its tables arrive with the hold itself)

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None
# Expand only.
oldest_compatible_head = "0014"


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
