"""API tokens: opaque random secrets, shown once, stored as their SHA-256.

A token is looked up on every request (one indexed read), not cached: revoking one holds
on every replica at the next request. SHA-256 rather than a slow password hash is right
here: the secret is 256 random bits, so there is nothing to brute-force, and a request
must not pay a deliberately slow hash.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import UTC, datetime, timedelta

from sqlalchemy import ColumnElement, func, or_, select, text, update
from sqlalchemy.orm import Session

from lakewarden.auth.grants import Caller, Grant
from lakewarden.db.models import ApiToken

SECRET_PREFIX = "lw_"  # tells a lakewarden token from a JWT, and makes a leaked one greppable
# last_used_at is written at most this often per token, so reads do not each cost a write.
LAST_USED_RESOLUTION = timedelta(seconds=30)
DEFAULT_DAYS = 90.0  # a token's lifetime when none is asked for (cut to token_max_days)


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class TokenLifetimeError(ValueError):
    """A lifetime beyond the maximum (settings.token_max_days) or beyond the minting
    token's own expiry: the message says the bound."""


def expiry(days: float | None, max_days: float, parent_expires: datetime | None = None) -> datetime:
    """When a token asked to live `days` expires: never later than `max_days` from now nor
    than the token that mints it (`parent_expires`), so no token outlives the one that made
    it. None (never expires) and longer lifetimes are refused."""
    if days is None:
        raise TokenLifetimeError(
            f"a token must expire: give its lifetime in days, at most {max_days:g} "
            "(LAKEWARDEN_TOKEN_MAX_DAYS)"
        )
    if days > max_days:
        raise TokenLifetimeError(
            f"a lifetime of {days:g} days is beyond the maximum of {max_days:g} days "
            "(LAKEWARDEN_TOKEN_MAX_DAYS): ask for fewer"
        )
    expires = datetime.now(UTC) + timedelta(days=days)
    if parent_expires is not None and expires > parent_expires:
        raise TokenLifetimeError(
            f"a token cannot outlive the token that mints it, which expires at "
            f"{parent_expires.isoformat()}: ask for fewer days"
        )
    return expires


def default_expiry(max_days: float, parent_expires: datetime | None = None) -> datetime:
    """A token's expiry when none is asked for: DEFAULT_DAYS, cut to the maximum and to
    the minting token's own expiry."""
    expires = datetime.now(UTC) + timedelta(days=min(DEFAULT_DAYS, max_days))
    return expires if parent_expires is None else min(expires, parent_expires)


def issue(
    session: Session,
    *,
    name: str,
    owner: str,
    grants: tuple[Grant, ...],
    created_by: str,
    expires_at: datetime | None,
    parent_id: int | None = None,
    for_session: bool = False,
) -> tuple[ApiToken, str]:
    """A new token and its secret. The secret is not stored: return it to the caller once.
    `parent_id`: the token that mints it (revoked with it)."""
    secret = SECRET_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken(
        name=name,
        owner=owner,
        secret_sha256=digest(secret),
        prefix=secret[:10],
        grants=[g.as_json() for g in grants],
        created_by=created_by,
        expires_at=expires_at,
        parent_id=parent_id,
        for_session=for_session,
    )
    session.add(token)
    session.flush()
    return token, secret


def _usable(secret: str) -> tuple[ColumnElement[bool], ...]:
    """SQL: the token of `secret`, if it is neither revoked nor expired."""
    return (
        ApiToken.secret_sha256 == digest(secret),
        ApiToken.revoked_at.is_(None),
        or_(ApiToken.expires_at.is_(None), ApiToken.expires_at > func.now()),
    )


def caller_for(session: Session, secret: str) -> Caller | None:
    """The caller a token secret stands for, or None if it is unknown, revoked or expired."""
    found = session.execute(select(ApiToken, func.now()).where(*_usable(secret))).one_or_none()
    if found is None:
        return None
    token, now = found
    # The UPDATE's own condition, checked first on the row just read (now() is the
    # transaction's time, the same in both statements): a token used in the last
    # LAST_USED_RESOLUTION costs no second round trip. The UPDATE keeps its condition, so a
    # concurrent request that wrote last_used_at meanwhile still wins.
    if token.last_used_at is None or token.last_used_at < now - LAST_USED_RESOLUTION:
        session.execute(
            update(ApiToken)
            .where(
                ApiToken.id == token.id,
                or_(
                    ApiToken.last_used_at.is_(None),
                    ApiToken.last_used_at < func.now() - LAST_USED_RESOLUTION,
                ),
            )
            .values(last_used_at=func.now())
            .execution_options(synchronize_session=False)
        )
    return Caller(
        subject=f"token:{token.name}",
        grants=tuple(Grant.of(g) for g in token.grants),
        token_id=token.id,
        via="token",
    )


def mint_session(session: Session, secret: str, hours: float) -> tuple[ApiToken, str] | None:
    """A token for one dashboard session of the token `secret` (None if that one is
    unknown, revoked or expired): its name and grants, minted by it (so revoked with it),
    living `hours` and never past it. The browser keeps this one, and logout revokes it
    (`end_session`): the pasted token is not kept in the browser."""
    parent = session.execute(select(ApiToken).where(*_usable(secret))).scalar_one_or_none()
    if parent is None:
        return None
    expires = datetime.now(UTC) + timedelta(hours=hours)
    if parent.expires_at is not None:
        expires = min(expires, parent.expires_at)
    return issue(
        session,
        name=parent.name,  # the caller stays `token:<name>` in the audit trail
        owner=parent.owner,
        grants=tuple(Grant.of(g) for g in parent.grants),
        created_by=f"token:{parent.name}",
        expires_at=expires,
        parent_id=parent.id,
        for_session=True,
    )


def end_session(session: Session, secret: str) -> ApiToken | None:
    """Revoke the dashboard session token of `secret` (and anything it minted). None when
    `secret` is no session token (a token pasted before sessions were minted, or an OIDC
    JWT): nothing is revoked, the caller only forgets it."""
    token = session.execute(
        select(ApiToken).where(*_usable(secret), ApiToken.for_session.is_(True))
    ).scalar_one_or_none()
    if token is None:
        return None
    revoke(session, token.id, by=f"token:{token.name}")
    return token


# Every token minted, directly or not, by :root_id and not yet revoked.
_DESCENDANTS = text(
    """
    WITH RECURSIVE minted AS (
        SELECT id FROM api_tokens WHERE parent_id = :root_id
        UNION
        SELECT t.id FROM api_tokens t JOIN minted m ON t.parent_id = m.id
    )
    UPDATE api_tokens SET revoked_at = now(), revoked_by = :by
    WHERE id IN (SELECT id FROM minted) AND revoked_at IS NULL
    RETURNING id
    """
)


def revoke(session: Session, token_id: int, by: str) -> tuple[ApiToken, list[int]] | None:
    """Revoke the token (at once, everywhere) and every token it minted, recursively, in
    the caller's transaction: the token and the ids of the children revoked now. None if
    there is no such token; a token revoked already keeps its first revocation (its
    children, if any were left, are revoked now)."""
    token = session.get(ApiToken, token_id, with_for_update=True)
    if token is None:
        return None
    if token.revoked_at is None:
        token.revoked_at = session.execute(select(func.now())).scalar_one()
        token.revoked_by = by
        session.flush()
    children = session.execute(_DESCENDANTS, {"root_id": token_id, "by": by}).scalars()
    return token, sorted(children)


def list_tokens(session: Session, *, include_revoked: bool = False) -> list[ApiToken]:
    query = select(ApiToken).order_by(ApiToken.id)
    if not include_revoked:
        query = query.where(ApiToken.revoked_at.is_(None))
    return list(session.execute(query).scalars())
