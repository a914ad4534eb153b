"""Response bodies of the operator views: a table's health, and what would run on it now."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field


class SignalOut(BaseModel):
    kind: str = Field(description="the maintenance kind whose threshold fired")
    metric: str
    value: float
    threshold: float
    reason: str


class FileSizesOut(BaseModel):
    min: int
    p50: int
    max: int


class DeleteFilesOut(BaseModel):
    position: int
    equality: int
    position_rows: int
    equality_rows: int


class SnapshotsOut(BaseModel):
    count: int
    oldest_age_s: float
    newest_age_s: float
    expirable: int = Field(
        description="beyond clean.keep_last_snapshots, older than max_snapshot_age_hours, "
        "not referenced by a branch or tag: what clean would expire"
    )


class ManifestsOut(BaseModel):
    count: int = Field(description="manifests of the current snapshot")
    data: int
    deletes: int
    total_bytes: int
    avg_bytes: float


class TTLOut(BaseModel):
    column: str | None = Field(description="the policy's ttl.column; null when none is set")
    cutoff: datetime | None = None
    oldest: datetime | None = Field(default=None, description="min lower bound of the column")
    newest: datetime | None = None
    files_without_bounds: int | None = None
    files_past_retention: int | None = Field(
        default=None, description="files holding some row older than the cutoff"
    )
    files_entirely_past_retention: int | None = None
    note: str | None = None


class PartitionHealthOut(BaseModel):
    partition: dict[str, Any]
    data_files: int
    bytes: int
    records: int
    file_size: FileSizesOut
    small_files: int
    small_file_ratio: float
    reducible_files: int
    delete_files: DeleteFilesOut
    deleted_records: float
    deleted_row_ratio: float
    files_per_lookup: dict[str, float | None]
    oldest_ttl_value: datetime | None
    past_retention: bool | None


class HealthOut(BaseModel):
    table: str
    policy_version: int
    snapshot_id: int | None
    measured_at: datetime
    score: int = Field(ge=0, le=100)
    penalties: dict[str, float] = Field(description="what each factor took off 100")
    signals: list[SignalOut]
    data_files: int
    bytes: int
    records: int
    file_size: FileSizesOut
    small_files: int
    small_file_ratio: float
    small_file_threshold_bytes: int
    reducible_files: int
    delete_files: DeleteFilesOut
    deleted_records: float
    deleted_row_ratio: float
    snapshots: SnapshotsOut
    manifests: ManifestsOut
    layout: dict[str, float | None] = Field(
        description="files a point lookup opens, per layout kind, over the whole table"
    )
    layout_columns: dict[str, list[str]]
    ttl: TTLOut
    partitions: list[PartitionHealthOut]


class OpenTaskOut(BaseModel):
    id: int
    state: str
    attempt: int
    created_at: datetime
    reason: str | None = Field(description="why it was created")


class TriggerOut(BaseModel):
    source: Literal["commits", "sweep"]
    would_create_task: bool
    reason: str
    metrics: dict[str, Any] | None = None


class KindExplainOut(BaseModel):
    enabled: bool
    would_run: bool = Field(description="enabled, and its planner finds work on the table now")
    reason: str = Field(description="why it would run or not")
    open_task: OpenTaskOut | None
    triggers: list[TriggerOut] = Field(
        description="whether the next commit (the current snapshot's summary) or the next "
        "sweep would create a task"
    )
    planner_reason: str = Field(description="what the planner says of the table now")
    plan: dict[str, Any] | None
    expected_gain: dict[str, Any] | None


class BlockerOut(BaseModel):
    id: int
    holder: str
    reason: str | None
    until: datetime


class ExplainOut(BaseModel):
    table: str
    at: datetime
    snapshot_id: int | None
    policy_version: int
    summary: str
    blocked_by: list[BlockerOut] = Field(description="live blockers: no job starts meanwhile")
    kinds: dict[str, KindExplainOut]
