"""Managed tables and namespace defaults: register, look up, change policy, unregister.

A table stores only the policy settings given for it; the effective policy layers
them over its namespace's defaults over the built-in defaults.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from lakewarden.catalog import TableRef
from lakewarden.db.models import ManagedTable, NamespacePolicy, PolicyVersion
from lakewarden.policy import Policy, effective_policy


def get_table(session: Session, catalog: str, ref: TableRef) -> ManagedTable | None:
    return session.scalars(
        select(ManagedTable).where(
            ManagedTable.catalog == catalog,
            ManagedTable.namespace == ref.namespace,
            ManagedTable.name == ref.name,
        )
    ).one_or_none()


def add_table(
    session: Session, catalog: str, ref: TableRef, overrides: dict[str, Any]
) -> ManagedTable:
    row = ManagedTable(catalog=catalog, namespace=ref.namespace, name=ref.name, policy=overrides)
    session.add(row)
    session.flush()
    session.add(PolicyVersion(table_id=row.id, version=1, policy=overrides))
    session.flush()
    return row


def set_policy(session: Session, row: ManagedTable, overrides: dict[str, Any]) -> ManagedTable:
    """Replace the table's own settings, keeping the old ones as a version."""
    row.policy = overrides
    row.policy_version = row.policy_version + 1
    row.updated_at = func.now()
    session.add(PolicyVersion(table_id=row.id, version=row.policy_version, policy=overrides))
    session.flush()
    session.refresh(row)
    return row


def namespace_defaults(session: Session, catalog: str, namespace: str) -> NamespacePolicy | None:
    return session.get(NamespacePolicy, (catalog, namespace))


def set_namespace_defaults(
    session: Session, catalog: str, namespace: str, defaults: dict[str, Any]
) -> NamespacePolicy:
    row = namespace_defaults(session, catalog, namespace)
    if row is None:
        row = NamespacePolicy(catalog=catalog, namespace=namespace, policy=defaults)
        session.add(row)
    else:
        row.policy = defaults
        row.version = row.version + 1
        row.updated_at = func.now()
    session.flush()
    session.refresh(row)
    return row


def effective_policy_for(
    session: Session, row: ManagedTable, overrides: dict[str, Any] | None = None
) -> Policy:
    """The policy in force: the table's settings (or `overrides`) over its namespace's."""
    ns = namespace_defaults(session, row.catalog, row.namespace)
    return effective_policy(
        row.policy if overrides is None else overrides, ns.policy if ns else None
    )


def ref_of(row: ManagedTable) -> TableRef:
    return TableRef(row.namespace, row.name)
