"""Every request and response body of the API, in this one module (one name per model, so
the OpenAPI's component names are the class names: short and unique).

Requests forbid unknown fields: a typo is a 422, not a no-op. Every request body derives
from `RequestModel` (the policy models from the same base): strict types, no NaN or
Infinity, no control characters in any string (fields listed in `FREE_TEXT` may hold tabs
and newlines). Every response body derives from `ResponseModel`, which reads the core's rows
by attribute. Every error response has one body, `ErrorOut`; every list one shape, `Page`.

The `*_PATTERN`s below put into the OpenAPI what the validators enforce (`TableRef`,
`InputModel`), so that clients and fuzzers know it; the validators stay the ones that
refuse, with a message that says what to fix rather than a regular expression."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any, Generic, Literal, Self, TypeVar

from pydantic import (
    AliasChoices,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    computed_field,
    field_validator,
    model_validator,
)

from lakewarden.auth.grants import Grant
from lakewarden.db import paging
from lakewarden.db.models import Task
from lakewarden.policy import KINDS, InputModel, Policy
from lakewarden.tasks.repo import TaskRecord

T = TypeVar("T")


# ECMA-262 regular expressions, as JSON Schema wants them.
IDENTIFIER_PATTERN = "^[A-Za-z_][A-Za-z0-9_]{0,127}$"  # lakewarden.catalog.IDENTIFIER
# One or more identifiers joined by dots (lakewarden.catalog.TableRef checks each level).
NAMESPACE_PATTERN = "^[A-Za-z_][A-Za-z0-9_]{0,127}(\\.[A-Za-z_][A-Za-z0-9_]{0,127})*$"
# namespace.name, the namespace of one or more levels
TABLE_PATTERN = "^[A-Za-z_][A-Za-z0-9_]{0,127}([.][A-Za-z_][A-Za-z0-9_]{0,127})+$"
# Unicode's other controls, as lakewarden.policy.CONTROL_CHARACTERS refuses them (C1 with NEL,
# the line and paragraph separators, the bidi marks, embeddings, overrides and isolates).
_UNICODE_CONTROLS = (
    "\\u0080-\\u009f\\u2028\\u2029\\u061c\\u200e\\u200f\\u202a-\\u202e\\u2066-\\u2069"
)
TEXT_PATTERN = f"^[^\\u0000-\\u001f\\u007f{_UNICODE_CONTROLS}]*$"  # no control characters
# role[@catalog[/namespace-glob]], as lakewarden.auth.grants.Grant.parse reads it
GRANT_PATTERN = "^(viewer|operator|admin)(@[A-Za-z0-9_.*?-]{1,128}(/[A-Za-z0-9_.*?-]{1,128})?)?$"
FREE_TEXT_PATTERN = (
    f"^[^\\u0000-\\u0008\\u000b-\\u001f\\u007f{_UNICODE_CONTROLS}]*$"  # tabs, newlines
)


def documented_pattern(pattern: str) -> dict[str, Any]:
    """`json_schema_extra` for a string a validator checks: the OpenAPI shows the pattern."""
    return {"pattern": pattern}


class RequestModel(InputModel):
    """Base of every request body: see `lakewarden.policy.InputModel`."""


class ResponseModel(BaseModel):
    """Base of every response body: built from a dict, or from a row's attributes."""

    model_config = ConfigDict(from_attributes=True)


class FieldProblem(ResponseModel):
    field: str = Field(
        description="the field, dotted (body fields by name; `query.<name>`, `path.<name>`)"
    )
    problem: str


class ErrorOut(ResponseModel):
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


class TaskIn(RequestModel):
    kind: Literal[KINDS] = "compaction"  # type: ignore[valid-type]
    override_disabled: bool = Field(
        default=False,
        description="run this kind once although the table's policy disables it; recorded "
        "on the task (without it, triggering a disabled kind is a 409)",
    )


class PolicyOut(ResponseModel):
    namespace: str
    policy: dict[str, Any] = Field(description="the defaults tables of the namespace inherit")
    version: int
    updated_at: datetime | None


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
        description="the committed snapshot, if known (an Iceberg snapshot id: a 64-bit integer)",
    )
    metadata_location: str | None = Field(
        default=None,
        min_length=1,
        max_length=1024,
        json_schema_extra=documented_pattern(TEXT_PATTERN),
        description="the table's metadata file after the commit, if known. When lakewarden "
        "already holds this pointer for the table, nothing is new: the event is answered "
        "from lakewarden's database without reading the catalog",
    )


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


# A management rule's glob (lakewarden.rules.GLOB): identifier characters, dots, * and ?.
GLOB_PATTERN = "^[A-Za-z0-9_.*?]{1,255}$"
_GLOB = documented_pattern(GLOB_PATTERN)
Glob = Annotated[str, Field(max_length=255, json_schema_extra=_GLOB)]
_RULE_NAMESPACE = (
    "namespaces this rule covers: a glob where `*` matches any run of characters, dots "
    "included (`sales*` covers `sales`, `sales_eu` and `sales.eu.daily`), `?` one character"
)
_RULE_INCLUDE = (
    "table name globs: a table is covered if its name matches one; a glob with a dot is "
    "matched against `namespace.name` instead"
)
_RULE_EXCLUDE = "table name globs (or `namespace.name` globs, with a dot) never covered"
_RULE_POLICY = (
    "the policy settings adopted tables get, over their namespace's defaults (like a "
    "table's own settings)"
)


class RuleIn(RequestModel):
    """A management rule: every table of the catalog it covers is managed by itself. When
    several rules cover a table, the most specific wins: an exact namespace over a glob,
    then the longer namespace pattern, then the lowest id."""

    namespace: str = Field(
        default="*", max_length=255, json_schema_extra=_GLOB, description=_RULE_NAMESPACE
    )
    include: list[Glob] = Field(
        default_factory=lambda: ["*"], min_length=1, max_length=100, description=_RULE_INCLUDE
    )
    exclude: list[Glob] = Field(default_factory=list, max_length=100, description=_RULE_EXCLUDE)
    policy: Policy = Field(default_factory=Policy, description=_RULE_POLICY)
    enabled: bool = Field(default=True, description="a disabled rule adopts nothing")


class RulePatch(RequestModel):
    """The fields to change; those left out keep their value. `policy` replaces the rule's
    whole policy. Tables already adopted keep the policy they were given."""

    namespace: str | None = Field(
        default=None, max_length=255, json_schema_extra=_GLOB, description=_RULE_NAMESPACE
    )
    include: list[Glob] | None = Field(
        default=None, min_length=1, max_length=100, description=_RULE_INCLUDE
    )
    exclude: list[Glob] | None = Field(default=None, max_length=100, description=_RULE_EXCLUDE)
    policy: Policy | None = Field(default=None, description=_RULE_POLICY)
    enabled: bool | None = None


class RuleOut(ResponseModel):
    id: int
    catalog: str
    namespace: str
    include: list[str]
    exclude: list[str]
    policy: dict[str, Any] = Field(description=_RULE_POLICY)
    enabled: bool
    managed_tables: int = Field(description="live tables this rule adopted")
    created_by: str | None
    created_at: datetime
    updated_at: datetime


class OptOutOut(ResponseModel):
    """A table's opt-out from auto-management."""

    catalog: str
    namespace: str
    name: str
    table_id: int
    opt_out: bool = Field(description="no management rule adopts the table while set")
    managed: bool = Field(description="lakewarden manages the table now")
    retired_reason: str | None = Field(description="why it is not managed, if it is not")
    managed_by: str = Field(description="`api` (registered) or `rule:<id>`")


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


class EventOut(ResponseModel):
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


class TransitionOut(ResponseModel):
    from_state: str | None
    to_state: str
    actor: str
    reason: str | None
    leader_epoch: int | None
    at: datetime


class RunOut(ResponseModel):
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
    # The error's message, then Spark's own WARN/ERROR lines of the job (tasks.runs.log_tail_of).
    log_tail: str | None
    # Its Spark UI while it runs, its history server page once it ended (when configured).
    ui_url: str | None


class TaskOut(ResponseModel):
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
    on_hold: str | None = Field(
        default=None,
        description="a task not yet running: what keeps it from starting now (the global "
        "freeze, its table's pause, a writer's blocker), e.g. `paused by X since T: "
        "reason`; null when nothing does",
    )

    @classmethod
    def of(cls, task: Task, table: str, **more: Any) -> Self:
        """The task's own fields, its table's namespace.name, and `more` (computed ones,
        and a subclass's)."""
        own = {
            f: getattr(task, f)
            for f in cls.model_fields
            if f not in ("table", "on_hold") and f not in more
        }
        return cls(table=table, **own, **more)


class TaskDetail(TaskOut):
    history: list[TransitionOut]
    runs: list[RunOut]

    @classmethod
    def of_record(cls, record: TaskRecord, on_hold: str | None = None) -> TaskDetail:
        return cls.of(
            record.task, record.table, history=record.history, runs=record.runs, on_hold=on_hold
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


class ReadyOut(ResponseModel):
    """The readiness probe's answer, 200 or 503 (a probe's state, not an error)."""

    status: Literal["ready", "unavailable"]
    reason: str | None = Field(default=None, description="why not ready")


class LeaderOut(ResponseModel):
    holder: str | None
    epoch: int | None
    acquired_at: datetime | None = None
    renewed_at: datetime | None = None
    expires_at: datetime | None = None
    live: bool


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


# The operator views: a table's health, and what would run on it now.


class FileSizesOut(ResponseModel):
    min: int
    p50: int
    max: int


class FileSizeBucketOut(ResponseModel):
    """One bar of the file-size histogram (MB = 1024 x 1024 bytes)."""

    label: Literal["<1 MB", "1-8 MB", "8-32 MB", "32-128 MB", "128-512 MB", ">512 MB"]
    min_bytes: int = Field(description="the smallest size in the bucket (inclusive)")
    max_bytes: int | None = Field(description="the bucket's upper bound (exclusive); null: none")
    files: int = Field(description="data files of the current snapshot in the bucket")
    bytes: int


class DeleteFilesOut(ResponseModel):
    position: int
    equality: int
    position_rows: int
    equality_rows: int


class SnapshotsOut(ResponseModel):
    count: int
    oldest_age_s: float
    newest_age_s: float
    expirable: int = Field(
        description="beyond clean.keep_last_snapshots, older than max_snapshot_age_hours, "
        "not referenced by a branch or tag: what clean would expire"
    )


class ManifestsOut(ResponseModel):
    count: int = Field(description="manifests of the current snapshot")
    data: int
    deletes: int
    total_bytes: int
    avg_bytes: float


class CommitsOut(ResponseModel):
    """Commits from the snapshots the table still holds (expired ones are not counted: after
    clean the rates are a lower bound)."""

    last_24h: int
    last_7d: int
    per_day_7d: float = Field(description="last_7d / 7")
    daily_7d: list[int] = Field(
        description="commits per day, 7 entries, the last 24 h first (then 24-48 h ago, ...)"
    )
    data_commits_last_hour: int = Field(
        description="commits that added data (append, overwrite) in the last hour"
    )
    median_interval_s_last_hour: float | None = Field(
        description="median seconds between those commits (null: fewer than two)"
    )
    streaming_writer_active: bool = Field(
        description="a streaming writer looks active: >= 4 data commits in the last hour, at "
        "a median interval <= 15 min, the newest no older than twice that interval (or 60 s)"
    )


class SkewMeasureOut(ResponseModel):
    median: float | None = Field(description="the median partition's value")
    busiest: int | None
    busiest_partition: dict[str, Any] | None
    ratio: float | None = Field(description="busiest / median (null: no partition)")


class PartitionSkewOut(ResponseModel):
    """The busiest partition against the median one, of the partitions holding data files."""

    partitions: int
    bytes: SkewMeasureOut
    data_files: SkewMeasureOut


class MetadataFilesOut(ResponseModel):
    files: int = Field(description="metadata.json files listed: the current one and its log")
    bytes: int | None = Field(description="their total size; null unless read with ?storage=true")
    current_bytes: int | None = Field(
        description="the current metadata.json's size (every read and commit parses it); "
        "null unless read with ?storage=true"
    )
    delete_after_commit: bool = Field(
        description="write.metadata.delete-after-commit.enabled: when false, every commit "
        "leaves its metadata.json on storage for good (only orphan removal takes them)"
    )
    previous_versions_max: int | None = Field(
        description="write.metadata.previous-versions-max (how many the log keeps); null "
        "when the property is not a number"
    )


class StorageOut(ResponseModel):
    """The table location listed against what its metadata references (?storage=true)."""

    listed_files: int
    listed_bytes: int
    capped: bool = Field(
        description="the listing stopped at max_files: the unreferenced figures are a lower bound"
    )
    max_files: int
    unreferenced_files: int = Field(
        description="files under the location that no snapshot or metadata file references "
        "(orphan candidates)"
    )
    unreferenced_bytes: int
    unreferenced_older_files: int = Field(
        description="of those, files older than orphan_min_age_hours: what clean's orphan "
        "removal would delete (younger ones may belong to a commit in flight)"
    )
    unreferenced_older_bytes: int
    orphan_min_age_hours: float
    old_snapshots_only_files: int = Field(
        description="data and delete files some snapshot holds but neither the current one "
        "nor any branch or tag head: expiring the old snapshots frees them"
    )
    old_snapshots_only_bytes: int
    manifests_read: int = Field(description="distinct manifests read over every snapshot")


class TTLOut(ResponseModel):
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


class FilesOut(ResponseModel):
    """What the data and delete files come to, of the whole table or of one partition."""

    data_files: int
    bytes: int
    records: int
    file_size: FileSizesOut
    file_size_buckets: list[FileSizeBucketOut] = Field(
        min_length=6,
        max_length=6,
        description="data files by size: <1 MB, 1-8, 8-32, 32-128, 128-512, >512 MB, in "
        "that order, every bucket listed",
    )
    files_over_1gb: int = Field(description="data files of 1 GB (1024^3 bytes) or more")
    small_files: int
    small_file_ratio: float
    reducible_files: int
    delete_files: DeleteFilesOut
    deleted_records: float
    deleted_row_ratio: float


class PartitionHealthOut(FilesOut):
    partition: dict[str, Any]
    files_per_lookup: dict[str, float | None]
    oldest_ttl_value: datetime | None
    past_retention: bool | None


class BucketOut(ResponseModel):
    """One bucket of the key: what a read of one of its keys opens."""

    partition: dict[str, Any]
    bucket: Any = Field(description="the bucket number (the partition's value of the field)")
    data_files: int
    equality_delete_files: int
    equality_delete_rows: int
    position_delete_files: int
    position_delete_rows: int
    files: int = Field(description="data files plus delete files")


class BucketsOut(ResponseModel):
    """A primary-key table bucketed by key (a bucket(N, key) partition field)."""

    field: str = Field(description="the partition field")
    column: str = Field(description="the key column it buckets")
    num_buckets: int
    max_files_per_bucket: int = Field(description="compaction.max_files_per_bucket (0: off)")
    buckets: int = Field(description="buckets holding files")
    most_data_files: int
    over_limit: int = Field(description="buckets holding more than max_files_per_bucket")
    per_bucket: list[BucketOut]


class HealthOut(FilesOut):
    table: str
    policy_version: int
    snapshot_id: int | None
    measured_at: datetime
    score: int = Field(ge=0, le=100)
    penalties: dict[str, float] = Field(description="what each factor took off 100")
    signals: list[SignalOut]
    small_file_threshold_bytes: int
    snapshots: SnapshotsOut
    manifests: ManifestsOut
    layout: dict[str, float | None] = Field(
        description="files a point lookup opens, per layout kind, over the whole table"
    )
    layout_columns: dict[str, list[str]]
    ttl: TTLOut
    partitions: list[PartitionHealthOut]
    commits: CommitsOut
    partition_skew: PartitionSkewOut
    metadata_files: MetadataFilesOut
    storage: StorageOut | None = Field(
        default=None, description="null unless asked for with ?storage=true (it lists files)"
    )
    buckets: BucketsOut | None = Field(
        default=None,
        description="per bucket of the key, for a table partitioned by bucket(N, key) "
        "(the key: its identifier fields, or any column when it declares none); null otherwise",
    )


class OpenTaskOut(ResponseModel):
    id: int
    state: str
    attempt: int
    created_at: datetime
    reason: str | None = Field(description="why it was created")


class TriggerOut(ResponseModel):
    source: Literal["commits", "sweep"]
    would_create_task: bool
    reason: str
    metrics: dict[str, Any] | None = None


class KindExplainOut(ResponseModel):
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


class RefOut(ResponseModel):
    """A branch or tag, with what Iceberg's expire_snapshots keeps for it (lakewarden.refs)."""

    name: str
    type: Literal["branch", "tag"]
    snapshot_id: int
    committed_at: datetime | None = Field(description="when its snapshot was committed")
    age_hours: float | None = Field(description="its snapshot's age now")
    max_ref_age_ms: int | None = Field(
        description="the ref is dropped once its snapshot is older (null: the table default)"
    )
    min_snapshots_to_keep: int | None = Field(description="a branch keeps this many ancestors")
    max_snapshot_age_ms: int | None = Field(description="a branch keeps ancestors this young")
    lapses_at: datetime | None = Field(
        description="from then on, the next snapshot expiry drops it (null: never; main never)"
    )


class RefsOut(ResponseModel):
    table: str
    at: datetime
    current_snapshot_id: int | None
    refs: list[RefOut] = Field(description="main first, then the other branches, then tags")


_SNAPSHOT_ID = {"type": "integer", "minimum": -(2**63), "maximum": 2**63 - 1}
_TAG_NAME = {"type": "string", "minLength": 1, "maxLength": 255, "pattern": TEXT_PATTERN}


def _one_of_rollback(schema: dict[str, Any]) -> None:
    """The OpenAPI of RollbackIn: one of two closed objects, so that clients (and the fuzzer)
    know a body with both fields, or neither, is refused."""
    keep: dict[str, Any] = {k: schema[k] for k in ("title", "description") if k in schema}
    schema.clear()
    schema.update(keep)
    schema["oneOf"] = [
        {
            "type": "object",
            "properties": {name: prop},
            "required": [name],
            "additionalProperties": False,
        }
        for name, prop in (("to_snapshot", _SNAPSHOT_ID), ("to_tag", _TAG_NAME))
    ]


class RollbackIn(RequestModel):
    """Exactly one of `to_snapshot` (a snapshot id) and `to_tag` (a tag's name)."""

    model_config = ConfigDict(json_schema_extra=_one_of_rollback)
    to_snapshot: int | None = Field(default=None, ge=-(2**63), le=2**63 - 1)
    to_tag: str | None = Field(default=None, min_length=1, max_length=255)

    @model_validator(mode="after")
    def _exactly_one(self) -> RollbackIn:
        if (self.to_snapshot is None) == (self.to_tag is None):
            raise ValueError('send exactly one of "to_snapshot" (a snapshot id) or "to_tag"')
        return self


class RollbackOut(ResponseModel):
    table: str
    from_snapshot_id: int | None
    to_snapshot_id: int
    to_tag: str | None
    rolled_back: bool = Field(description="false: main was already at that snapshot")


class TagsExplainOut(ResponseModel):
    enabled: bool
    every: str
    retention_days: int
    next_tag: str = Field(description="this period's tag (daily-YYYYMMDD, hourly-YYYYMMDDHH)")
    due: bool = Field(description="the next sweep makes `next_tag` now")
    reason: str
    following_tag: str
    following_at: datetime = Field(description="when the period of `following_tag` starts")
    would_lapse: list[RefOut] = Field(
        description="tags and branches past their max-ref-age: the next snapshot expiry "
        "(clean) drops them, and the snapshots only they kept"
    )


class ReadinessPartitionExplainOut(ResponseModel):
    partition: str
    ready: bool = Field(description="ready now, and no commit touched it since")
    would_become_ready: bool
    would_become_unready: bool = Field(description="a late commit touched it since")
    reason: str
    waiting_for: list[str] = Field(description="quiet time left, the watermark, a kind")
    last_commit_snapshot_id: int
    last_commit_at: datetime


class ReadinessExplainOut(ResponseModel):
    enabled: bool
    partition: str | None
    rule: str
    require: list[str]
    watermark: datetime | None = None
    summary: str
    partitions: list[ReadinessPartitionExplainOut] = Field(
        description="the partitions not ready, and the ready ones a commit touched since"
    )


class PartitionReadinessOut(ResponseModel):
    partition: str
    column: str = Field(description="the partition source column (readiness.partition)")
    partition_end: datetime | None = Field(description="null: an identity value with no end")
    ready: bool
    since: datetime | None = Field(description="when it became ready (null while not)")
    snapshot_id: int | None = Field(description="the snapshot that made it ready")
    reason: str | None = Field(description="why it is ready, or what it waits for")
    tag: str | None = Field(description="the Iceberg tag on that snapshot (readiness.tag)")
    last_commit_at: datetime
    last_commit_snapshot_id: int
    unready_at: datetime | None
    unready_reason: str | None = Field(description="the late commit that last un-readied it")


class WatermarkIn(RequestModel):
    watermark: Annotated[AwareDatetime, Field(strict=False)] = Field(
        description="ISO 8601 with a UTC offset: every row with an event time before it is "
        "written (the writer says). It only moves forward."
    )

    @field_validator("watermark", mode="before")
    @classmethod
    def _iso_text(cls, value: Any) -> Any:
        hint = "must be ISO 8601 text with a UTC offset, e.g. 2026-11-24T00:00:00Z"
        if not isinstance(value, str):  # lax datetimes take a number as epoch seconds
            raise ValueError(hint)
        try:  # pydantic's own message ("input is too short") does not say what to send
            parsed = datetime.fromisoformat(value.strip())
        except ValueError:
            raise ValueError(f"{hint}, not {value[:40]!r}") from None
        if parsed.tzinfo is None:
            raise ValueError(f"{hint}: {value[:40]!r} has no timezone offset")
        try:
            parsed.astimezone(UTC)
        except OverflowError:  # year 1 with a positive offset is before datetime.min in UTC
            raise ValueError(f"{value[:40]!r} is out of range: {hint}") from None
        return value


class WatermarkOut(ResponseModel):
    watermark: datetime = Field(description="the table's watermark now")


class OrphanRemovalExplainOut(ResponseModel):
    enabled: bool = Field(description="clean is enabled and clean.remove_orphans is on")
    interval_minutes: float = Field(description="clean.orphan_interval_minutes")
    last_run: datetime | None = Field(description="the last clean run that removed orphans")
    due: bool = Field(description="the next clean task lists and removes orphan files")
    next_due: datetime | None = Field(description="when it is due (null: due now, or off)")
    reason: str


class QuotaUsageOut(ResponseModel):
    spark_minutes_per_hour: float = Field(description="the quota")
    used_minutes: float = Field(description="Spark minutes of its jobs in the trailing hour")
    over: bool = Field(description="used >= quota: its tasks wait")
    next_slot: datetime | None = Field(
        description="when usage falls below the quota if nothing more runs (while over)"
    )
    waiting: str | None = Field(description="what a waiting task says (its on_hold)")


class QuotaExplainOut(ResponseModel):
    table: QuotaUsageOut | None = Field(description="quota.spark_minutes_per_hour; null: none")
    pools: dict[str, QuotaUsageOut] = Field(
        description="the quotas (LAKEWARDEN_POOL_QUOTAS) of the pools the table's kinds use"
    )


class ValidationExplainOut(ResponseModel):
    enabled: bool
    applies_to: list[str] = Field(description="the rewrite kinds it checks")
    columns: list[str] = Field(description="the columns checksummed")
    columns_from: str = Field(description='"policy", or every column of a primitive type')
    max_rows: int = Field(description="skipped when the touched partitions held more rows")
    table_rows: int = Field(description="rows in the table's current snapshot")
    reason: str


class ExplainOut(ResponseModel):
    table: str
    at: datetime
    snapshot_id: int | None
    policy_version: int
    summary: str
    blocked_by: list[BlockerOut] = Field(description="live blockers: no job starts meanwhile")
    paused: HoldOut | None = Field(description="the table's pause: no job starts until resumed")
    held: list[KindHoldOut] = Field(
        default_factory=list,
        description="kinds held on the table: none of their tasks is created or started",
    )
    frozen: HoldOut | None = Field(
        description="the global freeze: no job starts on any table until unfrozen"
    )
    kinds: dict[str, KindExplainOut]
    validation: ValidationExplainOut | None = Field(
        default=None, description="the post-rewrite validation: what it would check, or off"
    )
    readiness: ReadinessExplainOut | None = Field(
        default=None, description="partition readiness: which partitions would become ready"
    )
    tags: TagsExplainOut | None = Field(
        default=None, description="the scheduled tags: the next one due, and which would lapse"
    )
    orphan_removal: OrphanRemovalExplainOut | None = Field(
        default=None, description="when clean next removes orphan files (orphan_interval_minutes)"
    )
    quota: QuotaExplainOut | None = Field(
        default=None,
        description="the hard quotas of Spark minutes per hour: the table's and its pools'",
    )


class Page(ResponseModel, Generic[T]):
    """One page of a list (`lakewarden.db.paging`); each list has its own subclass, named
    for what it lists."""

    items: list[T]
    next_cursor: int | None = Field(
        description="pass as `cursor` for the next page; null on the last page"
    )

    @classmethod
    def of(cls, page: paging.Page[Any], item: Callable[[Any], Any] | None = None) -> Self:
        """The core's page, each row mapped by `item` (by default, read by attribute)."""
        items = page.items if item is None else [item(row) for row in page.items]
        return cls(items=items, next_cursor=page.next_cursor)


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


class EventPage(Page[EventOut]):
    pass


class PartitionReadinessPage(Page[PartitionReadinessOut]):
    pass


class TaskPage(Page[TaskOut]):
    pass


class AlertPage(Page[AlertOut]):
    pass


# --- access: tokens, audit, policy versions ----------------------------------------------


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


class PolicyVersionOut(ResponseModel):
    version: int
    policy: dict[str, Any] = Field(description="the table's own settings in this version")
    author: str | None
    created_at: datetime
    current: bool


# --- catalogs ---------------------------------------------------------------------------
class SecretRef(RequestModel):
    """Where a secret is kept, so that it is never stored nor echoed: an environment
    variable of the lakewarden processes, or a file they can read (a mounted secret)."""

    env: str | None = Field(default=None, min_length=1, max_length=255, pattern=r"^[A-Za-z_]\w*$")
    file: str | None = Field(
        default=None,
        min_length=1,
        max_length=4096,
        json_schema_extra=documented_pattern(TEXT_PATTERN),
    )

    @model_validator(mode="after")
    def _one(self) -> SecretRef:
        if (self.env is None) == (self.file is None):
            raise ValueError('give exactly one of "env" or "file"')
        return self


# Keys and values of catalog properties: no control characters (RequestModel refuses them).
PropertyKey = Annotated[
    str,
    StringConstraints(min_length=1, max_length=255),
    Field(json_schema_extra=documented_pattern(TEXT_PATTERN)),
]
PropertyText = Annotated[
    str,
    StringConstraints(max_length=4096),
    Field(json_schema_extra=documented_pattern(TEXT_PATTERN)),
]
CatalogProperties = dict[PropertyKey, PropertyText | SecretRef]


class CatalogIn(RequestModel):
    name: str = Field(
        min_length=1,
        max_length=128,
        description="the Iceberg catalog's own name (a JDBC catalog's `catalog_name`)",
        json_schema_extra=documented_pattern(IDENTIFIER_PATTERN),
    )
    type: Literal["jdbc", "rest"]
    properties: CatalogProperties = Field(
        description="pyiceberg's catalog properties (`uri`, `warehouse`, `credential`, "
        '`token`, `s3.*`, ...); a secret only as a reference: {"env": NAME} or '
        '{"file": PATH}',
        max_length=100,
    )
    poll_interval_s: float = Field(default=30.0, ge=1, le=86400)
    poll_concurrency: int = Field(default=4, ge=1, le=64)


class CatalogPatch(RequestModel):
    properties: dict[PropertyKey, PropertyText | SecretRef | None] | None = Field(
        default=None, description="merged; a property set to null is removed"
    )
    poll_interval_s: float | None = Field(default=None, ge=1, le=86400)
    poll_concurrency: int | None = Field(default=None, ge=1, le=64)


class CatalogPollOut(ResponseModel):
    polled_at: datetime | None
    polled_by: str | None
    duration_ms: int | None
    tables_seen: int | None
    tables_refreshed: int | None
    catalog_requests: int | None
    commit_trigger: bool | None = Field(
        description="JDBC: commits are heard through lakewarden's trigger (false: polled only)"
    )
    error: str | None


class CatalogOut(ResponseModel):
    name: str
    type: str
    properties: dict[str, str | dict[str, str]] = Field(
        description="as given: secrets appear as their references"
    )
    default: bool = Field(description="the settings-configured catalog (LAKEWARDEN_CATALOG_*)")
    poll_interval_s: float
    poll_concurrency: int
    version: int
    managed_tables: int
    last_poll: CatalogPollOut | None
