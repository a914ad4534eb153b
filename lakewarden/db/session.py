"""Engine and sessions. The caller owns the transaction (`with session.begin()`)."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, create_engine
from sqlalchemy.orm import Session, sessionmaker

from lakewarden.settings import Settings, get_settings


def resolve_database_url(settings: Settings) -> str:
    """The configured database, or the embedded server (started on demand)."""
    if settings.database_url:
        return settings.database_url
    from lakewarden.db.embedded import ensure_server

    return ensure_server(settings.data_dir, settings.embedded_pg_port)


@functools.cache
def _engine_for(url: str) -> Engine:
    return create_engine(url, pool_pre_ping=True, pool_size=5, max_overflow=5)


def get_engine(settings: Settings | None = None) -> Engine:
    return _engine_for(resolve_database_url(settings or get_settings()))


def session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


@contextmanager
def transaction(engine: Engine) -> Iterator[Session]:
    """One unit of work: commit on success, roll back on error."""
    with session_factory(engine)() as session, session.begin():
        yield session
