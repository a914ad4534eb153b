"""The bodies of the event routes: commit notifications pushed in (one or a batch), and
the commits lakewarden recorded."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import ConfigDict, Field

from services.api.schemas.common import (
    IDENTIFIER_PATTERN,
    NAMESPACE_PATTERN,
    TEXT_PATTERN,
    Page,
    RequestModel,
    ResponseModel,
    documented_pattern,
)

# A Hudi instant's requested time or a Delta version: digits.
COMMIT_PATTERN = "^[0-9]{1,32}$"


class EventIn(RequestModel):
    """A commit notification pushed by an engine or catalog.

    Only the table is required; lakewarden reads the commit itself from the
    catalog, so a notification can be neither forged nor half-filled.
    """

    catalog: str | None = Field(
        default=None,
        min_length=1,
        max_length=128,
        description="the table's catalog (GET /api/v1/catalogs); default: the default catalog",
        json_schema_extra=documented_pattern(IDENTIFIER_PATTERN),
    )
    namespace: str = Field(
        min_length=1, max_length=255, json_schema_extra=documented_pattern(NAMESPACE_PATTERN)
    )
    name: str = Field(
        min_length=1, max_length=128, json_schema_extra=documented_pattern(IDENTIFIER_PATTERN)
    )
    snapshot_id: int | None = Field(
        default=None,
        ge=-(2**63),
        le=2**63 - 1,
        description="the committed snapshot, if known (an Iceberg snapshot id: a 64-bit "
        "integer); an Iceberg table's only",
    )
    commit: str | None = Field(
        default=None,
        min_length=1,
        max_length=32,
        pattern=COMMIT_PATTERN,
        description="the commit, if known, of a Hudi table (an instant's requested time, "
        "e.g. 20261126084500123) or a Delta table (a version, e.g. 42); a Hudi or Delta "
        "table's only. lakewarden reads the table's log from its cursor whether or not "
        "it is given; given, the answer's `event` is that commit's, and it must be in the "
        "log (422)",
    )
    metadata_location: str | None = Field(
        default=None,
        min_length=1,
        max_length=1024,
        json_schema_extra=documented_pattern(TEXT_PATTERN),
        description="the table's metadata file after the commit, if known (an Iceberg "
        "table's only). When lakewarden already holds this pointer for the table, nothing "
        "is new: the event is answered from lakewarden's database without reading the "
        "catalog",
    )


class HudiCommitIn(RequestModel):
    """The message Hudi's write-commit callback posts (`HoodieWriteCommitCallbackMessage`,
    as Hudi 1.2's Jackson writes it). Only `basePath` is used, to find the managed table;
    lakewarden reads the commit itself from the table's timeline. Keys a later Hudi adds
    are ignored (not refused, as other bodies' are): the writer's message is not ours."""

    model_config = ConfigDict(extra="ignore")

    commitTime: str = Field(
        min_length=1,
        max_length=32,
        pattern=COMMIT_PATTERN,
        description="the instant's requested time",
    )
    basePath: str = Field(
        min_length=1,
        max_length=1024,
        json_schema_extra=documented_pattern(TEXT_PATTERN),
        description="the table's base path, under a `hudi` catalog's warehouse "
        "(`<warehouse>/<namespace>/<name>`; `file:`, `s3a:` and the like as Hudi spells it)",
    )
    tableName: str | None = Field(
        default=None, max_length=1024, json_schema_extra=documented_pattern(TEXT_PATTERN)
    )
    commitActionType: Any = Field(default=None, description="commit, deltacommit, ...")
    hoodieWriteStat: list[dict[str, Any]] | None = Field(
        default=None, description="the files written (not read: the timeline has them)"
    )
    extraMetadata: Any = None


# The most events one POST /api/v1/events/batch takes (the body must also fit in 1 MiB).
MAX_EVENT_BATCH = 1000


class EventBatchIn(RequestModel):
    """Commit notifications of any tables, answered item by item."""

    events: list[EventIn] = Field(
        min_length=1,
        max_length=MAX_EVENT_BATCH,
        description="the notifications; those of one table are coalesced into one catalog "
        "read and one ingest",
    )


class EventOut(ResponseModel):
    id: int
    commit: str = Field(
        description="the commit's id as its format spells it: an Iceberg snapshot id (as "
        "text), a Hudi instant's requested time, a Delta version (as text)"
    )
    snapshot_id: int | None = Field(
        description="an Iceberg table's snapshot id; null for Hudi and Delta"
    )
    parent_snapshot_id: int | None
    sequence_number: int | None
    operation: str | None
    summary: dict[str, Any]
    source: str
    committed_at: datetime | None
    received_at: datetime
    decision: str | None
    decision_detail: dict[str, Any] | None
    gap_before: dict[str, Any] | None = Field(
        default=None,
        description="set when commits between this one and the last recorded were never "
        "read (expired from the table's metadata before lakewarden read it, or past the "
        "walk's bound): the last recorded snapshot, the missing parent, and why",
    )


class EventAccepted(ResponseModel):
    table: str
    new_events: int
    current_snapshot_id: int | None
    event: EventOut | None


class EventResult(ResponseModel):
    """What became of one notification of a batch."""

    index: int = Field(description="the notification's position in the batch, from 0")
    table: str = Field(description="namespace.name, as given")
    accepted: bool = Field(description="false: `error` says why; the others are unaffected")
    status: int = Field(
        description="what POST /api/v1/events would have answered for this notification: "
        "202, or 403, 404, 409, 422, 500"
    )
    new_events: int = Field(
        description="commits of the table recorded by this batch, counted on one "
        "notification of the table (the first that needed the catalog read; the others of "
        "the table: 0), so the sum over the items is what the batch recorded"
    )
    current_snapshot_id: int | None = None
    event_id: int | None = Field(
        default=None,
        description="the event of the notification's snapshot (or of the table's current "
        "snapshot when none was given), if recorded",
    )
    decision: str | None = Field(default=None, description="what evaluation made of that event")
    error: str | None = Field(default=None, description="why the notification was refused")


class EventBatchAccepted(ResponseModel):
    accepted: int = Field(description="notifications accepted")
    failed: int = Field(description="notifications refused (see each item's `error`)")
    new_events: int = Field(description="commits recorded by this batch, over all its tables")
    results: list[EventResult] = Field(description="one per notification, in the batch's order")


class EventPage(Page[EventOut]):
    pass
