"""The operator views: a table's health, what would run on it now (explain), its partitions'
readiness and watermark, its refs and rollback; and the service's own probes and leader."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AwareDatetime,
    ConfigDict,
    Field,
    computed_field,
    field_validator,
    model_validator,
)

from services.api.schemas.common import TEXT_PATTERN, Page, RequestModel, ResponseModel
from services.api.schemas.tables import BlockerOut, HoldOut, KindHoldOut, SignalOut


class ReadyOut(ResponseModel):
    """The readiness probe's answer, 200 or 503 (a probe's state, not an error)."""

    status: Literal["ready", "unavailable"]
    reason: str | None = Field(default=None, description="why not ready")
    stale_regions: list[str] = Field(
        default_factory=list,
        description="with several regions, those without a live scheduler leader: their "
        "tables' maintenance stalls (the API itself stays ready: GET /api/v1/scheduler/regions)",
    )


class LeaderOut(ResponseModel):
    holder: str | None
    epoch: int | None
    acquired_at: datetime | None = None
    renewed_at: datetime | None = None
    expires_at: datetime | None = None
    live: bool


class RegionOut(LeaderOut):
    """A region's scheduler leadership (docs/deployment.md#regions)."""

    region: str
    fleet: bool = Field(description="its leader also runs the fleet-wide duties")


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
    position: int = Field(description="position-delete files, deletion vectors among them")
    equality: int
    position_rows: int
    equality_rows: int
    deletion_vectors: int = Field(
        0,
        description="deletion vectors (format v3: a data file's deleted positions, a blob "
        "of a Puffin file), counted in `position` too",
    )
    deletion_vector_rows: int = 0


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


class StatisticsOut(ResponseModel):
    snapshot_id: int | None = Field(
        description="the snapshot the newest column statistics describe (an ancestor of the "
        "current one); null: the table has none"
    )
    current: bool = Field(description="they describe the current snapshot")
    age_hours: float | None = Field(description="how old that snapshot is")
    columns: list[str] = Field(description="the columns they have distinct-count sketches of")
    snapshots_since: int = Field(description="main's snapshots after it")
    rewrites_since: int = Field(description="of which rewrites (replace)")


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
    format_version: int | None = Field(
        None, description="the Iceberg table's format version (1, 2 or 3); null for Hudi and Delta"
    )
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
    statistics: StatisticsOut | None = Field(
        default=None, description="column statistics' freshness (the stats kind keeps them)"
    )
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
    restore_version: int | None = Field(
        default=None, description="a Delta table: the RESTORE commit's version"
    )


SnapshotId = Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]


class DryRunIn(RequestModel):
    """What repair, revert and cherry-pick share: a dry run first, main as it was seen."""

    dry_run: bool = True
    main_snapshot_id: SnapshotId | None = Field(
        default=None,
        description="main's snapshot when you made the dry run: refused (409) if main moved",
    )


class RepairIn(DryRunIn):
    """One partition back to what it held at `to_snapshot` (a snapshot of main's history).
    `dry_run` (the default) only says what would change."""

    partition: dict[
        Annotated[str, Field(min_length=1, max_length=255)],
        Annotated[str, Field(max_length=1024)],
    ] = Field(
        min_length=1,
        max_length=16,
        description="every partition field of the spec by name, its value as health shows "
        'it (e.g. {"ts_day": "2026-11-23", "region": "eu"})',
    )
    to_snapshot: SnapshotId


class RevertIn(DryRunIn):
    """The changes of main's commits after `from_snapshot` up to and including
    `to_snapshot`, undone. `dry_run` (the default) only says what would change."""

    from_snapshot: SnapshotId
    to_snapshot: SnapshotId


class CherryPickIn(DryRunIn):
    """An append committed outside main's history (an audit branch's) applied to main.
    `dry_run` (the default) only says what would change."""

    snapshot: SnapshotId


class RepairOut(ResponseModel):
    table: str
    action: str = Field(description="repair | revert | cherry-pick")
    dry_run: bool
    main_snapshot_id: int = Field(description="main's head the plan was made on")
    partition: dict[str, str] | None = None
    from_snapshot_id: int | None = None
    to_snapshot_id: int | None = None
    snapshot_id: int | None = Field(default=None, description="the commit cherry-picked")
    files_removed: list[str]
    files_restored: list[str]
    rows_removed: int
    rows_restored: int
    changes: bool
    committed_snapshot_id: int | None = Field(
        default=None, description="the repair's commit (null: a dry run, or nothing to do)"
    )


class PublishAuditOut(ResponseModel):
    id: int
    branch: str
    branch_snapshot_id: int
    main_snapshot_id: int | None = Field(description="main's head when audited")
    passed: bool
    published: bool = Field(description="main was fast-forwarded to the branch head")
    rows: int | None = Field(description="the batch's rows (the branch's files main lacks)")
    checks: dict[str, Any] = Field(description="each check: passed, and what it found")
    reason: str
    at: datetime


class PublishOut(ResponseModel):
    table: str
    enabled: bool
    branch: str
    audits: list[PublishAuditOut] = Field(description="the newest first (at most 50)")


class PublishExplainOut(ResponseModel):
    enabled: bool
    branch: str
    branch_snapshot_id: int | None = Field(description="the audit branch's head (null: none)")
    main_snapshot_id: int | None
    checks: list[str] = Field(description="the checks an audit runs, by the policy")
    due: bool = Field(description="the leader's next publish round audits the branch head")
    reason: str
    last_audit: PublishAuditOut | None = Field(description="the branch's newest audit")


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
    waiting_for: list[str] = Field(
        description="quiet time left, the watermark, a kind; data or a heartbeat"
    )
    last_commit_snapshot_id: int | None = Field(description="null: no commit touched it")
    last_commit_at: datetime | None
    no_data: bool = Field(description="no commit touched it: an empty partition")
    overdue: bool = Field(
        description="empty, with no heartbeat, past its end and readiness.deadline_minutes"
    )


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


class ReadinessPinOut(ResponseModel):
    """How a reader reads a ready partition as it was when it became ready."""

    format: Literal["iceberg", "hudi", "delta"]
    kind: Literal["tag", "snapshot", "savepoint", "instant", "version"] = Field(
        description="Iceberg: its tag (readiness.tag) or snapshot; Hudi: the savepoint made "
        "of its instant, or the instant before one is made; Delta: the log version"
    )
    commit: str = Field(description="the snapshot id, Hudi instant or Delta version")
    read: str = Field(description="how a reader pins it (SQL, and the Python reader's call)")


class PartitionReadinessOut(ResponseModel):
    partition: str
    column: str = Field(description="the partition source column (readiness.partition)")
    partition_end: datetime | None = Field(description="null: an identity value with no end")
    ready: bool
    since: datetime | None = Field(description="when it became ready (null while not)")
    snapshot_id: int | None = Field(
        description="the commit that made it ready: an Iceberg snapshot id, a Hudi instant "
        "time, a Delta version (see pin)"
    )
    reason: str | None = Field(description="why it is ready, or what it waits for")
    tag: str | None = Field(
        description="the Iceberg tag on that snapshot (readiness.tag); on Hudi, the savepoint "
        "made of that instant"
    )
    pin: ReadinessPinOut | None = Field(
        default=None, description="how a reader pins it (null while it was never ready)"
    )
    last_commit_at: datetime | None = Field(description="null: no commit touched it")
    last_commit_snapshot_id: int | None
    unready_at: datetime | None
    unready_reason: str | None = Field(description="the late commit that last un-readied it")
    heartbeat_at: datetime | None = Field(description="the writer's last heartbeat for it")
    heartbeat_by: str | None
    overdue_since: datetime | None = Field(
        description="empty, with no heartbeat, since this round found it past its deadline"
    )

    @computed_field(  # type: ignore[prop-decorator]
        description="no commit touched it: ready on a heartbeat or the watermark, or overdue"
    )
    @property
    def no_data(self) -> bool:
        return self.last_commit_snapshot_id is None


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


class HeartbeatIn(RequestModel):
    partition: str = Field(
        min_length=1,
        max_length=255,
        pattern=TEXT_PATTERN,
        description="the partition as readiness names it: 2026-11-23-05 (hour), 2026-11-23 "
        "(day), 2026-11 (month), 2026 (year), or the identity value",
    )


class HeartbeatOut(ResponseModel):
    partition: str
    heartbeat_at: datetime
    has_data: bool = Field(description="a commit touched it: the heartbeat changes nothing")
    effect: str = Field(description="what the heartbeat does to the partition's readiness")


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


class FormatExplainOut(ResponseModel):
    version: int = Field(description="the Iceberg table's format version (1, 2 or 3)")
    row_lineage: bool = Field(description="rows carry ids and sequence numbers (format v3)")
    next_row_id: int | None = Field(description="the id the next added row gets (format v3)")
    refused: list[str] = Field(
        description="what lakewarden refuses on this format version, and why in `reason`"
    )
    reason: str


class ExplainOut(ResponseModel):
    table: str
    at: datetime
    snapshot_id: int | None
    policy_version: int
    region: str = Field(description="the region whose scheduler leader runs the table")
    region_leader: bool = Field(
        description="that region has a live scheduler leader (false: no job starts)"
    )
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
    format: FormatExplainOut | None = Field(
        default=None,
        description="the table's format version: what lakewarden does and refuses on it "
        "(deletion vectors, row lineage on v3)",
    )
    readiness: ReadinessExplainOut | None = Field(
        default=None, description="partition readiness: which partitions would become ready"
    )
    tags: TagsExplainOut | None = Field(
        default=None, description="the scheduled tags: the next one due, and which would lapse"
    )
    publish: PublishExplainOut | None = Field(
        default=None, description="write-audit-publish: whether the branch head is audited next"
    )
    orphan_removal: OrphanRemovalExplainOut | None = Field(
        default=None, description="when clean next removes orphan files (orphan_interval_minutes)"
    )
    quota: QuotaExplainOut | None = Field(
        default=None,
        description="the hard quotas of Spark minutes per hour: the table's and its pools'",
    )


class PartitionReadinessPage(Page[PartitionReadinessOut]):
    pass


class HudiServiceOut(ResponseModel):
    service: Literal["compaction", "clustering", "zorder", "clean", "ttl", "stats"]
    due: bool = Field(description="the table has work for this service")
    reason: str = Field(description="why it is due, or why not (the writer's own service, ...)")
    metrics: dict[str, Any] = Field(default_factory=dict, description="what the verdict read")


class HudiHealthOut(ResponseModel):
    """A Hudi table's file-system view and timeline, and its table services' state."""

    table: str
    facts: dict[str, Any] = Field(
        description="table type and version, head instant, timeline length, pending "
        "services, file groups, base and log files and bytes (overall and per partition)"
    )
    base_file_sizes: dict[str, int] = Field(description="base files per size bucket")
    log_files_per_slice: dict[str, int] = Field(
        description="file slices by how many log files a reader merges into each"
    )
    services: list[HudiServiceOut]
    lock: dict[str, Any] = Field(
        description="the lock lakewarden's jobs take on the table (the catalog's "
        "hudi.lock.provider, else the file system's, or the job's own on an object store): "
        "its provider and class, whether other writers share it and why"
    )
    column_stats_index: dict[str, Any] = Field(
        description="Hudi's column-stats index in the metadata table: whether the metadata "
        "table and the index exist, whether it is current (the metadata table holds the "
        "newest write), its columns and files, an indexing pending"
    )


class DeltaCommandOut(ResponseModel):
    command: Literal["optimize", "purge", "cluster", "zorder", "clean_log", "compute_stats"]
    due: bool = Field(description="the table has work for this Delta command")
    reason: str


class DeltaHealthOut(ResponseModel):
    """A Delta table's files and log, and its Delta commands' state."""

    table: str
    facts: dict[str, Any] = Field(
        description="version, protocol, partition columns, files, bytes, records, target "
        "size and small files, deletion vectors, files without statistics "
        "(files_without_stats), commit files in the log, last checkpoint "
        "and its age, the writer's autoOptimize settings, another optimizer seen in the "
        "recent log (other_optimizers: who and the evidence, by the command of lakewarden's "
        "it would fight), liquid clustering columns, the "
        "log's files and bytes, its retention, the oldest commit's age, the log files a "
        "cleanup removes now and the old commits waiting for a checkpoint, per partition "
        "files and bytes"
    )
    file_sizes: dict[str, int] = Field(
        description="live files per size bucket, as fractions of the target file size"
    )
    commands: list[DeltaCommandOut]
