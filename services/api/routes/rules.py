"""Auto-management: a catalog's management rules, and a table's opt-out from them.

Rules are read with the viewer role and changed with the admin role on their scope (the
catalog and the rule's namespace glob: a caller whose admin grant is itself a glob may
change rules whose namespace that grant includes, as `Grant.includes` judges it). A rule's
policy is checked, like a namespace's defaults, over the defaults of every namespace of the
catalog it covers. Adoption itself (`lakewarden.catalogs.adoption.adopt`) runs in the
catalog's poller and commit listener; tables already adopted keep their policy when a rule
changes or goes.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Response
from pydantic import ValidationError
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from lakewarden.audit import diff as audit_diff
from lakewarden.auth.grants import Grant, Role, glob_to_like
from lakewarden.catalogs import adoption as rules
from lakewarden.db.models import ManagementRule, NamespacePolicy
from lakewarden.policy.model import effective_policy, validation_problems
from services.api import errors
from services.api.access import Access, AccessDep
from services.api.deps import CatalogDep, Id, RefDep, SessionDep
from services.api.policies import check_policy
from services.api.schemas import OptOutOut, RuleIn, RuleOut, RulePatch

router = APIRouter(prefix="/api/v1/catalogs/{catalog}", tags=["rules"])

NO_RULE = {404: "no such catalog, or the catalog has no such rule"}
# Checking a rule's policy over at most this many namespaces' defaults (the rest: at adoption).
MAX_CHECKED_NAMESPACES = 1000


def _may(access: Access, role: Role, catalog: str, namespace: str) -> bool:
    """Whether the caller has `role` on every namespace the rule's glob covers."""
    if not rules.is_glob(namespace):
        return access.caller.may(role, catalog, namespace)
    return any(g.includes(Grant(role, catalog, namespace)) for g in access.caller.grants)


def _need(access: Access, role: Role, catalog: str, namespace: str, target: str | None) -> None:
    if not rules.is_glob(namespace):
        access.need(role, catalog, namespace, target=target)
        return
    access.catalog, access.namespace = catalog, namespace
    if target is not None:
        access.target = target
    if not _may(access, role, catalog, namespace):
        raise HTTPException(
            403,
            f"this needs the {role} role on every namespace {namespace!r} covers in catalog "
            f"{catalog!r}; {access.actor} has {access.caller.grants_text()}",
        )


def _check_globs(namespace: str, include: list[str], exclude: list[str]) -> None:
    try:
        rules.check_rule(namespace, include, exclude)
    except rules.InvalidRule as exc:
        raise HTTPException(422, str(exc)) from exc


def _check_rule_policy(
    session: Session, catalog: str, namespace: str, overrides: dict[str, Any]
) -> None:
    """422 unless the rule's policy is valid over the defaults of the namespace it names,
    or, for a glob, alone (namespaces without defaults) and over the defaults of each
    namespace of the catalog it covers (as a namespace's defaults are checked)."""
    if not rules.is_glob(namespace):
        check_policy(session, catalog, namespace, overrides, None)
        return
    try:
        effective_policy(overrides, None)
    except ValidationError as exc:
        problems = validation_problems(exc)
        raise HTTPException(422, f"the rule's policy is invalid: {problems}") from exc
    covered = session.scalars(
        select(NamespacePolicy.namespace)
        .where(
            NamespacePolicy.catalog == catalog,
            NamespacePolicy.namespace.like(glob_to_like(namespace), escape="\\"),
        )
        .order_by(NamespacePolicy.namespace)
        .limit(MAX_CHECKED_NAMESPACES)
    )
    for ns in covered:
        check_policy(session, catalog, ns, overrides, None)


def _out(rule: ManagementRule, tables: int) -> RuleOut:
    return RuleOut(
        id=rule.id,
        catalog=rule.catalog,
        namespace=rule.namespace,
        include=list(rule.include),
        exclude=list(rule.exclude),
        policy=rule.policy,
        enabled=rule.enabled,
        managed_tables=tables,
        created_by=rule.created_by,
        created_at=rule.created_at,
        updated_at=rule.updated_at,
    )


def _as_dict(rule: ManagementRule | None) -> dict[str, Any] | None:
    if rule is None:
        return None
    return {
        "namespace": rule.namespace,
        "include": list(rule.include),
        "exclude": list(rule.exclude),
        "policy": rule.policy,
        "enabled": rule.enabled,
    }


def _rule(
    session: Session, access: Access, catalog: str, rule_id: int, *, lock: bool = False
) -> ManagementRule:
    """The rule, if the caller may see it: one they may not is the same 404 as a rule that
    does not exist (a 403 named its namespace)."""
    query = select(ManagementRule).where(
        ManagementRule.id == rule_id, ManagementRule.catalog == catalog
    )
    rule = session.scalars(query.with_for_update() if lock else query).one_or_none()
    if rule is None or not _may(access, Role.viewer, catalog, rule.namespace):
        if rule is not None:
            access.catalog, access.namespace = catalog, rule.namespace  # audited
            access.target = rules.rule_actor(rule_id)
        raise HTTPException(
            404,
            f"catalog {catalog!r} has no management rule {rule_id} (GET "
            f"/api/v1/catalogs/{catalog}/rules lists them)",
        )
    return rule


def _tables_of(session: Session, catalog: str, rule_id: int) -> int:
    return rules.rule_table_counts(session, catalog).get(rule_id, 0)


@router.get("/rules", response_model=list[RuleOut], responses=errors.documented(notes=NO_RULE))
def list_rules(catalog: CatalogDep, session: SessionDep, access: AccessDep) -> list[RuleOut]:
    """The catalog's management rules the caller may see, by id."""
    access.need_somewhere(Role.viewer)
    found = session.scalars(
        select(ManagementRule).where(ManagementRule.catalog == catalog).order_by(ManagementRule.id)
    )
    visible = [r for r in found if _may(access, Role.viewer, catalog, r.namespace)]
    counts = rules.rule_table_counts(session, catalog) if visible else {}
    return [_out(r, counts.get(r.id, 0)) for r in visible]


@router.post(
    "/rules",
    status_code=201,
    response_model=RuleOut,
    responses=errors.documented(409, body=True, notes=NO_RULE),
)
def create_rule(
    catalog: CatalogDep, body: RuleIn, session: SessionDep, access: AccessDep
) -> RuleOut:
    """Manage every table of the catalog the rule covers, with its policy (admin on the
    rule's scope). The catalog's next poll, or a commit notification, adopts them."""
    _check_globs(body.namespace, body.include, body.exclude)
    _need(access, Role.admin, catalog, body.namespace, target=None)
    overrides = body.policy.model_dump(exclude_unset=True)
    _check_rule_policy(session, catalog, body.namespace, overrides)
    rule = ManagementRule(
        catalog=catalog,
        namespace=body.namespace,
        include=body.include,
        exclude=body.exclude,
        policy=overrides,
        enabled=body.enabled,
        created_by=access.actor,
    )
    session.add(rule)
    session.flush()
    session.refresh(rule)
    access.target = rules.rule_actor(rule.id)
    access.change = {"rule": audit_diff(None, _as_dict(rule))}
    return _out(rule, 0)


@router.get("/rules/{rule_id}", response_model=RuleOut, responses=errors.documented(notes=NO_RULE))
def get_rule(catalog: CatalogDep, rule_id: Id, session: SessionDep, access: AccessDep) -> RuleOut:
    rule = _rule(session, access, catalog, rule_id)
    _need(access, Role.viewer, catalog, rule.namespace, target=rules.rule_actor(rule_id))
    return _out(rule, _tables_of(session, catalog, rule_id))


@router.patch(
    "/rules/{rule_id}",
    response_model=RuleOut,
    responses=errors.documented(body=True, notes=NO_RULE),
)
def update_rule(
    catalog: CatalogDep, rule_id: Id, body: RulePatch, session: SessionDep, access: AccessDep
) -> RuleOut:
    """Change the rule (admin on its scope before and after). Tables it adopted keep the
    policy they were given; the change applies to the tables it adopts from now on."""
    rule = _rule(session, access, catalog, rule_id, lock=True)
    target = rules.rule_actor(rule_id)
    _need(access, Role.admin, catalog, rule.namespace, target=target)
    before = _as_dict(rule)
    namespace = rule.namespace if body.namespace is None else body.namespace
    include = list(rule.include) if body.include is None else body.include
    exclude = list(rule.exclude) if body.exclude is None else body.exclude
    _check_globs(namespace, include, exclude)
    _need(access, Role.admin, catalog, namespace, target=target)
    overrides = rule.policy if body.policy is None else body.policy.model_dump(exclude_unset=True)
    _check_rule_policy(session, catalog, namespace, overrides)
    rule.namespace, rule.include, rule.exclude, rule.policy = namespace, include, exclude, overrides
    if body.enabled is not None:
        rule.enabled = body.enabled
    rule.updated_at = func.now()
    session.flush()
    session.refresh(rule)
    access.change = {"rule": audit_diff(before, _as_dict(rule))}
    return _out(rule, _tables_of(session, catalog, rule_id))


@router.delete(
    "/rules/{rule_id}",
    status_code=204,
    responses=errors.as_json(errors.documented(409, notes=NO_RULE)),
)
def delete_rule(
    catalog: CatalogDep,
    rule_id: Id,
    session: SessionDep,
    access: AccessDep,
    retire_tables: Annotated[
        bool,
        Query(
            description="also stop managing the tables the rule adopted (retired, history "
            "kept, open tasks cancelled; another rule that covers one adopts it again)"
        ),
    ] = False,
) -> Response:
    """Remove the rule (admin on its scope): it adopts nothing more. The tables it adopted
    stay managed unless `retire_tables` is set."""
    rule = _rule(session, access, catalog, rule_id, lock=True)
    _need(access, Role.admin, catalog, rule.namespace, target=rules.rule_actor(rule_id))
    change: dict[str, Any] = {"rule": audit_diff(_as_dict(rule), None)}
    if retire_tables:
        retired = rules.retire_rule_tables(session, catalog, rule_id, by=access.actor)
        change["retired_tables"] = len(retired)
    access.change = change
    session.delete(rule)
    session.flush()
    return Response(status_code=204)


# --- Opt-out ---------------------------------------------------------------------------


def _opt_out_out(catalog: str, row: Any) -> OptOutOut:
    return OptOutOut(
        catalog=catalog,
        namespace=row.namespace,
        name=row.name,
        table_id=row.id,
        opt_out=row.opt_out,
        managed=row.retired_at is None,
        retired_reason=row.retired_reason,
        managed_by=row.managed_by,
    )


@router.put(
    "/tables/{namespace}/{name}/opt-out",
    response_model=OptOutOut,
    responses=errors.documented(409, notes={404: "no such catalog"}),
)
def opt_out_table(
    catalog: CatalogDep, ref: RefDep, session: SessionDep, access: AccessDep
) -> OptOutOut:
    """Keep the table out of auto-management (admin, as unregistering): if it is managed,
    it is retired (history kept, open tasks cancelled), and no management rule adopts it
    again until the opt-out is cleared. Works for a table not yet adopted, or not yet
    created, too. Idempotent."""
    access.need(Role.admin, catalog, ref.namespace, target=ref.dotted)
    done = rules.opt_out(session, catalog, ref, by=access.actor)
    access.change = {"opt_out": [False, True]}
    return _opt_out_out(catalog, done.row)


@router.delete(
    "/tables/{namespace}/{name}/opt-out",
    response_model=OptOutOut,
    responses=errors.documented(
        409, notes={404: "no such catalog, or lakewarden has never known the table"}
    ),
)
def clear_table_opt_out(
    catalog: CatalogDep, ref: RefDep, session: SessionDep, access: AccessDep
) -> OptOutOut:
    """Clear the table's opt-out (operator, as registering): a management rule that covers
    it adopts it again at the catalog's next adoption; registering it with POST
    /api/v1/catalogs/{catalog}/tables manages it at once. Idempotent: a table that is not
    opted out is answered as it is."""
    access.need(Role.operator, catalog, ref.namespace, target=ref.dotted)
    row = rules.clear_opt_out(session, catalog, ref)
    if row is None:
        raise HTTPException(
            404,
            f"lakewarden knows no table {ref.dotted} of catalog {catalog!r}, so it is not "
            "opted out",
        )
    access.change = {"opt_out": [True, False]}
    return _opt_out_out(catalog, row)
