"""The bodies of the access routes: API tokens and the audit log."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Self

from pydantic import (
    Field,
)

from lakewarden.auth.grants import Grant
from services.api.schemas.common import (
    GRANT_PATTERN,
    TEXT_PATTERN,
    Page,
    RequestModel,
    ResponseModel,
    documented_pattern,
)

# --- access: tokens, audit -----------------------------------------------------------


GrantText = Annotated[str, Field(json_schema_extra=documented_pattern(GRANT_PATTERN))]


def _not_null(schema: dict[str, Any]) -> None:
    """A field the route refuses as null (a token must expire) is not offered as nullable
    in the spec; the model still takes null, so the refusal is the route's clear 422."""
    branches = [b for b in schema.pop("anyOf", []) if b.get("type") != "null"]
    if branches:
        schema.update(branches[0])


class TokenIn(RequestModel):
    name: str = Field(
        min_length=1, max_length=128, json_schema_extra=documented_pattern(TEXT_PATTERN)
    )
    owner: str | None = Field(
        default=None,
        max_length=255,
        description="who answers for it (default: the caller)",
        json_schema_extra=documented_pattern(TEXT_PATTERN),
    )
    grants: list[Annotated[str, Field(json_schema_extra=documented_pattern(GRANT_PATTERN))]] = (
        Field(
            min_length=1,
            max_length=50,
            description="each `role[@catalog[/namespace-glob]]`, role viewer, operator or admin; "
            "you may hand out only what your own admin grants include",
        )
    )
    # At least an hour: a token that lapses before it can be used is a mistake.
    expires_in_days: float | None = Field(
        default=90,
        ge=1 / 24,
        le=3650,
        description="days it lives: at least 1/24 (an hour), at most LAKEWARDEN_TOKEN_MAX_DAYS "
        "(default 90) and no longer than the token that mints it; left out: 90 days cut to "
        "those; null (never) is refused",
        json_schema_extra=_not_null,
    )


class TokenOut(ResponseModel):
    id: int
    name: str
    owner: str
    prefix: str = Field(description="the secret's first characters, to tell tokens apart")
    grants: list[str]
    created_by: str
    created_at: datetime
    expires_at: datetime | None
    last_used_at: datetime | None
    revoked_at: datetime | None
    revoked_by: str | None
    parent_id: int | None = Field(
        description="the token that minted this one (revoking it revokes this one too)"
    )
    for_session: bool = Field(description="minted by the dashboard's login; logout revokes it")

    @classmethod
    def of(cls, token: Any) -> Self:
        data = {k: getattr(token, k) for k in cls.model_fields if k != "grants"}
        return cls(**data, grants=[str(Grant.of(g)) for g in token.grants])


class TokenCreated(TokenOut):
    secret: str = Field(description="the token itself: shown this once, never again")


class AuditOut(ResponseModel):
    id: int
    at: datetime
    actor: str
    source: str | None
    method: str
    path: str
    action: str
    catalog: str | None
    namespace: str | None
    target: str | None
    status: int
    outcome: str
    change: dict[str, Any] | None
    detail: str | None


class AuditPage(Page[AuditOut]):
    pass
