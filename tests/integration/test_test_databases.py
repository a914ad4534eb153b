"""The database fixture's promise: every test gets a database as fresh as a copy of the
template, also when it is an earlier test's database emptied (tests/conftest.py)."""

from __future__ import annotations

from conftest import _Databases, _with_db
from sqlalchemy import create_engine, text

INSERT = (
    "INSERT INTO managed_tables (catalog, namespace, name, policy) "
    "VALUES ('lake', 'a', gen_random_uuid()::text, '{}') RETURNING id"
)


def _oid(server_url: str, name: str) -> int | None:
    engine = create_engine(_with_db(server_url, "postgres"))
    with engine.connect() as conn:
        oid = conn.execute(text("SELECT oid FROM pg_database WHERE datname = :n"), {"n": name})
        value = oid.scalar()
    engine.dispose()
    return None if value is None else int(value)


def _run(server_url: str, name: str, sql: str) -> object:
    engine = create_engine(_with_db(server_url, name))
    with engine.begin() as conn:
        result = conn.execute(text(sql))
        value = result.scalar() if result.returns_rows else None
    engine.dispose()
    return value


def test_a_reused_database_is_emptied_and_renamed(server_url: str, _databases: _Databases) -> None:
    first = _databases.take()
    oid = _oid(server_url, first)
    _run(server_url, first, INSERT)
    _run(server_url, first, INSERT)
    _databases.give_back(first)

    second = _databases.take()
    assert _oid(server_url, second) == oid  # the same database, emptied
    assert second != first and _oid(server_url, first) is None  # under a new name
    assert _run(server_url, second, "SELECT count(*) FROM managed_tables") == 0
    assert _run(server_url, second, INSERT) == 1  # its sequences start over
    _databases.give_back(second)


def test_a_database_whose_schema_changed_is_dropped(
    server_url: str, _databases: _Databases
) -> None:
    name = _databases.take()
    _run(server_url, name, "ALTER TABLE managed_tables ADD COLUMN extra int")
    _databases.give_back(name)
    assert _oid(server_url, name) is None
    fresh = _databases.take()
    columns = "SELECT count(*) FROM information_schema.columns WHERE column_name = 'extra'"
    assert _run(server_url, fresh, columns) == 0
    _databases.give_back(fresh)
