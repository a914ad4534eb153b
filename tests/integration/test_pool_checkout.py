"""A pooled connection is handed out without a round trip to Postgres, and never dead
(lakewarden.db.session.checked_on_checkout): a server that ended the session is noticed
from the socket, an idle connection is pinged. Real Postgres; the dialect's ping counted."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.pool import NullPool

from lakewarden.db.session import checked_on_checkout, transaction


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    e = checked_on_checkout(create_engine(db_url, pool_size=1, max_overflow=0))
    yield e
    e.dispose()


def _count_pings(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    seen: list[Any] = []
    ping = engine.dialect.do_ping

    def counted(dbapi_connection: Any) -> bool:
        seen.append(dbapi_connection)
        return ping(dbapi_connection)

    monkeypatch.setattr(engine.dialect, "do_ping", counted)
    return seen


@pytest.fixture
def pings(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    return _count_pings(engine, monkeypatch)


def _backend(engine: Engine) -> int:
    with transaction(engine) as s:
        return int(s.execute(text("SELECT pg_backend_pid()")).scalar_one())


def test_a_busy_connection_is_handed_out_without_a_ping(engine: Engine, pings: list[Any]) -> None:
    first = _backend(engine)
    for _ in range(20):
        assert _backend(engine) == first  # the one pooled connection, reused
    assert pings == []


def test_a_connection_the_server_ended_is_replaced_before_the_transaction(
    engine: Engine, db_url: str, pings: list[Any]
) -> None:
    """As after a restart: the server ended the pooled connection's session while it sat
    in the pool; the next transaction runs on a new one, without an error."""
    old = _backend(engine)
    other = create_engine(db_url, poolclass=NullPool)
    with other.connect() as conn:
        assert conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": old}).scalar()
        deadline = time.monotonic() + 60  # a loaded server may take its time to end it
        while conn.execute(  # until the session is gone for sure
            text("SELECT count(*) FROM pg_stat_activity WHERE pid = :p"), {"p": old}
        ).scalar_one():
            assert time.monotonic() < deadline
            time.sleep(0.05)
    assert _backend(engine) != old
    assert pings == []  # told by the socket, not by a round trip


def test_an_idle_connection_is_pinged(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = checked_on_checkout(create_engine(db_url, pool_size=1, max_overflow=0), 0.2)
    try:
        seen = _count_pings(engine, monkeypatch)
        _backend(engine)
        _backend(engine)
        assert seen == []
        time.sleep(0.3)
        _backend(engine)
        assert len(seen) == 1
    finally:
        engine.dispose()
