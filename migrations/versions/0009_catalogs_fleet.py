"""A fleet: registered catalogs, management rules, how each table came to be managed

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)
JSONB = postgresql.JSONB(astext_type=sa.Text())


def upgrade() -> None:
    op.create_table(
        "catalogs",
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("type", sa.String(length=16), nullable=False),
        sa.Column("properties", JSONB, nullable=False),
        sa.Column("poll_interval_s", sa.Float(), server_default=sa.text("30"), nullable=False),
        sa.Column("poll_concurrency", sa.Integer(), server_default=sa.text("4"), nullable=False),
        sa.Column("version", sa.Integer(), server_default=sa.text("1"), nullable=False),
        sa.Column("created_by", sa.String(length=255), nullable=True),
        sa.Column("created_at", TS, server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", TS, server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint("type IN ('jdbc', 'rest')", name=op.f("ck_catalogs_type")),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_catalogs")),
    )
    # One row per catalog: when it is next due for a poll, and who polled it last. A replica
    # polls a catalog only when it wins the row's due time, so each catalog is polled once
    # per interval however many replicas there are.
    op.create_table(
        "catalog_polls",
        sa.Column("catalog", sa.String(length=128), nullable=False),
        sa.Column("due_at", TS, server_default=sa.text("now()"), nullable=False),
        sa.Column("polled_by", sa.String(length=255), nullable=True),
        sa.Column("polled_at", TS, nullable=True),
        sa.Column("duration_ms", sa.BigInteger(), nullable=True),
        sa.Column("tables_seen", sa.Integer(), nullable=True),
        sa.Column("tables_refreshed", sa.Integer(), nullable=True),
        sa.Column("catalog_requests", sa.Integer(), nullable=True),
        sa.Column("commit_trigger", sa.Boolean(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("catalog", name=op.f("pk_catalog_polls")),
    )
    op.create_table(
        "management_rules",
        sa.Column("id", sa.BigInteger(), nullable=False),
        sa.Column("catalog", sa.String(length=128), nullable=False),
        sa.Column("namespace", sa.String(length=255), server_default="*", nullable=False),
        sa.Column("include", JSONB, server_default=sa.text("'[\"*\"]'::jsonb"), nullable=False),
        sa.Column("exclude", JSONB, server_default=sa.text("'[]'::jsonb"), nullable=False),
        sa.Column("policy", JSONB, server_default=sa.text("'{}'::jsonb"), nullable=False),
        sa.Column("enabled", sa.Boolean(), server_default=sa.text("true"), nullable=False),
        sa.Column("created_by", sa.String(length=255), nullable=True),
        sa.Column("created_at", TS, server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", TS, server_default=sa.text("now()"), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_management_rules")),
    )
    op.create_index(op.f("ix_management_rules_catalog"), "management_rules", ["catalog"])
    # How a table came to be managed: "api" (registered), "rule:<id>" (auto-managed).
    op.add_column(
        "managed_tables",
        sa.Column("managed_by", sa.String(length=64), server_default="api", nullable=False),
    )
    # The owner said no: rules never manage it (again) until the flag is cleared.
    op.add_column(
        "managed_tables",
        sa.Column("opt_out", sa.Boolean(), server_default=sa.text("false"), nullable=False),
    )
    # Why the table is retired: unregistered, dropped from the catalog, opted out, or
    # maintained by another optimizer.
    op.add_column("managed_tables", sa.Column("retired_reason", sa.Text(), nullable=True))
    # The metadata pointer health was last measured at: a moved pointer is measured first.
    op.add_column("managed_tables", sa.Column("health_metadata_location", sa.Text(), nullable=True))
    op.create_index(
        "ix_managed_tables_live_health",
        "managed_tables",
        ["health_score", "id"],
        postgresql_where=sa.text("retired_at IS NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_managed_tables_live_health", table_name="managed_tables")
    for column in ("health_metadata_location", "retired_reason", "opt_out", "managed_by"):
        op.drop_column("managed_tables", column)
    op.drop_index(op.f("ix_management_rules_catalog"), table_name="management_rules")
    op.drop_table("management_rules")
    op.drop_table("catalog_polls")
    op.drop_table("catalogs")
