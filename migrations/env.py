"""Alembic environment: the URL comes from lakewarden's settings (or the caller)."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from lakewarden.db.models import Base
from lakewarden.db.schema_compat import record
from lakewarden.db.session import resolve_migration_url
from lakewarden.settings import get_settings

config = context.config
target_metadata = Base.metadata


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        context.configure(connection=connection, target_metadata=target_metadata)
        with context.begin_transaction():
            context.run_migrations()
            record(connection, context.script)
        return
    url = config.get_main_option("sqlalchemy.url") or resolve_migration_url(get_settings())
    engine = create_engine(url)
    with engine.connect() as conn:
        context.configure(connection=conn, target_metadata=target_metadata)
        with context.begin_transaction():
            context.run_migrations()
            # Which code heads this schema serves, read by every replica's /readyz: code
            # older than the schema cannot read the newer migration files.
            record(conn, context.script)
    engine.dispose()


if context.is_offline_mode():
    raise SystemExit("offline migrations are not supported; run `lakewarden migrate`")
run_migrations_online()
