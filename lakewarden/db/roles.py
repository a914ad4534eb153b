"""The services' database role, kept apart from the schema's owner, so the audit trail
cannot be switched off by the role the API, worker and scheduler connect as.

`lakewarden migrate` runs as the owner (LAKEWARDEN_MIGRATION_DATABASE_URL; the embedded
Postgres: its superuser) and grants the services' role (LAKEWARDEN_DATABASE_URL's user;
the embedded Postgres: `lakewarden_app`) what they need and no more: the rows of every
table and its sequences, but on audit_log only INSERT and SELECT, and on alembic_version
SELECT. Not owning audit_log, that role cannot `ALTER TABLE audit_log DISABLE TRIGGER`,
drop the append-only trigger or TRUNCATE; not a superuser, it cannot `SET
session_replication_role = replica` (which skips every trigger). A `SET ROLE` by an owner
would not do: any SQL the application runs could `RESET ROLE`. Migrate creates the
services' role when it is missing (`ensure_login_role`), so operators set two URLs only.
"""

from __future__ import annotations

import logging

import psycopg
from psycopg import sql
from sqlalchemy import URL, Connection, text

log = logging.getLogger(__name__)

# Tables the services append to and read, never change.
APPEND_ONLY = ("audit_log",)
# Tables the services read only (the schema's version, written by migrate).
READ_ONLY = ("alembic_version",)


def current_role(conn: Connection) -> str:
    return str(conn.execute(text("SELECT current_user")).scalar_one())


def ensure_login_role(conn: Connection, url: URL) -> None:
    """Create the services' role of `url` (LOGIN with the URL's password, no superuser,
    no CREATEDB or CREATEROLE) when it does not exist yet: operators give migrate the two
    URLs and nothing else. The owner needs CREATEROLE for that; else the error says what to
    run. Only the password's SCRAM verifier reaches the server (and its logs)."""
    role = str(url.username)
    exists = conn.execute(text("SELECT 1 FROM pg_roles WHERE rolname = :r"), {"r": role}).first()
    if exists:
        return
    who = conn.dialect.identifier_preparer.quote(role)
    if not url.password:
        raise RuntimeError(
            f"the services' database role {role!r} (LAKEWARDEN_DATABASE_URL) does not exist: "
            f"create it (CREATE ROLE {who} LOGIN PASSWORD '…'), or put its password in the URL "
            "and migrate creates it"
        )
    # On the driver's connection (the same transaction): the verifier is a literal, not
    # something for SQLAlchemy's text() to read bind parameters in.
    driver = conn.connection.driver_connection
    assert isinstance(driver, psycopg.Connection)
    verifier = driver.pgconn.encrypt_password(
        str(url.password).encode(), role.encode(), b"scram-sha-256"
    ).decode()
    driver.execute(
        sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD {}").format(
            sql.Identifier(role), sql.Literal(verifier)
        )
    )
    log.info("created the services' database role %s", role)


def grant_services_role(conn: Connection, role: str) -> None:
    """Grant `role` the services' rights on every table and sequence of the current schema
    (run by its owner after each upgrade: a new table is covered by the next migrate)."""
    q = conn.dialect.identifier_preparer
    who = q.quote(role)
    schema = q.quote(str(conn.execute(text("SELECT current_schema()")).scalar_one()))
    database = q.quote(str(conn.execute(text("SELECT current_database()")).scalar_one()))
    for statement in (
        f"GRANT CONNECT ON DATABASE {database} TO {who}",
        f"GRANT USAGE ON SCHEMA {schema} TO {who}",
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {who}",
        f"GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA {schema} TO {who}",
        *(f"REVOKE UPDATE, DELETE, TRUNCATE ON {q.quote(t)} FROM {who}" for t in APPEND_ONLY),
        *(f"REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON {q.quote(t)} FROM {who}" for t in READ_ONLY),
        # An append-only table's partitions (audit_log's months, migration 0025): nothing
        # directly; rows go in and are read through the parent, whose rights are checked.
        *(f"REVOKE ALL ON {q.quote(p)} FROM {who}" for p in _partitions(conn, APPEND_ONLY)),
        # Making next months' audit partitions and dropping those past the owner's retention.
        f"GRANT EXECUTE ON FUNCTION lakewarden_audit_maintain() TO {who}",
    ):
        conn.execute(text(statement))
    warn_if_unsafe(conn, role)


def _partitions(conn: Connection, tables: tuple[str, ...]) -> list[str]:
    return [
        str(name)
        for (name,) in conn.execute(
            text(
                "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                "WHERE i.inhparent IN (SELECT to_regclass(t) FROM unnest(CAST(:t AS text[])) t) "
                "ORDER BY 1"
            ),
            {"t": list(tables)},
        )
    ]


def warn_if_unsafe(conn: Connection, role: str) -> None:
    """Log what would let `role` switch the audit trail off anyway: being a superuser
    (or bypassing row security), or owning audit_log (one role for migrate and services)."""
    row = conn.execute(
        text(
            "SELECT r.rolsuper OR r.rolbypassrls AS super, "
            "pg_has_role(r.oid, c.relowner, 'USAGE') AS owns "
            "FROM pg_roles r, pg_class c "
            "WHERE r.rolname = :role AND c.oid = to_regclass('audit_log')"
        ),
        {"role": role},
    ).one_or_none()
    if row is None:
        return
    if row.super:
        log.warning(
            "the services' database role %s is a superuser: it can switch the audit trail's "
            "trigger off; connect the services as a role of their own (docs/security.md)",
            role,
        )
    elif row.owns:
        log.warning(
            "the services' database role %s owns audit_log: it can switch the audit trail's "
            "trigger off; set LAKEWARDEN_MIGRATION_DATABASE_URL to the owner and "
            "LAKEWARDEN_DATABASE_URL to another role (docs/security.md)",
            role,
        )
