"""Migrations are production code: one head, up/down/up with data, equal to the models."""

from __future__ import annotations

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, inspect, text

from lakewarden.db.migrate import alembic_config
from lakewarden.db.models import Base


def test_single_head(db_url: str) -> None:
    heads = ScriptDirectory.from_config(alembic_config(db_url)).get_heads()
    assert len(heads) == 1


def test_upgrade_downgrade_upgrade_with_data(db_url: str) -> None:
    cfg = alembic_config(db_url)
    engine = create_engine(db_url)
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO managed_tables (catalog, namespace, name, policy) "
                "VALUES ('lake', 'a', 'b', '{}')"
            )
        )
    command.downgrade(cfg, "base")
    assert "tasks" not in inspect(engine).get_table_names()
    command.upgrade(cfg, "head")
    command.downgrade(cfg, "base")
    command.upgrade(cfg, "head")
    tables = set(inspect(engine).get_table_names())
    assert {
        "managed_tables",
        "timeline_events",
        "tasks",
        "task_transitions",
        "job_runs",
        "leader_lease",
        "process_heartbeats",
        "policy_versions",
    } <= tables
    engine.dispose()


def test_models_match_migrations(db_url: str) -> None:
    engine = create_engine(db_url)
    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"include_name": _ours})
        diff = compare_metadata(ctx, Base.metadata)
    engine.dispose()
    assert diff == []


def _ours(name: str | None, type_: str, parent: dict) -> bool:
    # The Iceberg catalog's own tables live in the same database; they are not ours.
    return not (type_ == "table" and name is not None and name.startswith("iceberg_"))
