"""Which code may run on which schema, so an upgrade needs no outage (expand/contract).

The pre-upgrade migration runs while the old pods still serve. A migration that only
expands the schema (a new table, a nullable column, an index) leaves the old code working,
so the old pods must stay ready; one that contracts it (drops or renames what old code
reads) must not let them claim readiness.

Each migration file may declare `oldest_compatible_head = "<revision>"`: code whose newest
migration is that revision, or any later one, still runs correctly on a schema that
includes this migration. A migration without the declaration is taken to break all code
older than itself: the safe default, so a new migration file is correct before anyone
thinks about it.

Code older than the schema cannot read the newer migration files, so the database itself
says which code heads it serves: after every upgrade (migrations/env.py) the list is
written as a comment on `alembic_version` (a comment, not a column: no table changes, and
`alembic upgrade` run by hand records it too). /readyz reads it.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass

from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, text

DECLARATION = "oldest_compatible_head"
_KEY = "lakewarden_compatible_heads"


class BadDeclaration(ValueError):
    """A migration names as compatible a revision that is not one of its ancestors."""


def chain(script: ScriptDirectory, revision: str) -> list[str]:
    """The revisions from the first migration up to `revision`, oldest first."""
    return [r.revision for r in script.iterate_revisions(revision, "base")][::-1]


def compatible_heads(script: ScriptDirectory, revision: str) -> list[str]:
    """The code heads that run correctly on a schema at `revision`, oldest first: from the
    newest floor any migration up to `revision` declares, to `revision` itself."""
    revisions = chain(script, revision)
    floor = 0
    for i, rev in enumerate(revisions):
        declared = getattr(script.get_revision(rev).module, DECLARATION, None)
        if declared is None:
            floor = i  # the default: nothing older than this migration is compatible
            continue
        if declared not in revisions[: i + 1]:
            raise BadDeclaration(
                f"migration {rev} declares {DECLARATION} = {declared!r}, "
                "which is not one of its ancestors"
            )
        floor = max(floor, revisions.index(declared))
    return revisions[floor:]


def record(conn: Connection, script: ScriptDirectory) -> None:
    """Write on the database which code heads its current schema serves."""
    revision = conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
    heads = compatible_heads(script, revision) if revision else []
    comment = json.dumps({_KEY: heads}).replace("'", "''")
    conn.exec_driver_sql(f"COMMENT ON TABLE alembic_version IS '{comment}'")


def recorded(conn: Connection) -> list[str] | None:
    """The code heads the schema serves, as the last migration recorded them (None: never
    recorded, e.g. a schema migrated by a version from before this mechanism)."""
    raw = conn.execute(
        text("SELECT obj_description('alembic_version'::regclass, 'pg_class')")
    ).scalar()
    try:
        heads = json.loads(raw or "")[_KEY]
    except (ValueError, KeyError, TypeError):
        return None
    return [str(h) for h in heads] if isinstance(heads, list) else None


@dataclass(frozen=True)
class SchemaFit:
    ready: bool
    reason: str | None = None


@functools.cache
def _script(location: str) -> ScriptDirectory:
    return ScriptDirectory(location)


def code_script() -> ScriptDirectory:
    """This code's migrations (parsed once per process: a probe calls every few seconds)."""
    from pathlib import Path

    import migrations

    return _script(str(Path(migrations.__file__).parent))


def schema_fit(engine: Engine, script: ScriptDirectory | None = None) -> SchemaFit:
    """Whether this code (its migrations: `script`) may serve on the database's schema."""
    script = script or code_script()
    head = script.get_current_head()
    with engine.connect() as conn:
        exists = conn.execute(text("SELECT to_regclass('alembic_version')")).scalar()
        current = (
            conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
            if exists
            else None
        )
        if current == head:
            return SchemaFit(True)
        if current is None:
            return SchemaFit(False, "no schema: run `lakewarden migrate`")
        known = {r.revision for r in script.walk_revisions()}
        if current in known:
            return SchemaFit(
                False, f"schema at {current}, behind this code's {head}: run `lakewarden migrate`"
            )
        heads = recorded(conn)
    if heads is not None and head in heads:
        return SchemaFit(True)
    serves = f"it serves code at {', '.join(heads)}" if heads else "it records no compatible code"
    return SchemaFit(
        False,
        f"schema at {current} is ahead of this code's {head} and not compatible with it "
        f"({serves}): finish rolling out the new version, or downgrade the schema",
    )
