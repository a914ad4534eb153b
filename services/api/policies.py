"""Policy checks that need more than the request body: the namespace defaults a table
inherits and the table's schema (columns a policy names must exist). And a stored policy
that no longer validates (stored before a bound was tightened) is reported, never a 500."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import HTTPException
from pydantic import ValidationError
from pyiceberg.table import Table
from sqlalchemy.orm import Session

from lakewarden import holds, readiness
from lakewarden.audit import diff as audit_diff
from lakewarden.auth.grants import Role
from lakewarden.db.models import ManagedTable
from lakewarden.formats.iceberg.sort_order import declared_order
from lakewarden.policy.model import (
    Policy,
    destructive_changes,
    effective_policy,
    validation_problems,
)
from lakewarden.refs import unwritable
from lakewarden.tables import (
    effective_policy_for,
    namespace_defaults,
    namespaces_defaults,
    pauses_of,
)
from services.api.access import Access
from services.api.schemas import HoldOut, KindHoldOut, SignalOut, TableOut


def check_policy(
    session: Session, catalog: str, namespace: str, overrides: dict[str, Any], table: Table | None
) -> Policy:
    """The effective policy for these overrides, or a 422 that says what to fix."""
    ns = namespace_defaults(session, catalog, namespace)
    try:
        policy = effective_policy(overrides, ns.policy if ns else None)
    except ValidationError as exc:
        raise HTTPException(
            422,
            f"with the defaults of namespace {namespace!r}, the policy is invalid: "
            + validation_problems(exc),
        ) from exc
    if table is not None:
        names = {f.name for f in table.schema().fields}
        missing = sorted(policy.columns_used() - names)
        if missing:
            raise HTTPException(
                422,
                f"the policy names columns the table does not have: {', '.join(missing)} "
                f"(columns: {', '.join(sorted(names))})",
            )
        writes = [
            field
            for field, on in (
                ("tags.enabled", policy.tags.enabled),
                ("readiness.tag", policy.readiness.enabled and policy.readiness.tag),
                ("publish.enabled", policy.publish.enabled),
            )
            if on
        ]
        why = unwritable(table, f"{', '.join(writes)} (a commit through pyiceberg)")
        if writes and why is not None:
            raise HTTPException(422, f"{why}: turn it off")
        problem = readiness.policy_problem(table, policy.readiness)
        if problem is not None:
            raise HTTPException(422, problem)
        if policy.clustering.enabled and not policy.clustering.columns:
            order = declared_order(table)
            if order is None or order.problem is not None:
                why = "declares no sort order" if order is None else order.problem
                raise HTTPException(
                    422,
                    f"clustering names no columns, so it would sort by the table's declared "
                    f"sort order, but the table {why}: give clustering.columns",
                )
    return policy


def invalid_stored_policy(row: ManagedTable, exc: ValidationError) -> str:
    """Why the table's stored settings (over its namespace's) are no longer a valid policy,
    and how to fix that."""
    problems = validation_problems(exc)
    return (
        f"the stored policy of {row.namespace}.{row.name} (its own settings over the defaults "
        f"of namespace {row.namespace!r}) is no longer valid: {problems}. Replace it with PUT "
        f"/api/v1/tables/{row.namespace}/{row.name}/policy (or fix the namespace defaults)"
    )


def current_policy(session: Session, row: ManagedTable) -> Policy:
    """The table's effective policy, or a 409 saying why the stored one is invalid."""
    try:
        return effective_policy_for(session, row)
    except ValidationError as exc:
        raise HTTPException(409, invalid_stored_policy(row, exc)) from exc


def table_out(session: Session, row: ManagedTable) -> TableOut:
    return tables_out(session, [row])[0]


def tables_out(session: Session, rows: Sequence[ManagedTable]) -> list[TableOut]:
    """Each table with its effective policy. The namespaces' defaults are read in one
    query for all the rows, and the policy of a table without settings of its own (most
    of them) is validated once per namespace: a page costs two queries, not one per table."""
    defaults = namespaces_defaults(session, rows)
    pauses = {
        i: HoldOut.model_validate(b) for i, b in pauses_of(session, (r.id for r in rows)).items()
    }
    held = holds.holds_of(session, (r.id for r in rows))
    inherited: dict[tuple[str, str], dict[str, Any] | ValidationError] = {}
    out = []
    for row in rows:
        scope = (row.catalog, row.namespace)
        found = inherited.get(scope) if not row.policy else None
        if found is None:
            try:
                found = effective_policy(row.policy, defaults.get(scope)).model_dump()
            except ValidationError as exc:
                found = exc
            if not row.policy:
                inherited[scope] = found
        policy, policy_error = (
            (None, invalid_stored_policy(row, found))
            if isinstance(found, ValidationError)
            else (found, None)
        )
        out.append(
            TableOut(
                id=row.id,
                catalog=row.catalog,
                namespace=row.namespace,
                name=row.name,
                policy=policy,
                policy_error=policy_error,
                policy_overrides=row.policy,
                policy_version=row.policy_version,
                current_snapshot_id=row.current_snapshot_id,
                metadata_location=row.metadata_location,
                managed_by=row.managed_by,
                paused=pauses.get(row.id),
                held=[
                    KindHoldOut.model_validate(holds.shown(session, row, h))
                    for h in held.get(row.id, [])
                ],
                health_score=row.health_score,
                health_measured_at=row.health_measured_at,
                health_signals=None
                if row.health_signals is None
                else [SignalOut.model_validate(signal) for signal in row.health_signals],
                created_at=row.created_at,
                updated_at=row.updated_at,
            )
        )
    return out


def authorize_policy_change(
    access: Access, catalog: str, namespace: str, before: Policy | None, after: Policy, what: str
) -> None:
    """Operators may change a policy; a change that can delete data or history (see
    `destructive_changes`) needs admin on the scope. 403 naming each such change. `before`
    None (a stored policy that no longer validates): compared with the defaults."""
    access.need(Role.operator, catalog, namespace)
    changes = destructive_changes(before or Policy(), after)
    if changes and not access.caller.may(Role.admin, catalog, namespace):
        raise HTTPException(
            403,
            f"{what} {'; '.join(changes)}: that can delete data, so it needs the admin role "
            f"on {catalog}/{namespace}; {access.actor} has {access.caller.grants_text()}",
        )


def record_policy_change(access: Access, before: Policy | None, after: Policy) -> None:
    """The audit row of this request shows the policy's change as a dotted diff."""
    access.change = {
        "policy": audit_diff(before.model_dump() if before else None, after.model_dump())
    }


def policy_or_none(session: Session, row: ManagedTable) -> Policy | None:
    try:
        return effective_policy_for(session, row)
    except ValidationError:
        return None
