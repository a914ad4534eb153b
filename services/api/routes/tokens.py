"""API tokens: create (the secret is shown once), list, revoke. Admin only.

A token expires within settings.token_max_days and within the token that mints it, is
owned by its minter (only an admin of everything names another owner), and is revoked
with the token that minted it."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException

from lakewarden.auth import tokens
from lakewarden.auth.grants import InvalidGrant, Role, parse_grants
from lakewarden.db.models import ApiToken
from services.api import errors
from services.api.access import AccessDep
from services.api.deps import Id, RuntimeDep, SessionDep
from services.api.schemas import TokenCreated, TokenIn, TokenOut

router = APIRouter(prefix="/api/v1/tokens", tags=["access"])


@router.post(
    "",
    status_code=201,
    response_model=TokenCreated,
    responses=errors.documented(409, body=True),
)
def create_token(
    body: TokenIn, session: SessionDep, access: AccessDep, rt: RuntimeDep
) -> TokenCreated:
    """A new token with the given grants, each within the caller's own admin grants.
    The response holds the secret: it is shown this once and stored only as a hash."""
    try:
        grants = parse_grants(body.grants)
    except InvalidGrant as exc:
        raise HTTPException(422, str(exc)) from exc
    access.need_somewhere(Role.admin)
    beyond = [str(g) for g in grants if not access.caller.may_grant(g)]
    if beyond:
        raise HTTPException(
            403,
            f"handing out {', '.join(beyond)} needs the admin role on all it covers: a token "
            f"gets at most its creator's admin grants; {access.actor} has "
            f"{access.caller.grants_text()}",
        )
    owner = body.owner or access.actor
    if owner != access.actor and not access.caller.may_everywhere(Role.admin):
        raise HTTPException(
            403,
            f"owner {owner!r}: a token you mint is owned by you ({access.actor}); naming "
            "another owner needs the admin role on everything: leave owner out",
        )
    parent = session.get(ApiToken, access.caller.token_id) if access.caller.token_id else None
    parent_expires = parent.expires_at if parent else None
    max_days = rt.settings.token_max_days
    try:
        expires = (
            tokens.expiry(body.expires_in_days, max_days, parent_expires)
            if "expires_in_days" in body.model_fields_set
            else tokens.default_expiry(max_days, parent_expires)
        )
    except tokens.TokenLifetimeError as exc:
        raise HTTPException(422, str(exc)) from exc
    token, secret = tokens.issue(
        session,
        name=body.name,
        owner=owner,
        grants=grants,
        created_by=access.actor,
        expires_at=expires,
        parent_id=parent.id if parent else None,
    )
    access.target = f"token {token.id} ({token.name})"
    access.change = {
        "token": {
            "grants": [str(g) for g in grants],
            "expires_at": str(expires),
            "owner": owner,
            "parent_id": token.parent_id,
        }
    }
    return TokenCreated(**TokenOut.of(token).model_dump(), secret=secret)


@router.get("", response_model=list[TokenOut])
def list_tokens(
    session: SessionDep, access: AccessDep, include_revoked: bool = False
) -> list[TokenOut]:
    """Every token (never its secret): admin on everything."""
    access.need(Role.admin, None, None)
    return [TokenOut.of(t) for t in tokens.list_tokens(session, include_revoked=include_revoked)]


@router.delete(
    "/{token_id}",
    response_model=TokenOut,
    responses=errors.documented(409, notes={404: "no such token"}),
)
def revoke_token(token_id: Id, session: SessionDep, access: AccessDep) -> TokenOut:
    """Revoke a token: every replica refuses it from the next request on. Admin on
    everything, or the token's own holder (revoking itself)."""
    if access.caller.token_id != token_id:
        access.need(Role.admin, None, None)
    revoked = tokens.revoke(session, token_id, by=access.actor)
    if revoked is None:
        raise HTTPException(404, f"token {token_id} does not exist")
    token, children = revoked
    access.target = f"token {token.id} ({token.name})"
    if children:
        access.change = {"token": {"revoked_with_it": children}}
    return TokenOut.of(token)
