"""Namespace policy defaults: every table of the namespace inherits them."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException
from pyiceberg.exceptions import NoSuchTableError
from sqlalchemy import select

from lakewarden import policy_gate
from lakewarden.catalog import IDENTIFIER
from lakewarden.db.models import ManagedTable
from lakewarden.policy import Policy
from lakewarden.tables import lock_namespace, namespace_defaults, set_namespace_defaults
from services.api import errors
from services.api.deps import Identifier, RuntimeDep, SessionDep
from services.api.policies import check_policy
from services.api.schemas import PolicyOut

router = APIRouter(prefix="/api/v1/namespaces", tags=["namespaces"])
Namespace = Identifier  # checked by _check_name (a 422 that says what is wrong)


def _check_name(namespace: str) -> None:
    if not IDENTIFIER.match(namespace):
        raise HTTPException(422, f"invalid namespace {namespace!r}")


@router.get("/{namespace}/policy", response_model=PolicyOut)
def read_defaults(namespace: Namespace, rt: RuntimeDep, session: SessionDep) -> PolicyOut:
    _check_name(namespace)
    row = namespace_defaults(session, rt.settings.catalog_name, namespace)
    if row is None:
        return PolicyOut(namespace=namespace, policy={}, version=0, updated_at=None)
    return PolicyOut(
        namespace=namespace, policy=row.policy, version=row.version, updated_at=row.updated_at
    )


@router.put(
    "/{namespace}/policy",
    response_model=PolicyOut,
    responses=errors.documented(
        409,
        body=True,
        notes={
            422: "invalid request, or a managed table of the namespace would end up with an "
            "invalid policy (the detail says which and why)"
        },
    ),
)
def replace_defaults(
    namespace: Namespace, policy: Policy, rt: RuntimeDep, session: SessionDep
) -> PolicyOut:
    """Set the namespace's defaults. Refused (422) if a managed table of the namespace
    would end up with an invalid policy."""
    _check_name(namespace)
    catalog = rt.settings.catalog_name
    defaults = policy.model_dump(exclude_unset=True)
    # Waits for policy changes and registrations of the namespace's tables in flight, and
    # holds new ones off until this commits: the tables checked below are all there are.
    lock_namespace(session, catalog, namespace, exclusive=True)
    row = set_namespace_defaults(session, catalog, namespace, defaults)
    tables = list(
        session.scalars(
            select(ManagedTable).where(
                ManagedTable.catalog == catalog, ManagedTable.namespace == namespace
            )
        )
    )
    for t in tables:
        try:
            iceberg = rt.catalog.load_table((t.namespace, t.name))
        except NoSuchTableError:
            iceberg = None
        try:
            check_policy(session, catalog, namespace, t.policy, iceberg)
        except HTTPException as exc:
            raise HTTPException(422, f"table {namespace}.{t.name}: {exc.detail}") from exc
    # Every table of the namespace inherits the change: its open tasks obey it at once.
    policy_gate.apply_policy_change(session, tables, actor=f"api:{rt.process_id}")
    return PolicyOut(
        namespace=namespace, policy=row.policy, version=row.version, updated_at=row.updated_at
    )
