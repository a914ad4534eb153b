"""`lakewarden migrate`: the schema to head (Alembic; the schema exists only through
migrations), the JDBC catalog's tables, and the commit trigger on them.

All of it runs under one advisory lock (`DBLocks.MIGRATIONS`), held on a dedicated
connection for the whole upgrade, so replicas that migrate at once (two pods, a Helm hook
and a compose service) take turns: the later one finds everything in place and does nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from alembic.config import Config
from sqlalchemy import Engine, text

from lakewarden.db.locks import DBLocks, session_lock
from lakewarden.db.session import catalog_engine
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
    """Bring the schema to head, make sure the catalog tables exist, install the trigger."""
    from alembic import command

    with session_lock(rt.engine, DBLocks.MIGRATIONS):
        command.upgrade(alembic_config(rt.db_url), "head")
        if rt.settings.catalog_type == "jdbc":
            rt.catalog  # noqa: B018  pyiceberg's SqlCatalog creates iceberg_tables when missing
            if (
                not rt.settings.catalog_database_url
                or catalog_engine(rt.settings.catalog_database_url, rt.engine) is rt.engine
            ):
                with rt.engine.begin() as conn:
                    install_commit_trigger(conn, refresh=True)


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
