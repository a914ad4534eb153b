"""What every process builds once at start: settings, database, catalog, identity."""

from __future__ import annotations

import functools
import os
import socket
import uuid
from dataclasses import dataclass, field

from pyiceberg.catalog import Catalog
from sqlalchemy import Engine

from lakewarden.catalogs.registry import CatalogRegistry
from lakewarden.db.session import get_engine, resolve_database_url
from lakewarden.settings import Settings, get_settings


def new_process_id(role: str) -> str:
    return f"{role}-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


@dataclass
class Runtime:
    settings: Settings
    db_url: str = field(repr=False)  # holds the password
    engine: Engine
    role: str
    process_id: str = field(default="")

    def __post_init__(self) -> None:
        if not self.process_id:
            self.process_id = new_process_id(self.role)

    @functools.cached_property
    def catalogs(self) -> CatalogRegistry:
        return CatalogRegistry(self.settings, self.db_url, self.engine)

    @property
    def catalog(self) -> Catalog:
        """The default (settings-configured) catalog."""
        return self.catalogs.load(self.settings.catalog_name)


def make_runtime(role: str, settings: Settings | None = None) -> Runtime:
    settings = settings or get_settings()
    url = resolve_database_url(settings)
    return Runtime(settings=settings, db_url=url, engine=get_engine(settings), role=role)
