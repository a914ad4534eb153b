"""Namespace policy defaults: every table of the namespace inherits them."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fastapi import APIRouter, HTTPException
from pydantic import ValidationError

from lakewarden.auth.grants import Role
from lakewarden.catalogs.catalog import find_table, valid_namespace
from lakewarden.db.models import ManagedTable
from lakewarden.isolation import error_line
from lakewarden.policy import gate as policy_gate
from lakewarden.policy.model import Policy, effective_policy, validation_problems
from lakewarden.runtime import Runtime
from lakewarden.tables import (
    lock_namespace,
    namespace_defaults,
    ref_of,
    set_namespace_defaults,
    tables_in_namespace,
)
from services.api import errors
from services.api.access import Access, AccessDep
from services.api.deps import CatalogDep, NamespacePath, RuntimeDep, SessionDep
from services.api.policies import (
    authorize_policy_change,
    check_policy,
    record_policy_change,
)
from services.api.schemas import PolicyOut

router = APIRouter(prefix="/api/v1/catalogs/{catalog}/namespaces", tags=["namespaces"])


def _check_name(namespace: str) -> None:
    if not valid_namespace(namespace):
        raise HTTPException(
            422,
            f"invalid namespace {namespace!r}: one or more levels of letters, digits and "
            "underscores (each starting with a letter or underscore) joined by dots",
        )


# A namespace policy change reads the schema of the tables whose policy now names columns
# it did not before; this many at once.
SCHEMA_READS = 8


@router.get("/{namespace}/policy", response_model=PolicyOut)
def get_namespace_policy(
    catalog: CatalogDep, namespace: NamespacePath, session: SessionDep, access: AccessDep
) -> PolicyOut:
    _check_name(namespace)
    access.need(Role.viewer, catalog, namespace)
    row = namespace_defaults(session, catalog, namespace)
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
    catalog: CatalogDep,
    namespace: NamespacePath,
    policy: Policy,
    rt: RuntimeDep,
    session: SessionDep,
    access: AccessDep,
) -> PolicyOut:
    """Set the namespace's defaults. Refused (422) if a managed table of the namespace
    would end up with an invalid policy."""
    _check_name(namespace)
    access.need(Role.operator, catalog, namespace)
    defaults = policy.model_dump(exclude_unset=True)
    # Waits for policy changes and registrations of the namespace's tables in flight, and
    # holds new ones off until this commits: the tables checked below are all there are.
    lock_namespace(session, catalog, namespace, exclusive=True)
    # What the defaults give, and what each table's policy is, before and after the change:
    # a change that can delete data on any of them needs admin on the namespace.
    found = namespace_defaults(session, catalog, namespace)
    old = dict(found.policy) if found else None  # a copy: the row is changed below
    members = tables_in_namespace(session, catalog, namespace)
    row = set_namespace_defaults(session, catalog, namespace, defaults)
    inherited_before = _effective({}, old)
    inherited = check_policy(session, catalog, namespace, {}, None)
    authorize_policy_change(
        access, catalog, namespace, inherited_before, inherited, "the new defaults"
    )
    record_policy_change(access, inherited_before, inherited)  # the defaults' own change
    _check_members(rt, access, catalog, namespace, members, old, defaults)
    # Every table of the namespace inherits the change: its open tasks obey it at once.
    policy_gate.apply_policy_change(session, members, actor=access.actor)
    return PolicyOut.model_validate(row)


def _effective(overrides: dict[str, Any], defaults: dict[str, Any] | None) -> Policy | None:
    try:
        return effective_policy(overrides, defaults)
    except ValidationError:  # stored settings that no longer validate: compared with none
        return None


def _check_members(
    rt: Runtime,
    access: Access,
    catalog: str,
    namespace: str,
    members: list[ManagedTable],
    old: dict[str, Any] | None,
    new: dict[str, Any],
) -> None:
    """Each table's policy under the new defaults must validate, and its change be allowed
    to the caller. Tables with the same own settings get the same policy, so each distinct
    setting is checked once (a namespace of 10,000 tables has a handful); a table's schema
    is read only when its policy now names columns it did not before."""
    groups: dict[str, list[ManagedTable]] = {}
    for t in members:
        groups.setdefault(json.dumps(t.policy, sort_keys=True), []).append(t)
    to_read: list[tuple[ManagedTable, set[str]]] = []
    for group in groups.values():
        first = group[0]
        before = _effective(first.policy, old)
        try:
            after = effective_policy(first.policy, new)
        except ValidationError as exc:
            raise HTTPException(
                422,
                f"table {namespace}.{first.name}"
                + (f" (and {len(group) - 1} more with the same settings)" if len(group) > 1 else "")
                + ": "
                + validation_problems(exc),
            ) from exc
        what = f"for table {namespace}.{first.name}, the new defaults"
        authorize_policy_change(access, catalog, namespace, before, after, what)
        added = after.columns_used() - (before.columns_used() if before else set())
        # A Hudi or Delta table has no Iceberg schema to read: its columns are not checked.
        to_read += [(t, added) for t in group if t.format == "iceberg"] if added else []
    if not to_read:
        return
    client = rt.catalogs.load(catalog)

    def missing(item: tuple[ManagedTable, set[str]]) -> str | None:
        t, columns = item
        try:
            table = find_table(client, ref_of(t))
        except Exception as exc:  # unreadable metadata: the change cannot be checked
            return f"table {namespace}.{t.name} cannot be read to check ({error_line(exc)})"
        if table is None:
            return None
        absent = sorted(columns - {f.name for f in table.schema().fields})
        if absent:
            return f"table {namespace}.{t.name} has no column {', '.join(absent)}"
        return None

    with ThreadPoolExecutor(SCHEMA_READS, "schema") as pool:
        problems = [p for p in pool.map(missing, to_read) if p]
    if problems:
        more = f" (and {len(problems) - 3} more tables)" if len(problems) > 3 else ""
        raise HTTPException(
            422,
            "the policy names columns not every table has: " + "; ".join(problems[:3]) + more,
        )
