"""What every process builds once at start: settings, database, catalog, identity."""

from __future__ import annotations

import functools
import os
import socket
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from alembic.config import Config
from pyiceberg.catalog import Catalog
from sqlalchemy import Engine, text

from lakewarden.catalog import load_catalog
from lakewarden.db.session import get_engine, resolve_database_url
from lakewarden.settings import Settings, get_settings


def new_process_id(role: str) -> str:
    return f"{role}-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


@dataclass
class Runtime:
    settings: Settings
    db_url: str
    engine: Engine
    role: str
    process_id: str = field(default="")

    def __post_init__(self) -> None:
        if not self.process_id:
            self.process_id = new_process_id(self.role)

    @functools.cached_property
    def catalog(self) -> Catalog:
        return load_catalog(self.settings, self.db_url)


def make_runtime(role: str, settings: Settings | None = None) -> Runtime:
    settings = settings or get_settings()
    url = resolve_database_url(settings)
    return Runtime(settings=settings, db_url=url, engine=get_engine(settings), role=role)


def migrate(rt: Runtime) -> None:
    """Bring the schema to head, make sure the catalog tables exist, install the trigger."""
    from alembic import command

    from lakewarden.events.trigger import install_commit_trigger

    command.upgrade(alembic_config(rt.db_url), "head")
    if rt.settings.catalog_type == "jdbc":
        rt.catalog  # noqa: B018  pyiceberg's SqlCatalog creates iceberg_tables when missing
        if rt.settings.catalog_database_url in (None, rt.db_url):
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
