"""Request and response bodies. Requests forbid unknown fields: a typo is a 422, not a no-op.

Every request body derives from `RequestModel` (the policy models from the same base):
strict types, no NaN or Infinity, no control characters in any string (fields listed in
`FREE_TEXT` may hold tabs and newlines). Every error response has one body, `ErrorOut`.

The `*_PATTERN`s below put into the OpenAPI what the validators enforce (`TableRef`,
`InputModel`), so that clients and fuzzers know it; the validators stay the ones that
refuse, with a message that says what to fix rather than a regular expression."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, Field

from lakewarden.policy import KINDS, InputModel, Policy

T = TypeVar("T")


# ECMA-262 regular expressions, as JSON Schema wants them.
IDENTIFIER_PATTERN = "^[A-Za-z_][A-Za-z0-9_]{0,127}$"  # lakewarden.catalog.IDENTIFIER
TABLE_PATTERN = "^[A-Za-z_][A-Za-z0-9_]{0,127}[.][A-Za-z_][A-Za-z0-9_]{0,127}$"  # ns.name
TEXT_PATTERN = "^[^\\u0000-\\u001f\\u007f]*$"  # no control characters
FREE_TEXT_PATTERN = "^[^\\u0000-\\u0008\\u000b-\\u001f\\u007f]*$"  # tabs, newlines too


def documented_pattern(pattern: str) -> dict[str, Any]:
    """`json_schema_extra` for a string a validator checks: the OpenAPI shows the pattern."""
    return {"pattern": pattern}


class RequestModel(InputModel):
    """Base of every request body: see `lakewarden.policy.InputModel`."""


class FieldProblem(BaseModel):
    field: str = Field(
        description="the field, dotted (body fields by name; `query.<name>`, `path.<name>`)"
    )
    problem: str


class ErrorOut(BaseModel):
    """The body of every error response, 4xx and 5xx."""

    detail: str = Field(description="what went wrong and what to do about it")
    errors: list[FieldProblem] | None = Field(
        default=None, description="an invalid request (422): each field and its problem"
    )
    error_id: str | None = Field(
        default=None,
        description="an unexpected error (500) or a conflict with a concurrent change (409): "
        "the server log has it under this id",
    )


class TableIn(RequestModel):
    namespace: str = Field(
        min_length=1,
        max_length=128,
        examples=["sales"],
        json_schema_extra=documented_pattern(IDENTIFIER_PATTERN),
    )
    name: str = Field(
        min_length=1,
        max_length=128,
        examples=["orders"],
        json_schema_extra=documented_pattern(IDENTIFIER_PATTERN),
    )
    policy: Policy = Field(default_factory=Policy)


class TaskIn(RequestModel):
    kind: Literal[KINDS] = "compaction"  # type: ignore[valid-type]
    override_disabled: bool = Field(
        default=False,
        description="run this kind once although the table's policy disables it; recorded "
        "on the task (without it, triggering a disabled kind is a 409)",
    )


class PolicyOut(BaseModel):
    namespace: str
    policy: dict[str, Any] = Field(description="the defaults tables of the namespace inherit")
    version: int
    updated_at: datetime | None


class EventIn(RequestModel):
    """A commit notification pushed by an engine or catalog.

    Only the table is required; lakewarden reads the commit itself from the
    catalog, so a notification can be neither forged nor half-filled.
    """

    namespace: str = Field(
        min_length=1, max_length=128, json_schema_extra=documented_pattern(IDENTIFIER_PATTERN)
    )
    name: str = Field(
        min_length=1, max_length=128, json_schema_extra=documented_pattern(IDENTIFIER_PATTERN)
    )
    snapshot_id: int | None = Field(default=None, description="the committed snapshot, if known")


class TableOut(BaseModel):
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
    created_at: datetime
    updated_at: datetime


class EventOut(BaseModel):
    id: int
    snapshot_id: int
    parent_snapshot_id: int | None
    sequence_number: int | None
    operation: str | None
    summary: dict[str, Any]
    source: str
    committed_at: datetime | None
    received_at: datetime
    decision: str | None
    decision_detail: dict[str, Any] | None


class TransitionOut(BaseModel):
    from_state: str | None
    to_state: str
    actor: str
    reason: str | None
    leader_epoch: int | None
    at: datetime


class RunOut(BaseModel):
    attempt: int
    state: str
    scheduler_id: str
    leader_epoch: int
    spark_app_id: str | None
    started_at: datetime
    finished_at: datetime | None
    duration_ms: int | None
    metrics: dict[str, Any] | None
    committed_snapshot_id: int | None
    error: str | None
    log_tail: str | None


class TaskOut(BaseModel):
    id: int
    table: str
    kind: str
    state: str
    priority: int
    trigger: dict[str, Any]
    plan: dict[str, Any] | None
    result: dict[str, Any] | None
    reason: str | None
    attempt: int
    max_attempts: int
    not_before: datetime
    holder: str | None
    created_at: datetime
    updated_at: datetime


class TaskDetail(TaskOut):
    history: list[TransitionOut]
    runs: list[RunOut]


class EventAccepted(BaseModel):
    table: str
    new_events: int
    current_snapshot_id: int | None
    event: EventOut | None


class ReadyOut(BaseModel):
    """The readiness probe's answer, 200 or 503 (a probe's state, not an error)."""

    status: Literal["ready", "unavailable"]
    reason: str | None = Field(default=None, description="why not ready")


class LeaderOut(BaseModel):
    holder: str | None
    epoch: int | None
    acquired_at: datetime | None = None
    renewed_at: datetime | None = None
    expires_at: datetime | None = None
    live: bool


class Page(BaseModel, Generic[T]):
    items: list[T]
    next_cursor: int | None = Field(
        description="pass as `cursor` for the next page; null on the last page"
    )
