"""A round commits once, at its end: a stray commit inside it raises and nothing of the
round is kept; the round's own end commits (lakewarden.db.session)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text

from lakewarden.db.session import StrayCommit, round_connection, round_transaction


@pytest.fixture
def engine(tmp_path: Path) -> Engine:
    engine = create_engine(f"sqlite:///{tmp_path / 'db'}")
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE t (x INTEGER)"))
    return engine


def _rows(engine: Engine) -> list[int]:
    with engine.connect() as conn:
        return list(conn.scalars(text("SELECT x FROM t ORDER BY x")))


def test_a_round_commits_at_its_end(engine: Engine) -> None:
    with round_transaction(engine) as s:
        s.execute(text("INSERT INTO t VALUES (1)"))
    with round_connection(engine) as conn:
        conn.execute(text("INSERT INTO t VALUES (2)"))
    assert _rows(engine) == [1, 2]


def test_a_stray_commit_in_a_session_round_raises_and_keeps_nothing(engine: Engine) -> None:
    with pytest.raises(StrayCommit), round_transaction(engine) as s:
        s.execute(text("INSERT INTO t VALUES (1)"))
        s.commit()
    assert _rows(engine) == []


def test_a_stray_commit_in_a_connection_round_raises_and_keeps_nothing(engine: Engine) -> None:
    with pytest.raises(StrayCommit), round_connection(engine) as conn:
        conn.execute(text("INSERT INTO t VALUES (1)"))
        conn.commit()
    assert _rows(engine) == []


def test_a_failed_round_rolls_back(engine: Engine) -> None:
    with pytest.raises(ValueError), round_transaction(engine) as s:
        s.execute(text("INSERT INTO t VALUES (1)"))
        raise ValueError("the round failed")
    assert _rows(engine) == []
