"""Engines and transactions. Every unit of work, the API's per-request one included, is
`with transaction(engine) as session:` (commit on success, roll back on error); a round of
a loop that must commit once, at its end, is `with round_transaction(engine) as session:`
(or `round_connection`), where any other commit raises."""

from __future__ import annotations

import functools
import select
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, exc, make_url
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
    return checked_on_checkout(create_engine(url, pool_size=5, max_overflow=5))


# A pooled connection idle longer than this is pinged (a round trip) before it is handed out.
IDLE_PING_S = 30.0


def checked_on_checkout(engine: Engine, idle_ping_s: float = IDLE_PING_S) -> Engine:
    """`pool_pre_ping` without its round trip on every checkout (B35: three pings per
    task): a pooled connection is handed out after a look at its socket, which costs no
    round trip, and a ping only when it sat idle longer than `idle_ping_s`. A server that
    restarted or ended the session (`pg_terminate_backend`) closed the socket with a
    message, so the socket is readable: the pool drops the connection and hands out a
    fresh one (`DisconnectionError`), and the transaction never sees it. A connection that
    went silent (a network gone without a word) is what the idle ping is for."""

    @event.listens_for(engine, "checkin")
    def _checked_in(dbapi_connection: Any, record: Any) -> None:
        record.info["idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checkout(dbapi_connection: Any, record: Any, proxy: Any) -> None:
        idle_since = record.info.pop("idle_since", None)
        if idle_since is None:
            return  # a new connection, just made
        if dbapi_connection.closed or _has_spoken(dbapi_connection):
            raise exc.DisconnectionError("the server closed the connection while it was idle")
        if time.monotonic() - idle_since > idle_ping_s:
            try:
                alive = engine.dialect.do_ping(dbapi_connection)
            except Exception as error:
                raise exc.DisconnectionError(f"an idle connection's ping: {error}") from error
            if not alive:
                raise exc.DisconnectionError("the idle connection's ping failed")

    return engine


def _has_spoken(dbapi_connection: Any) -> bool:
    """Whether an idle connection's socket has something to read: nothing was asked of
    the server, so it is its goodbye (a FATAL notice, or the end of the stream)."""
    try:
        fd = dbapi_connection.pgconn.socket
        readable, _, _ = select.select([fd], [], [], 0)
    except Exception:
        return True  # no socket to look at: not a connection to hand out
    return bool(readable)


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
