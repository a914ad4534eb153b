"""Upgrades without an outage: the pre-upgrade migration leaves the old API replicas ready
when the new migrations declare them compatible, and unready (with why) when not.

A test-only future migration is added to a copy of the migration scripts and the database
is upgraded with it, as the new version's hook would; /readyz is then asked by this code,
which does not know that migration (it is the old replica)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from fastapi.testclient import TestClient
from sqlalchemy import text

from lakewarden.db import schema_compat
from lakewarden.db.schema_compat import BadDeclaration, code_script, compatible_heads
from lakewarden.runtime import Runtime

_head = code_script().get_current_head()
assert _head is not None
HEAD: str = _head
FUTURE = "9001"  # a revision no real migration will take


def future_scripts(tmp: Path, declaration: str | None) -> Config:
    """This repo's migrations plus one expanding migration after the head, declaring
    `declaration` compatible (none: left out, the default)."""
    import migrations

    src = Path(migrations.__file__).parent
    dst = tmp / "migrations"
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
    declared = "" if declaration is None else f"oldest_compatible_head = {declaration!r}\n"
    (dst / "versions" / f"{FUTURE}_future.py").write_text(
        f'"""test-only: a future expanding migration"""\n'
        f"from alembic import op\n"
        f"import sqlalchemy as sa\n"
        f"revision = {FUTURE!r}\n"
        f"down_revision = {HEAD!r}\n"
        f"branch_labels = None\n"
        f"depends_on = None\n"
        f"{declared}"
        f"def upgrade() -> None:\n"
        f"    op.create_table('future_things', sa.Column('id', sa.Integer, primary_key=True))\n"
        f"def downgrade() -> None:\n"
        f"    op.drop_table('future_things')\n"
    )
    cfg = Config()
    cfg.set_main_option("script_location", str(dst))
    return cfg


def upgrade_to_future(rt: Runtime, tmp: Path, declaration: str | None) -> None:
    cfg = future_scripts(tmp, declaration)
    cfg.set_main_option("sqlalchemy.url", rt.db_url.replace("%", "%%"))
    command.upgrade(cfg, "head")
    with rt.engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == FUTURE


def test_at_head_is_ready(client: TestClient) -> None:
    assert client.get("/readyz").json() == {"status": "ready"}


def test_schema_ahead_and_declared_compatible_keeps_old_code_ready(
    rt: Runtime, client: TestClient, tmp_path: Path
) -> None:
    upgrade_to_future(rt, tmp_path, declaration=HEAD)
    r = client.get("/readyz")
    assert r.status_code == 200, r.json()
    assert r.json() == {"status": "ready"}


def test_schema_ahead_without_declaration_is_unready_with_why(
    rt: Runtime, client: TestClient, tmp_path: Path
) -> None:
    upgrade_to_future(rt, tmp_path, declaration=None)
    r = client.get("/readyz")
    assert r.status_code == 503
    reason = r.json()["reason"]
    assert f"schema at {FUTURE} is ahead of this code's {HEAD}" in reason
    assert "not compatible" in reason and f"serves code at {FUTURE}" in reason


def test_schema_behind_is_unready(rt: Runtime, client: TestClient) -> None:
    first = schema_compat.chain(code_script(), HEAD)[0]
    with rt.engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = :v"), {"v": first})
    r = client.get("/readyz")
    assert r.status_code == 503
    assert f"schema at {first}, behind this code's {HEAD}" in r.json()["reason"]


def test_compatible_heads_walk_the_declarations(tmp_path: Path) -> None:
    script = ScriptDirectory.from_config(future_scripts(tmp_path, declaration=HEAD))
    assert compatible_heads(script, FUTURE)[-2:] == [HEAD, FUTURE]
    assert compatible_heads(script, HEAD)[-1] == HEAD


def test_default_is_incompatible(tmp_path: Path) -> None:
    script = ScriptDirectory.from_config(future_scripts(tmp_path, declaration=None))
    assert compatible_heads(script, FUTURE) == [FUTURE]


def test_declaring_a_non_ancestor_fails_loudly(tmp_path: Path) -> None:
    script = ScriptDirectory.from_config(future_scripts(tmp_path, declaration="nope"))
    with pytest.raises(BadDeclaration, match="not one of its ancestors"):
        compatible_heads(script, FUTURE)


def test_this_repos_migrations_declare_only_their_ancestors() -> None:
    """Guards every real migration file, a new one included: a declaration naming anything
    but an ancestor fails here, not at an operator's `lakewarden migrate`."""
    script = code_script()
    served = compatible_heads(script, HEAD)
    assert served[-1] == HEAD
    assert served == schema_compat.chain(script, HEAD)[-len(served) :]
