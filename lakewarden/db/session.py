"""Engines and transactions. Every unit of work, the API's per-request one included, is
`with transaction(engine) as session:` (commit on success, roll back on error); a round of
a loop that must commit once, at its end, is `with round_transaction(engine) as session:`
(or `round_connection`), where any other commit raises."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Connection, Engine, create_engine, event, make_url
from sqlalchemy.orm import Session, sessionmaker

from lakewarden.settings import Settings, get_settings


def resolve_database_url(settings: Settings) -> str:
    """The services' database: the configured one, or the embedded server (started on
    demand) as its services' role, which owns nothing (lakewarden.db.roles)."""
    if settings.database_url:
        return settings.database_url
    from lakewarden.db.embedded import ensure_server, services_url

    return services_url(
        settings.data_dir, ensure_server(settings.data_dir, settings.embedded_pg_port)
    )


def resolve_migration_url(settings: Settings) -> str:
    """The database as the schema's owner, for migrate: LAKEWARDEN_MIGRATION_DATABASE_URL,
    else the embedded server's superuser, else (one role for everything) the services'."""
    if settings.migration_database_url:
        return settings.migration_database_url
    if settings.database_url:
        return settings.database_url
    from lakewarden.db.embedded import ensure_server

    return ensure_server(settings.data_dir, settings.embedded_pg_port)


@functools.cache
def engine_for(url: str) -> Engine:
    """One engine (one connection pool) per database URL for the life of the process."""
    return create_engine(url, pool_pre_ping=True, pool_size=5, max_overflow=5)


def get_engine(settings: Settings | None = None) -> Engine:
    return engine_for(resolve_database_url(settings or get_settings()))


def catalog_engine(url: str, control_plane: Engine) -> Engine:
    """A JDBC catalog's database: the control plane's own engine when they are one
    database, else the process's one engine for the catalog's URL (`engine_for`), never a
    new engine per call: each holds a pool of connections until it is disposed of."""
    if make_url(url) == control_plane.url:
        return control_plane
    return engine_for(url)


def session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


@contextmanager
def transaction(engine: Engine) -> Iterator[Session]:
    """One unit of work: commit on success, roll back on error."""
    with session_factory(engine)() as session, session.begin():
        yield session


class StrayCommit(RuntimeError):
    """A commit inside a round, before the round's own commit point (its block's end)."""


class _CommitPoint:
    """Refuses a commit until `reached`: a helper that commits on its own would split a
    round in two (its first half durable although the rest may fail or be fenced out),
    as Airflow's scheduler refuses one with `prohibit_commit`."""

    def __init__(self) -> None:
        self.reached = False

    def check(self, *_: object) -> None:
        if not self.reached:
            raise StrayCommit("a commit inside a round: only the end of the round commits")


@contextmanager
def round_transaction(engine: Engine) -> Iterator[Session]:
    """`transaction`, whose one commit is the end of the block: a `session.commit()` inside
    raises `StrayCommit` (and the round rolls back)."""
    point = _CommitPoint()
    with session_factory(engine)() as session:
        event.listen(session, "before_commit", point.check)
        with session.begin():
            yield session
            point.reached = True


@contextmanager
def round_connection(engine: Engine) -> Iterator[Connection]:
    """`engine.begin()`, whose one commit is the end of the block: a `conn.commit()` inside
    raises `StrayCommit` (and the round rolls back)."""
    point = _CommitPoint()
    with engine.connect() as conn:
        event.listen(conn, "commit", point.check)
        try:
            with conn.begin():
                yield conn
                point.reached = True
        except StrayCommit:
            # The refused commit left the transaction inactive but not rolled back, and the
            # pool would not reset it: drop the connection, so the database rolls it back.
            conn.invalidate()
            raise
