"""Two replicas running `lakewarden migrate` at once on a fresh database both succeed: the
migration lock makes them take turns, and the later one finds everything in place."""

from __future__ import annotations

import multiprocessing
import traceback
from pathlib import Path
from typing import Any

import pytest
from conftest import make_test_runtime
from sqlalchemy import create_engine, text

from lakewarden.db.locks import DBLocks, session_lock
from lakewarden.db.migrate import migrate, schema_is_current

REPLICAS = 2


@pytest.fixture
def fresh_db_url(db_url: str) -> str:
    """A database emptied of everything migrate makes: no schema, no catalog tables, no
    trigger (they all live in the public schema)."""
    engine = create_engine(db_url)
    with engine.begin() as conn:
        conn.execute(text("DROP SCHEMA public CASCADE"))
        conn.execute(text("CREATE SCHEMA public"))
    engine.dispose()
    return db_url


def _replica(url: str, tmp: str, ready: Any, errors: Any) -> None:
    """A `lakewarden migrate` process: everything imported and connected, then all replicas
    start migrating at the same moment."""
    try:
        rt = make_test_runtime(url, Path(tmp), role="migrate")
        with rt.engine.connect():
            pass
        ready.wait(timeout=60)
        migrate(rt)
    except BaseException:
        errors.put(traceback.format_exc())
        raise


def test_replicas_migrating_at_once_both_succeed(fresh_db_url: str, tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    ready, errors = ctx.Barrier(REPLICAS), ctx.Queue()
    procs = [
        ctx.Process(target=_replica, args=(fresh_db_url, str(tmp_path), ready, errors))
        for _ in range(REPLICAS)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=180)
    failures = []
    while not errors.empty():
        failures.append(errors.get())
    assert not failures, "\n".join(failures)
    assert [p.exitcode for p in procs] == [0] * REPLICAS

    engine = create_engine(fresh_db_url)
    try:
        assert schema_is_current(engine)
        with engine.connect() as conn:
            assert conn.execute(text("SELECT to_regclass('iceberg_tables')")).scalar()
            triggers = conn.execute(
                text("SELECT count(*) FROM pg_trigger WHERE tgname = 'lakewarden_commit_notify'")
            ).scalar()
            assert triggers == 1
    finally:
        engine.dispose()


def test_the_migration_lock_is_held_for_the_block_and_released_after(db_url: str) -> None:
    engine = create_engine(db_url, pool_size=1, max_overflow=0)  # the lock's connection is reused
    other = create_engine(db_url)
    try_lock = text("SELECT pg_try_advisory_lock(hashtextextended(:k, 0))")
    unlock = text("SELECT pg_advisory_unlock(hashtextextended(:k, 0))")
    key = {"k": DBLocks.MIGRATIONS.key()}
    try:
        with session_lock(engine, DBLocks.MIGRATIONS), other.connect() as conn:
            assert conn.execute(try_lock, key).scalar() is False
        with other.connect() as conn:
            assert conn.execute(try_lock, key).scalar() is True
            conn.execute(unlock, key)
    finally:
        engine.dispose()
        other.dispose()
