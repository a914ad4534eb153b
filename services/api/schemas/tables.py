"""The bodies of the table routes: registering and listing tables, their policies and
policy versions, and what keeps a job from starting on them (blockers, pauses, the freeze,
held kinds)."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    computed_field,
    field_validator,
)

from lakewarden.db import paging
from lakewarden.policy.model import KINDS, Policy
from services.api.schemas.common import (
    FREE_TEXT_PATTERN,
    IDENTIFIER_PATTERN,
    NAMESPACE_PATTERN,
    TEXT_PATTERN,
    RequestModel,
    ResponseModel,
    documented_pattern,
)


class TableIn(RequestModel):
    namespace: str = Field(
        min_length=1,
        max_length=255,
        examples=["sales", "lake.sales.eu"],
        json_schema_extra=documented_pattern(NAMESPACE_PATTERN),
    )
    name: str = Field(
        min_length=1,
        max_length=128,
        examples=["orders"],
        json_schema_extra=documented_pattern(IDENTIFIER_PATTERN),
    )
    policy: Policy = Field(default_factory=Policy)
    force: bool = Field(
        default=False,
        description="manage it although another optimizer maintains it (Amoro, S3 Tables, "
        "Databricks, a streaming writer compacting inline, ...): without it, a 409 says which",
    )


class PolicyOut(ResponseModel):
    namespace: str
    policy: dict[str, Any] = Field(description="the defaults tables of the namespace inherit")
    version: int
    updated_at: datetime | None


class SignalOut(ResponseModel):
    kind: str = Field(description="the maintenance kind whose threshold fired")
    metric: str
    value: float
    threshold: float
    reason: str


class TableOut(ResponseModel):
    id: int
    catalog: str
    namespace: str
    name: str
    policy: dict[str, Any] | None = Field(
        description="effective: table settings over namespace defaults; null if they no "
        "longer make a valid policy (see `policy_error`)"
    )
    policy_error: str | None = Field(
        default=None,
        description="why the stored settings no longer make a valid policy (stored before "
        "a bound was tightened) and how to fix it; null when the policy is valid",
    )
    policy_overrides: dict[str, Any] = Field(description="what was set for this table itself")
    policy_version: int
    current_snapshot_id: int | None
    metadata_location: str | None
    managed_by: str = Field(description="`api` (registered) or `rule:<id>` (a management rule)")
    paused: HoldOut | None = Field(
        default=None, description="an operator's pause: no job starts until resumed"
    )
    held: list[KindHoldOut] = Field(
        default_factory=list,
        description="kinds held on the table after a failed validation or repeated errors",
    )
    health_score: int | None = Field(
        description="the last measured health score (0-100); null until first measured"
    )
    health_measured_at: datetime | None
    health_signals: list[SignalOut] | None = Field(
        description="the health signals that fired at that measurement (as in the table's "
        "`/health`): [] none fired; null until first measured",
    )
    created_at: datetime
    updated_at: datetime


class BlockerIn(RequestModel):
    FREE_TEXT = frozenset({"reason"})
    holder: str = Field(
        min_length=1,
        max_length=255,
        description="who blocks, e.g. a job id",
        json_schema_extra=documented_pattern(TEXT_PATTERN),
    )
    reason: str | None = Field(
        default=None, max_length=2000, json_schema_extra=documented_pattern(FREE_TEXT_PATTERN)
    )
    ttl_s: float = Field(
        ge=1, le=7 * 24 * 3600, description="the blocker lapses after this (1 s to 7 days)"
    )


class BlockerOut(ResponseModel):
    id: int
    holder: str
    reason: str | None
    created_at: datetime
    expires_at: datetime

    # Deprecated in the OpenAPI only: pydantic's own `deprecated=` warns on every response.
    @computed_field(  # type: ignore[prop-decorator]
        description="deprecated: the same as `expires_at` (explain's name for it)",
        json_schema_extra={"deprecated": True},
    )
    @property
    def until(self) -> datetime:
        return self.expires_at


class HoldIn(RequestModel):
    """Why an operator pauses a table or freezes every table (optional)."""

    FREE_TEXT = frozenset({"reason"})
    reason: str | None = Field(
        default=None,
        max_length=2000,
        description="shown wherever the hold is: the table, explain, the task list",
        json_schema_extra=documented_pattern(FREE_TEXT_PATTERN),
    )


class HoldOut(ResponseModel):
    """An operator's pause of a table, or the global freeze: no job starts until it is
    lifted; jobs already running finish."""

    by: str = Field(validation_alias=AliasChoices("by", "holder"), description="who")
    since: datetime = Field(validation_alias=AliasChoices("since", "created_at"))
    reason: str | None


class KindHoldOut(ResponseModel):
    """A kind held on a table after a failure that would only repeat itself (a rewrite that
    failed validation, the same error N times in a row): no task of the kind is created or
    started on the table until an operator acknowledges its alert or resumes the kind."""

    kind: str
    since: datetime
    reason: str = Field(description="what failed")
    task_id: int | None = Field(description="the failed task")
    rule: str = Field(description="the alert its failure raises; acknowledging it lifts the hold")
    alert_id: int | None = Field(
        description="that alert, once the leader raised it (null: not yet, or resolved since)"
    )
    lift: str = Field(description="the hold as explain says it, with how to lift it")


class MaintenanceOut(ResponseModel):
    """The fleet's maintenance switch: frozen (no job starts on any table) or not."""

    frozen: bool
    by: str | None = Field(description="who froze it; null when not frozen")
    since: datetime | None
    reason: str | None
    paused_tables: int = Field(description="tables paused one by one, among those you may see")


# A namespace glob (`GET /api/v1/tables?namespace=`): what a (multi-level) namespace may
# hold, and `*` (any run of characters, dots too) and `?` (one character).
NAMESPACE_GLOB_PATTERN = "^[A-Za-z0-9_.*?-]{1,255}$"
_NAMESPACE_GLOB = re.compile(r"\A[A-Za-z0-9_.*?-]{1,255}\Z")


class TableListQuery(BaseModel):
    """The query of `GET /api/v1/tables`: a page, its order, and filters (all optional,
    every one given must hold). An unknown parameter is a 422, so a misspelt filter is not
    silently ignored."""

    model_config = ConfigDict(extra="forbid")

    limit: int = Field(
        default=paging.DEFAULT_LIMIT, ge=1, le=paging.MAX_LIMIT, description="page size"
    )
    cursor: str | None = Field(
        default=None,
        max_length=100,
        description="next_cursor of the previous page, passed with the same `sort`",
    )
    sort: Literal["registered", "health"] = Field(
        default="registered",
        description="registered: in the order they were registered; health: worst first "
        "(lowest health score first, never measured last, then registration order)",
    )
    catalog: str | None = Field(default=None, min_length=1, max_length=255, description="exact")
    namespace: str | None = Field(
        default=None,
        description="a glob: `*` any run of characters (dots too), `?` one, e.g. `sales.*`",
        json_schema_extra=documented_pattern(NAMESPACE_GLOB_PATTERN),
    )
    health_below: int | None = Field(
        default=None,
        ge=0,
        le=100,
        description="a measured health score below this (never measured tables do not match)",
    )
    has_open_tasks: bool | None = Field(
        default=None, description="true: a task is pending, planning, planned or running"
    )
    has_failed_tasks: bool | None = Field(
        default=None,
        description="true: for some kind, the latest finished task (succeeded, skipped or "
        "failed; cancelled ones do not count) failed",
    )
    kind_enabled: Literal[KINDS] | None = Field(  # type: ignore[valid-type]
        default=None,
        description="the effective policy (table over namespace defaults over built-in "
        "defaults) enables this kind",
    )

    @field_validator("namespace")
    @classmethod
    def _glob(cls, value: str | None) -> str | None:
        if value is not None and not _NAMESPACE_GLOB.match(value):
            raise ValueError(
                "a namespace glob is 1 to 255 letters, digits, _ - . and the glob "
                "characters * (any run of characters) and ? (one character), e.g. sales.*"
            )
        return value


class TablePage(ResponseModel):
    """A page of managed tables (`TableListQuery`), with how many match in all."""

    items: list[TableOut]
    next_cursor: str | None = Field(
        description="pass as `cursor`, with the same `sort`, for the next page; null on the "
        "last page"
    )
    total: int = Field(
        description="how many tables match the filters among those the caller may see "
        "(the same on every page)"
    )


class PolicyVersionOut(ResponseModel):
    version: int
    policy: dict[str, Any] = Field(description="the table's own settings in this version")
    author: str | None
    created_at: datetime
    current: bool
