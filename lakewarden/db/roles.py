"""The services' database role, kept apart from the schema's owner, so the audit trail
cannot be switched off by the role the API, worker and scheduler connect as.

`lakewarden migrate` runs as the owner (LAKEWARDEN_MIGRATION_DATABASE_URL; the embedded
Postgres: its superuser) and grants the services' role (LAKEWARDEN_DATABASE_URL's user;
the embedded Postgres: `lakewarden_app`) what they need and no more: the rows of every
table and its sequences, but on audit_log only INSERT and SELECT, and on alembic_version
SELECT. Not owning audit_log, that role cannot `ALTER TABLE audit_log DISABLE TRIGGER`,
drop the append-only trigger or TRUNCATE; not a superuser, it cannot `SET
session_replication_role = replica` (which skips every trigger). A `SET ROLE` by an owner
would not do: any SQL the application runs could `RESET ROLE`.
"""

from __future__ import annotations

import logging

from sqlalchemy import Connection, text

log = logging.getLogger(__name__)

# Tables the services append to and read, never change.
APPEND_ONLY = ("audit_log",)
# Tables the services read only (the schema's version, written by migrate).
READ_ONLY = ("alembic_version",)


def current_role(conn: Connection) -> str:
    return str(conn.execute(text("SELECT current_user")).scalar_one())


def grant_services_role(conn: Connection, role: str) -> None:
    """Grant `role` the services' rights on every table and sequence of the current schema
    (run by its owner after each upgrade: a new table is covered by the next migrate)."""
    q = conn.dialect.identifier_preparer
    who = q.quote(role)
    schema = q.quote(str(conn.execute(text("SELECT current_schema()")).scalar_one()))
    for statement in (
        f"GRANT USAGE ON SCHEMA {schema} TO {who}",
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {who}",
        f"GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA {schema} TO {who}",
        *(f"REVOKE UPDATE, DELETE, TRUNCATE ON {q.quote(t)} FROM {who}" for t in APPEND_ONLY),
        *(f"REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON {q.quote(t)} FROM {who}" for t in READ_ONLY),
    ):
        conn.execute(text(statement))
    warn_if_unsafe(conn, role)


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
            "trigger off; connect the services as a role of their own (README, Security)",
            role,
        )
    elif row.owns:
        log.warning(
            "the services' database role %s owns audit_log: it can switch the audit trail's "
            "trigger off; set LAKEWARDEN_MIGRATION_DATABASE_URL to the owner and "
            "LAKEWARDEN_DATABASE_URL to another role (README, Security)",
            role,
        )
