"""Managed-table repository: register, look up, change policy, unregister."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from lakewarden.catalog import TableRef
from lakewarden.db.models import ManagedTable, PolicyVersion


def get_table(session: Session, catalog: str, ref: TableRef) -> ManagedTable | None:
    return session.scalars(
        select(ManagedTable).where(
            ManagedTable.catalog == catalog,
            ManagedTable.namespace == ref.namespace,
            ManagedTable.name == ref.name,
        )
    ).one_or_none()


def add_table(
    session: Session, catalog: str, ref: TableRef, policy: dict[str, Any]
) -> ManagedTable:
    row = ManagedTable(catalog=catalog, namespace=ref.namespace, name=ref.name, policy=policy)
    session.add(row)
    session.flush()
    session.add(PolicyVersion(table_id=row.id, version=1, policy=policy))
    session.flush()
    return row


def set_policy(session: Session, row: ManagedTable, policy: dict[str, Any]) -> ManagedTable:
    """Replace the policy, keeping the old one as a version."""
    row.policy = policy
    row.policy_version = row.policy_version + 1
    row.updated_at = func.now()
    session.add(PolicyVersion(table_id=row.id, version=row.policy_version, policy=policy))
    session.flush()
    session.refresh(row)
    return row


def ref_of(row: ManagedTable) -> TableRef:
    return TableRef(row.namespace, row.name)
