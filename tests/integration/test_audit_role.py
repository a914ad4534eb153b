"""The services cannot switch the audit trail off: they connect as a role that owns
nothing (the embedded Postgres's `lakewarden_app`, which `migrate`, run as the owner,
grants what the services need). As that role, disabling the append-only trigger, skipping
triggers with session_replication_role, and changing or deleting audit rows all fail;
the services' own work (tokens, audit rows, the JDBC catalog's commits and their trigger)
still succeeds."""

from __future__ import annotations

import json
import stat
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest
from conftest import TEST_PG_DIR, make_test_runtime, serve
from helpers import append_batches, bearer, issue_token, make_table
from sqlalchemy import make_url

from lakewarden.db.embedded import (
    SERVICES_PASSWORD_FILE,
    SERVICES_USER,
    _any_free_port,
    services_url,
)
from lakewarden.db.migrate import migrate
from lakewarden.db.session import resolve_database_url, resolve_migration_url
from lakewarden.db.trigger import CHANNEL
from lakewarden.runtime import Runtime
from lakewarden.settings import Settings

ATTACKS = (
    "ALTER TABLE audit_log DISABLE TRIGGER ALL",
    "ALTER TABLE audit_log DISABLE TRIGGER audit_log_append_only",
    "DROP TRIGGER audit_log_append_only ON audit_log",
    "SET session_replication_role = replica",
    "UPDATE audit_log SET actor = 'someone else'",
    "DELETE FROM audit_log",
    "TRUNCATE audit_log",
    # Its month partitions (migration 0025): nothing through them, and neither the
    # retention nor a partition the services' role could change or drop itself.
    "DELETE FROM audit_log_default",
    "TRUNCATE audit_log_default",
    "DROP TABLE audit_log_default",
    f"DELETE FROM audit_log_p{datetime.now(UTC):%Y%m}",
    f"DROP TABLE audit_log_p{datetime.now(UTC):%Y%m}",
    "SELECT lakewarden_audit_partition(now() - interval '5 years')",
    "CREATE OR REPLACE FUNCTION lakewarden_audit_retention_months() RETURNS int "
    "LANGUAGE sql IMMUTABLE AS 'SELECT 1'",
)


@pytest.fixture
def services_rt(server_url: str, db_url: str, tmp_path: Path) -> Iterator[Runtime]:
    """A runtime on this test's database as the embedded server's services role, migrated
    (granted) by the owner as `lakewarden migrate` does."""
    services = services_url(TEST_PG_DIR, server_url)
    url = make_url(services).set(database=make_url(db_url).database)
    runtime = make_test_runtime(
        url.render_as_string(hide_password=False), tmp_path, migration_database_url=db_url
    )
    migrate(runtime)
    yield runtime
    runtime.engine.dispose()


def _psycopg(url: str) -> psycopg.Connection:
    plain = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    return psycopg.connect(plain, autocommit=True)


def test_the_embedded_server_gives_the_services_a_role_that_owns_nothing(
    own_pg_dir: Path,
) -> None:
    # Its own server: the session's runs without fsync, and a durable ensure_server on its
    # data dir would restart it under every other test's connections.
    settings = Settings(data_dir=own_pg_dir, embedded_pg_port=_any_free_port())
    services, owner = resolve_database_url(settings), resolve_migration_url(settings)
    assert make_url(services).username == SERVICES_USER
    assert make_url(owner).username not in (None, SERVICES_USER)
    mode = (own_pg_dir / "pg" / SERVICES_PASSWORD_FILE).stat().st_mode
    assert stat.S_IMODE(mode) == 0o600
    with _psycopg(services) as conn:
        row = conn.execute(
            "SELECT rolsuper, rolcreatedb, rolcreaterole, rolbypassrls FROM pg_roles "
            "WHERE rolname = current_user"
        ).fetchone()
    assert row == (False, False, False, False)


def test_the_services_role_cannot_switch_the_audit_trail_off(
    services_rt: Runtime, db_url: str
) -> None:
    # The services' own work: a token, a change through the API, its audit row.
    secret = issue_token(services_rt, name="ops")
    with serve(services_rt) as client:
        r = client.post(
            "/api/v1/tokens", json={"name": "ci", "grants": ["viewer"]}, headers=bearer(secret)
        )
        assert r.status_code == 201, r.text
        audit = client.get("/api/v1/audit", headers=bearer(secret)).json()["items"]
        assert [e["actor"] for e in audit] == ["token:ops"]

    with _psycopg(services_rt.db_url) as conn:
        assert conn.execute("SELECT current_user").fetchone() == (SERVICES_USER,)
        for attack in ATTACKS:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(attack)
        assert conn.execute("SELECT count(*) FROM audit_log").fetchone() == (1,)
        # What it may do: have the coming months made (the leader's call).
        assert conn.execute("SELECT lakewarden_audit_maintain()").fetchone() == (0,)
    with _psycopg(db_url) as owner:  # the owner's trigger is still on
        assert owner.execute(
            "SELECT tgenabled FROM pg_trigger WHERE tgname = 'audit_log_append_only'"
        ).fetchone() == ("O",)


def test_the_catalog_and_its_commit_trigger_work_as_the_services_role(
    services_rt: Runtime,
) -> None:
    """pyiceberg (as Spark's JDBC catalog does) creates, commits to and drops tables in
    iceberg_tables as the services' role; the owner's commit trigger still notifies."""
    with _psycopg(services_rt.db_url) as listener:
        listener.execute(f"LISTEN {CHANNEL}")
        table = make_table(services_rt, "sales", "orders")
        append_batches(table, 1)
        services_rt.catalog.drop_table("sales.orders")
        # create; the partition spec's commit and the append's; drop
        ops = [json.loads(n.payload)["op"] for n in listener.notifies(timeout=5, stop_after=4)]
    assert ops == ["create", "commit", "commit", "drop"]


def test_the_services_role_mints_a_token_on_a_migrated_schema(
    services_rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`lakewarden token create` as the services' role, with no owner's URL (the compose
    stack's writer): the schema is at head, so nothing is migrated and the token is made
    (migrating as a role that owns nothing failed: must be owner of alembic_version)."""
    from typer.testing import CliRunner

    from cli.main import app
    from lakewarden.settings import get_settings

    monkeypatch.setenv("LAKEWARDEN_DATABASE_URL", services_rt.db_url)
    monkeypatch.delenv("LAKEWARDEN_MIGRATION_DATABASE_URL", raising=False)
    get_settings.cache_clear()
    try:
        made = CliRunner().invoke(app, ["token", "create", "--admin", "--name", "writer"])
    finally:
        get_settings.cache_clear()
    assert made.exit_code == 0, made.output
    with _psycopg(services_rt.db_url) as conn:
        assert conn.execute("SELECT name FROM api_tokens").fetchall() == [("writer",)]


def test_migrate_creates_the_services_role_of_an_external_database(
    db_url: str, tmp_path: Path
) -> None:
    """An external Postgres: two URLs, LAKEWARDEN_MIGRATION_DATABASE_URL (the owner) and
    LAKEWARDEN_DATABASE_URL (a role that does not exist yet). migrate creates the latter
    with the URL's password and grants it; the services then work as it, and cannot
    switch the trail off."""
    role = f"lw_test_services_{uuid.uuid4().hex[:8]}"
    services = make_url(db_url).set(username=role, password="s3cret-Pass")
    runtime = make_test_runtime(
        services.render_as_string(hide_password=False),
        tmp_path,
        migration_database_url=db_url,
    )
    try:
        migrate(runtime)
        issue_token(runtime, name="ops")
        with _psycopg(runtime.db_url) as conn:
            assert conn.execute("SELECT current_user").fetchone() == (role,)
            for attack in ATTACKS:
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute(attack)
        migrate(runtime)  # again: the role exists, nothing fails
    finally:
        runtime.engine.dispose()
        with _psycopg(db_url) as owner:
            owner.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                [role],
            )
            owner.execute(f'DROP OWNED BY "{role}"')
            owner.execute(f'DROP ROLE "{role}"')
