"""The bodies of the alert routes: an alert, and taking one (ack)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import (
    Field,
)

from services.api.schemas.common import (
    TEXT_PATTERN,
    Page,
    RequestModel,
    ResponseModel,
    documented_pattern,
)


class AckIn(RequestModel):
    by: str = Field(
        min_length=1,
        max_length=255,
        description="who takes it",
        json_schema_extra=documented_pattern(TEXT_PATTERN),
    )


class AlertOut(ResponseModel):
    id: int
    rule: str
    key: str
    severity: str
    state: str
    summary: str
    details: dict[str, Any]
    runbook: str | None
    first_seen: datetime
    last_seen: datetime
    resolved_at: datetime | None
    acked_by: str | None
    acked_at: datetime | None
    delivered_state: str | None
    delivery_attempts: int
    delivery_error: str | None


class AlertPage(Page[AlertOut]):
    pass
