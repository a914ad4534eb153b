"""Migrations are production code: one head, up/down/up with data, equal to the models."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import (
    JSON,
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    Engine,
    Float,
    Integer,
    String,
    Table,
    create_engine,
    inspect,
    text,
)

from lakewarden.db.migrate import alembic_config
from lakewarden.db.models import Base


def test_single_head(db_url: str) -> None:
    heads = ScriptDirectory.from_config(alembic_config(db_url)).get_heads()
    assert len(heads) == 1


def test_upgrade_downgrade_upgrade_with_data(db_url: str) -> None:
    """A row in every table (the models' tables: a new one is covered without a change
    here), then every revision from head down: downgrade it, upgrade it again, and check
    after each step that every row and column the schema still has holds what was written.
    Data in the tables and columns a downgrade drops is gone by design; nothing else may be.
    """
    cfg = alembic_config(db_url)
    engine = create_engine(db_url)
    written = _a_row_in_every_table(engine)
    assert _stored(engine) == written

    for rev in ScriptDirectory.from_config(cfg).walk_revisions():  # head first
        below = rev.down_revision or "base"
        assert isinstance(below, str), "a merge revision: walk its branches one at a time"
        _alembic(cfg, engine, command.downgrade, below)
        kept = _stored(engine)
        assert kept == _project(written, kept), f"downgrade to {below} lost data"
        _alembic(cfg, engine, command.upgrade, rev.revision)
        assert _project(_stored(engine), kept) == kept, f"upgrade to {rev.revision} lost data"
        _alembic(cfg, engine, command.downgrade, below)

    assert not set(Base.metadata.tables) & set(inspect(engine).get_table_names())
    _alembic(cfg, engine, command.upgrade, "head")
    assert _a_row_in_every_table(engine) == _stored(engine)  # the schema is whole again
    engine.dispose()


Rows = dict[str, list[dict[str, Any]]]


def _alembic(cfg: Config, engine: Engine, step: Callable[[Config, str], None], to: str) -> None:
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        step(cfg, to)


def _a_row_in_every_table(engine: Engine) -> Rows:
    """One row per table with every column set (foreign keys to the parent's row, states to
    a value their CHECK allows); the values are distinct, so a column mixed up shows."""
    rows: Rows = {}
    values = itertools.count(1)
    with engine.begin() as conn:
        for table in Base.metadata.sorted_tables:  # parents first
            allowed = _check_values(table)
            row: dict[str, Any] = {}
            for column in table.columns:
                n = next(values)
                fk = next(iter(column.foreign_keys), None)
                if fk is not None and fk.column.table is table:
                    row[column.name] = None  # a row's parent in its own table: none for the first
                elif fk is not None:
                    row[column.name] = rows[fk.column.table.name][0][fk.column.name]
                elif column.name in allowed:
                    row[column.name] = allowed[column.name]
                else:
                    row[column.name] = _value(column, n)
            conn.execute(table.insert().values(row))
            if table.name not in DERIVED:
                rows[table.name] = [row]
    return rows


def _value(column: Column[Any], n: int) -> Any:
    kind = column.type
    if isinstance(kind, Boolean):
        return n % 2 == 0
    if isinstance(kind, Float):
        return n + 0.5
    if isinstance(kind, Integer):
        return 1000 + n
    if isinstance(kind, DateTime):
        return datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=n)
    if isinstance(kind, JSON):
        return {"column": column.name, "n": n}
    if isinstance(kind, String):
        return f"{n}-{column.name}"[: kind.length]
    raise AssertionError(f"no test value for {column} of type {kind!r}: add one here")


def _check_values(table: Table) -> dict[str, str | None]:
    """A value each `column IN ('a', ...)` / `column = 'a'` CHECK of the table allows; of
    an exactly-one-of CHECK (`(a IS NULL) <> (b IS NULL)`), `b` is left NULL (both of a
    both-or-neither one are written)."""
    out: dict[str, str | None] = {}
    for check in table.constraints:
        if isinstance(check, CheckConstraint):
            sql = str(check.sqltext)
            if one_of := re.fullmatch(r"\((\w+) IS NULL\) <> \((\w+) IS NULL\)", sql):
                out[one_of[2]] = None
                continue
            if re.fullmatch(r"\((\w+) IS NULL\) = \((\w+) IS NULL\)", sql):
                continue  # both or neither: both are written
            m = re.fullmatch(r"(\w+) (?:IN \(|= )'(\w+)'.*", sql)
            assert m, f"a CHECK this test cannot satisfy yet: {sql}"
            out[m[1]] = m[2]
    return out


# Rows the database derives from other tables' (migration 0024's metric rollups: written by
# triggers and a backfill), not data a migration must carry over.
DERIVED = {"metric_counts", "metric_deltas", "table_last_success", "table_files_added"}


def _stored(engine: Engine) -> Rows:
    """Every row of the models' tables that exist now, with the columns they have now."""
    live = set(inspect(engine).get_table_names()) - DERIVED
    with engine.connect() as conn:
        return {
            name: [dict(r._mapping) for r in conn.execute(text(f'SELECT * FROM "{name}"'))]
            for name in Base.metadata.tables
            if name in live
        }


def _project(rows: Rows, onto: Rows) -> Rows:
    """`rows` cut down to the tables and columns of `onto`."""
    return {
        name: [{k: v for k, v in row.items() if k in cols} for row in rows[name]]
        for name, stored in onto.items()
        for cols in [set(stored[0]) if stored else set()]
    }


def test_models_match_migrations(db_url: str) -> None:
    engine = create_engine(db_url)
    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"include_name": _ours})
        diff = compare_metadata(ctx, Base.metadata)
    engine.dispose()
    assert diff == []


def _ours(name: str | None, type_: str, parent: dict) -> bool:
    # The Iceberg catalog's own tables live in the same database; they are not ours. The
    # audit log's month partitions are made as time passes (migration 0025), not modelled.
    return not (
        type_ == "table"
        and name is not None
        and (name.startswith("iceberg_") or name.startswith("audit_log_"))
    )
