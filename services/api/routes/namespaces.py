"""Namespace policy defaults: every table of the namespace inherits them."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException
from pydantic import ValidationError

from lakewarden import policy_gate
from lakewarden.auth.grants import Role
from lakewarden.catalog import IDENTIFIER, find_table
from lakewarden.policy import Policy, effective_policy
from lakewarden.tables import (
    lock_namespace,
    namespace_defaults,
    ref_of,
    set_namespace_defaults,
    tables_in_namespace,
)
from services.api import errors
from services.api.access import AccessDep
from services.api.deps import Identifier, RuntimeDep, SessionDep
from services.api.policies import (
    authorize_policy_change,
    check_policy,
    policy_or_none,
    record_policy_change,
)
from services.api.schemas import PolicyOut

router = APIRouter(prefix="/api/v1/namespaces", tags=["namespaces"])
Namespace = Identifier  # checked by _check_name (a 422 that says what is wrong)


def _check_name(namespace: str) -> None:
    if not IDENTIFIER.match(namespace):
        raise HTTPException(422, f"invalid namespace {namespace!r}")


@router.get("/{namespace}/policy", response_model=PolicyOut)
def get_namespace_policy(
    namespace: Namespace, rt: RuntimeDep, session: SessionDep, access: AccessDep
) -> PolicyOut:
    _check_name(namespace)
    access.need(Role.viewer, rt.settings.catalog_name, namespace)
    row = namespace_defaults(session, rt.settings.catalog_name, namespace)
    if row is None:
        return PolicyOut(namespace=namespace, policy={}, version=0, updated_at=None)
    return PolicyOut.model_validate(row)


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
def put_namespace_policy(
    namespace: Namespace, policy: Policy, rt: RuntimeDep, session: SessionDep, access: AccessDep
) -> PolicyOut:
    """Set the namespace's defaults. Refused (422) if a managed table of the namespace
    would end up with an invalid policy."""
    _check_name(namespace)
    catalog = rt.settings.catalog_name
    access.need(Role.operator, catalog, namespace)
    defaults = policy.model_dump(exclude_unset=True)
    # Waits for policy changes and registrations of the namespace's tables in flight, and
    # holds new ones off until this commits: the tables checked below are all there are.
    lock_namespace(session, catalog, namespace, exclusive=True)
    # What the defaults give, and what each table's policy is, before and after the change:
    # a change that can delete data on any of them needs admin on the namespace.
    old = namespace_defaults(session, catalog, namespace)
    members = tables_in_namespace(session, catalog, namespace)
    before = {t.id: policy_or_none(session, t) for t in members}
    try:
        inherited_before: Policy | None = effective_policy({}, old.policy if old else None)
    except ValidationError:  # stored defaults that no longer validate: compared with none
        inherited_before = None
    row = set_namespace_defaults(session, catalog, namespace, defaults)
    inherited = check_policy(session, catalog, namespace, {}, None)
    authorize_policy_change(
        access, catalog, namespace, inherited_before, inherited, "the new defaults"
    )
    record_policy_change(access, inherited_before, inherited)  # the defaults' own change
    for t in members:
        iceberg = find_table(rt.catalog, ref_of(t))
        try:
            after = check_policy(session, catalog, namespace, t.policy, iceberg)
        except HTTPException as exc:
            raise HTTPException(422, f"table {namespace}.{t.name}: {exc.detail}") from exc
        what = f"for table {namespace}.{t.name}, the new defaults"
        authorize_policy_change(access, catalog, namespace, before.get(t.id), after, what)
    # Every table of the namespace inherits the change: its open tasks obey it at once.
    policy_gate.apply_policy_change(session, members, actor=access.actor)
    return PolicyOut.model_validate(row)
