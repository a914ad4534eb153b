"""`lakewarden migrate`: the schema to head (Alembic; the schema exists only through
migrations), the JDBC catalog's tables, and the commit trigger on them, as the schema's
owner; then the services' role is granted what it needs (lakewarden.db.roles).

All of it runs under one advisory lock (`DBLocks.MIGRATIONS`), held on a dedicated
connection for the whole upgrade, so replicas that migrate at once (two pods, a Helm hook
and a compose service) take turns: the later one finds everything in place and does nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from alembic.config import Config
from pyiceberg.catalog.sql import SqlCatalogBaseTable
from sqlalchemy import Connection, Engine, create_engine, make_url, text
from sqlalchemy.pool import NullPool

from lakewarden.db.locks import DBLocks, session_lock
from lakewarden.db.roles import (
    current_role,
    ensure_login_role,
    grant_services_role,
    warn_if_unsafe,
)
from lakewarden.db.session import catalog_engine, resolve_migration_url
from lakewarden.db.trigger import install_commit_trigger
from lakewarden.settings import Settings


class Migratable(Protocol):
    """What migrating needs of a process's `lakewarden.runtime.Runtime`."""

    @property
    def settings(self) -> Settings: ...

    @property
    def db_url(self) -> str: ...

    @property
    def engine(self) -> Engine: ...

    @property
    def catalog(self) -> object: ...


def migrate(rt: Migratable) -> None:
    """Bring the schema to head, make sure the catalog tables exist, install the trigger,
    all as the schema's owner (`resolve_migration_url`); then grant the services' role
    (rt.db_url's) its rights, when it is another (lakewarden.db.roles)."""
    from alembic import command

    owner_url = resolve_migration_url(rt.settings)
    as_owner = make_url(owner_url) != make_url(rt.db_url)
    owner = create_engine(owner_url, poolclass=NullPool) if as_owner else rt.engine
    try:
        with session_lock(owner, DBLocks.MIGRATIONS):
            command.upgrade(alembic_config(owner_url), "head")
            in_control_plane = rt.settings.catalog_type == "jdbc" and (
                not rt.settings.catalog_database_url
                or catalog_engine(rt.settings.catalog_database_url, rt.engine) is rt.engine
            )
            with owner.begin() as conn:
                set_audit_retention(conn, rt.settings.retention_audit_months)
                if in_control_plane:
                    # The catalog tables belong to the owner too: the trigger on them needs it.
                    SqlCatalogBaseTable.metadata.create_all(conn)
                    install_commit_trigger(conn, refresh=True)
                services = make_url(rt.db_url).username
                if as_owner and services and services != current_role(conn):
                    ensure_login_role(conn, make_url(rt.db_url))
                    grant_services_role(conn, services)
                elif services:
                    warn_if_unsafe(conn, services)
            if rt.settings.catalog_type == "jdbc":
                rt.catalog  # noqa: B018  pyiceberg's SqlCatalog creates iceberg_tables when missing
    finally:
        if as_owner:
            owner.dispose()


def set_audit_retention(conn: Connection, months: int) -> None:
    """Make `months` the audit log's retention (migration 0025), as the owner: a function
    the services' role can read through `lakewarden_audit_maintain()` but not replace."""
    conn.execute(
        text(
            "CREATE OR REPLACE FUNCTION lakewarden_audit_retention_months() RETURNS int "
            f"LANGUAGE sql IMMUTABLE AS 'SELECT {int(months)}'"
        )
    )


def alembic_config(db_url: str) -> Config:
    """Alembic's config built in code, so an installed package migrates without its repo."""
    import migrations

    cfg = Config()
    cfg.set_main_option("script_location", str(Path(migrations.__file__).parent))
    cfg.set_main_option("sqlalchemy.url", db_url.replace("%", "%%"))
    return cfg


def schema_is_current(engine: Engine) -> bool:
    from alembic.script import ScriptDirectory

    with engine.connect() as conn:
        try:
            current = conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
        except Exception:
            return False
    url = engine.url.render_as_string(hide_password=False)
    head = ScriptDirectory.from_config(alembic_config(url)).get_current_head()
    return current == head
