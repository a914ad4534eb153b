"""The JDBC catalog's database, when it is not the control plane's, is reached through one
engine per process (`catalog_engine`): polling it again and again opens no new connections."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from lakewarden.db.session import catalog_engine, engine_for
from lakewarden.events.poller import poll_once
from lakewarden.runtime import Runtime


@pytest.fixture
def catalog_db(server_url: str) -> Iterator[str]:
    """A database of its own for the catalog, with an (empty) `iceberg_tables`."""
    name = f"lw_test_catalog_{uuid.uuid4().hex[:10]}"
    admin = make_url(server_url).set(drivername="postgresql", database="postgres")
    with psycopg.connect(admin.render_as_string(hide_password=False), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = make_url(server_url).set(database=name)
    with psycopg.connect(url.set(drivername="postgresql").render_as_string(False)) as conn:
        conn.execute(
            "CREATE TABLE iceberg_tables (catalog_name text, table_namespace text, "
            "table_name text, metadata_location text)"
        )
    yield url.render_as_string(hide_password=False)
    engine_for(url.render_as_string(hide_password=False)).dispose()
    with psycopg.connect(admin.render_as_string(hide_password=False), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _backends(rt: Runtime, database: str) -> set[int]:
    """The server processes (one per connection) open on `database` now."""
    with rt.engine.connect() as conn:
        return set(
            conn.scalars(
                text("SELECT pid FROM pg_stat_activity WHERE datname = :d"), {"d": database}
            )
        )


def test_polling_a_separate_catalog_database_reuses_one_engine(
    rt: Runtime, catalog_db: str
) -> None:
    rt.settings.catalog_database_url = catalog_db  # before the registry reads the settings
    database = make_url(catalog_db).database
    assert database is not None
    engine = catalog_engine(catalog_db, rt.engine)
    assert engine is not rt.engine and engine is catalog_engine(catalog_db, rt.engine)
    poll_once(rt)
    first = _backends(rt, database)
    assert len(first) == 1  # the poll read the catalog's database, and its connection is pooled
    for _ in range(30):
        poll_once(rt)
    # The same one connection: no engine (and pool) built per poll, none left behind.
    assert _backends(rt, database) == first


def test_the_same_database_is_the_control_plane_engine(rt: Runtime) -> None:
    assert catalog_engine(rt.db_url, rt.engine) is rt.engine
