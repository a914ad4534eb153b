"""Table policies: what a table owner asks lakewarden to keep true, validated.

One section per maintenance kind. Unknown keys are rejected (a typo must not
silently disable maintenance). A table's stored policy holds only what was set
explicitly; the effective policy layers it over its namespace's defaults over
the built-in defaults (`effective_policy`).
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta
from typing import Annotated, Any, ClassVar, Literal, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from lakewarden import sql_assertions
from lakewarden.catalogs.catalog import IDENTIFIER

MiB = 1024 * 1024

# Upper bounds: generous for any real table, small enough that every derived timedelta,
# byte count and SQL literal stays representable (1e13 minutes once broke every sweep).
MAX_DAYS = 36_500  # 100 years
MAX_HOURS = 876_000  # 100 years
MAX_MINUTES = 525_600  # 1 year
MAX_COUNT = 1_000_000

# Safety floors: going past one takes `allow_below_safety_floors: true` in the section.
TTL_MIN_RETENTION_DAYS = 1
TTL_MAX_FRACTION = 0.99
CLEAN_MIN_SNAPSHOT_AGE_HOURS = 1
_OVERRIDE = "to go past it on purpose, also set {section}.allow_below_safety_floors: true"
# A branch or tag name lakewarden targets or makes: it reaches Spark SQL quoted, as
# `branch_<name>`, so letters, digits, `_` and `-` only.
REF_NAME = r"^[A-Za-z0-9_][A-Za-z0-9_-]{0,99}$"
MAIN_BRANCH = "main"

# Characters no client string may hold: Unicode's controls (Cc: C0, DEL and C1, NEL
# U+0085 among them), its line and paragraph separators (Zl U+2028, Zp U+2029: line breaks
# to a log reader or a terminal) and the bidi controls (marks, embeddings, overrides,
# isolates: they reorder what a person reads, "Trojan Source"). Free text may hold tabs
# and newlines, nothing else of these.
_UNICODE_CONTROLS = r"\x80-\x9f\u2028\u2029\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
CONTROL_CHARACTERS = re.compile(rf"[\x00-\x1f\x7f{_UNICODE_CONTROLS}]")
_CONTROL_IN_FREE_TEXT = re.compile(rf"[\x00-\x08\x0b-\x1f\x7f{_UNICODE_CONTROLS}]")


# No setting means anything below this (a billionth of a day, hour, minute or ratio);
# 1e-320, a denormal, once passed `gt=0` as a timeout or retention.
SMALLEST_NUMBER = 1e-9


def unsafe_input(value: Any, *, where: str = "value", free_text: bool = False) -> str | None:
    """What is wrong with a client-sent value, or None: a control character in any string
    (CONTROL_CHARACTERS; tabs and newlines are allowed in free text), or a number that is
    not finite (JSON's Infinity and NaN) or nonzero and below SMALLEST_NUMBER. Walks nested
    lists and dicts, keys included."""
    control = _CONTROL_IN_FREE_TEXT if free_text else CONTROL_CHARACTERS
    stack: list[tuple[str, Any]] = [(where, value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, str):
            hit = control.search(item)
            if hit:
                return (
                    f"{where} contains the control character U+{ord(hit.group()):04X} "
                    f"at position {hit.start()}: remove it"
                    + ("" if free_text else " (tabs and newlines only in free text)")
                )
        elif isinstance(item, float) and not math.isfinite(item):
            return f"{where} must be a finite number, not {item}"
        elif isinstance(item, float) and 0 < abs(item) < SMALLEST_NUMBER:
            return f"{where} is too small to mean anything ({item}): 0, or {SMALLEST_NUMBER} up"
        elif isinstance(item, dict):
            for key, sub in item.items():
                stack.append((f"a key of {where}", key))
                stack.append((f"{where}.{key}", sub))
        elif isinstance(item, list | tuple):
            stack.extend((f"{where}[{i}]", sub) for i, sub in enumerate(item))
    return None


# Which way a field's change keeps less data or history (see InputModel.DESTRUCTIVE).
Loosening = Literal["lower", "raise", "set", "change"]


class InputModel(BaseModel):
    """Base of what clients send: unknown keys, control characters, NaN and Infinity are
    refused, and types are strict (true is not a count, "5" is not a number; a float field
    takes an int). Fields named in FREE_TEXT may hold tabs and newlines."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)
    FREE_TEXT: ClassVar[frozenset[str]] = frozenset()
    # What in a section can delete data or history (`destructive_changes` reads these, so a
    # new kind that deletes states it here and is judged like the rest):
    # field -> the direction that keeps less: "lower", "raise", "set" (false -> true),
    # "change" (any other value).
    DESTRUCTIVE: ClassVar[dict[str, Loosening]] = {}
    # field -> the bool field it only matters under (orphan age under remove_orphans).
    ONLY_WITH: ClassVar[dict[str, str]] = {}
    # Enabling the section deletes data however it is set (TTL: no default is harmless).
    ENABLING_DELETES: ClassVar[bool] = False

    @field_validator("*", mode="before")
    @classmethod
    def _safe_input(cls, value: Any, info: ValidationInfo) -> Any:
        name = info.field_name or ""
        field = cls.model_fields.get(name)
        if field is not None and _is_input_model(field.annotation) and isinstance(value, dict):
            return value  # the nested model checks its own fields
        problem = unsafe_input(value, where=name, free_text=name in cls.FREE_TEXT)
        if problem is not None:
            raise ValueError(problem)
        return value


def _is_input_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, InputModel)


class KindPolicy(InputModel):
    enabled: bool = True
    priority: int = Field(default=0, ge=-100, le=100, description="higher runs first")
    max_attempts: int = Field(default=3, ge=1, le=20, description="attempts before failing")
    timeout_minutes: float = Field(
        default=120, gt=0, le=MAX_MINUTES, description="a job running longer is cancelled"
    )
    # Jobs of a pool share its concurrency limit (LAKEWARDEN_POOL_LIMITS), across schedulers.
    # pydantic's (Rust) regex: `$` is the end of the text, a trailing newline does not pass.
    pool: str = Field(default="default", pattern=r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")

    def sweep_minutes(self) -> float | None:
        """How often the leader's sweep creates a task of the kind (None: never swept)."""
        return None


class SweptPolicy(KindPolicy):
    """A time-based kind: the scheduler's sweep creates a task every `interval_minutes`."""

    interval_minutes: float = Field(default=60, ge=1, le=MAX_MINUTES)

    def sweep_minutes(self) -> float | None:
        return self.interval_minutes


def is_due(
    section: KindPolicy,
    last_created_at: datetime | None,
    now: datetime,
    *,
    kind: str,
    judged_at: datetime | None = None,
) -> tuple[bool, str]:
    """The sweep's rule, which the leader's sweep and explain both ask: a task of a swept
    `kind` is due when the table has none yet, or once its `sweep_minutes` have passed
    since the last one was created. `judged_at`: when the table's registration judged the
    kind already (a Hudi table's baseline event: `kinds.formats.judged_at_registration`),
    the first task waits its interval from then. Returns (due, why)."""
    every = section.sweep_minutes()
    if every is None:
        return False, f"{kind} is not swept by time under this policy"
    interval = timedelta(minutes=every)
    since_what = f"last {kind} task"
    if last_created_at is None:
        if judged_at is None:
            return True, f"no {kind} task yet"
        last_created_at = judged_at
        since_what = f"no {kind} task yet; the table's registration judged {kind}"
    since = now - last_created_at
    if since < interval:
        return False, f"the next {kind} task is due at {(last_created_at + interval).isoformat()}"
    minutes = since.total_seconds() / 60
    ago = f"{minutes:.0f} min" if minutes < 120 else f"{minutes / 60:.1f} h"
    return True, f"{since_what} {ago} ago, interval {every:g} min"


class CompactionPolicy(KindPolicy):
    """Bin-pack small files towards the target size.

    A commit triggers a task when the table holds at least `min_small_files`
    more files than its bytes need at the target size ("reducible files").
    """

    target_file_size_bytes: int = Field(default=128 * MiB, ge=1024, le=16 * 1024 * MiB)
    # Files smaller than target_file_size_bytes * small_file_ratio count as small
    # (Iceberg's own min-file-size default is 75% of the target).
    small_file_ratio: float = Field(default=0.75, gt=0, le=1)
    min_small_files: int = Field(default=12, ge=2, le=100_000)
    # Per partition: fewer small files than this are left alone (Iceberg's min-input-files).
    min_input_files: int = Field(default=5, ge=2, le=100_000)
    # Delete-file compaction (v2 merge-on-read): rewrite data files whose deleted ratio
    # reaches this, and the position-delete files with them.
    delete_ratio_threshold: float = Field(default=0.2, gt=0, le=1)
    # Tiered merging: 0 = plain bin-pack of every small file. n > 0 = n size tiers below the
    # small-file threshold, each 4x the one below. A tier is full when a partition holds
    # enough files of its own size (the lowest tier min_input_files, the others
    # tier_min_files); the largest full tier is merged, with the smaller files under it,
    # into files of the next tier's size, so large files are not rewritten again and again
    # while small ones keep arriving.
    tiers: int = Field(default=0, ge=0, le=4)
    tier_min_files: int = Field(default=3, ge=2, le=100_000)
    # Tiered only: once no data commit (anything but a rewrite) has touched the table for
    # this long, every partition's small files, of any tier, are merged into target-size
    # files (a major merge), so a table that stopped being written ends as compact as full
    # bin-pack leaves it. The leader's sweep looks that often. null: never.
    tier_quiet_merge_minutes: float | None = Field(default=60, gt=0, le=MAX_MINUTES)
    # Primary-key (upsert) tables bucketed by key (bucket(N, id)): 0 = off. n > 0 = a bucket
    # holding more than n data files is compacted (every partition with 2+ small files is then
    # merged), and every compaction rewrites each data file a delete file applies to, so
    # equality and position deletes are applied into the data files and then dropped.
    max_files_per_bucket: int = Field(default=0, ge=0, le=MAX_COUNT)
    # The branch to compact (null: main). Its own head is planned and rewritten; main and
    # every other branch are untouched.
    branch: str | None = Field(default=None, pattern=REF_NAME)
    # A table that declares a sort order (Iceberg's write order) is compacted into it;
    # false: bin-packed as written (cheaper: no sort).
    sort_by_table_order: bool = True
    # A validated bin-pack's file groups that are plain copies (local Parquet files of the
    # table's current schema, no deletes: lakewarden.spark.arrow_rewrite) are rewritten by
    # pyarrow, not Spark (issue 30: about 3x faster); false: Spark rewrites every group.
    native_rewrite: bool = True

    def sweep_minutes(self) -> float | None:
        return self.tier_quiet_merge_minutes if self.tiers else None

    def tier_bounds(self) -> list[int]:
        """Upper size bound of each tier, smallest first; the last is the small threshold."""
        top = self.small_file_threshold_bytes
        return [max(1, top // 4 ** (self.tiers - k)) for k in range(1, self.tiers + 1)]

    @property
    def small_file_threshold_bytes(self) -> int:
        return int(self.target_file_size_bytes * self.small_file_ratio)

    @model_validator(mode="after")
    def _inputs_fit_trigger(self) -> CompactionPolicy:
        if self.min_input_files > self.min_small_files:
            raise ValueError(
                f"min_input_files ({self.min_input_files}) must not exceed "
                f"min_small_files ({self.min_small_files}): no partition could ever qualify"
            )
        return self


def check_columns(columns: list[str]) -> None:
    """A section's column list: plain identifiers, none twice (ValueError otherwise)."""
    for c in columns:
        if not IDENTIFIER.match(c):
            raise ValueError(f"invalid column name {c!r}")
    if len(set(columns)) != len(columns):
        raise ValueError("columns must not repeat")


class _LayoutPolicy(KindPolicy):
    enabled: bool = False
    columns: list[str] = Field(default_factory=list, max_length=8)
    # Commits adding at least this many data files since the last such task trigger one.
    min_changed_files: int = Field(default=20, ge=1, le=MAX_COUNT)
    # Rewrite partitions where a point lookup must open more files than this on average.
    max_files_per_lookup: float = Field(default=2.0, ge=1.0, le=MAX_COUNT)
    target_file_size_bytes: int = Field(default=128 * MiB, ge=1024, le=16 * 1024 * MiB)

    @model_validator(mode="after")
    def _columns(self) -> _LayoutPolicy:
        check_columns(self.columns)
        if self.enabled and len(self.columns) < self._min_columns:
            raise ValueError(f"needs at least {self._min_columns} column(s) when enabled")
        return self

    _min_columns = 1


class ClusteringPolicy(_LayoutPolicy):
    """Sort files by `columns` (in that order) where the layout is poor; with no columns,
    by the sort order the table declares (a table without one is refused at PUT)."""

    _min_columns = 0


class ZOrderPolicy(_LayoutPolicy):
    """Z-order files by `columns` (two or more) where multi-column lookups open many files."""

    # The space-filling curve: `hilbert` is Hudi's layout strategy only (an Iceberg or
    # Delta table's zorder planner skips it, saying so).
    curve: Literal["z-order", "hilbert"] = "z-order"

    _min_columns = 2


class TTLPolicy(SweptPolicy):
    """Expire rows whose event-time `column` is older than `retention_days`."""

    ENABLING_DELETES = True
    DESTRUCTIVE = {
        "column": "change",
        "retention_days": "lower",
        "max_fraction": "raise",
        "undo_retention_days": "lower",
        "branch": "change",
        "allow_below_safety_floors": "set",
    }

    enabled: bool = False
    column: str | None = None
    retention_days: float | None = Field(default=None, gt=0, le=MAX_DAYS)
    # partition: drop whole partitions (metadata only) when the partitioning aligns with
    # the column; row: a row-level delete; auto: partition when possible, else row.
    level: Literal["auto", "partition", "row"] = "auto"
    # Hold (and alert) instead of running when a run would remove more than this fraction.
    max_fraction: float = Field(default=0.5, gt=0, le=1)
    # Before a delete commits, the snapshot before it is tagged lakewarden-pre-ttl-<task>
    # and kept this long (clean honours the tag): a wrong TTL can be rolled back.
    undo_retention_days: int = Field(default=7, ge=1, le=3650)
    # The branch whose rows expire: main unless told otherwise (other branches keep theirs).
    branch: str = Field(default=MAIN_BRANCH, pattern=REF_NAME)
    # Lets retention_days go below 1 and max_fraction above 0.99 (the hard bounds still hold).
    allow_below_safety_floors: bool = False

    @model_validator(mode="after")
    def _complete(self) -> TTLPolicy:
        if self.column is not None and not IDENTIFIER.match(self.column):
            raise ValueError(f"invalid column name {self.column!r}")
        if self.enabled and (self.column is None or self.retention_days is None):
            raise ValueError("an enabled TTL needs both column and retention_days")
        if not self.allow_below_safety_floors:
            if self.retention_days is not None and self.retention_days < TTL_MIN_RETENTION_DAYS:
                raise ValueError(
                    f"retention_days {self.retention_days:g} is below the safety floor of "
                    f"{TTL_MIN_RETENTION_DAYS} day: {_OVERRIDE.format(section='ttl')}"
                )
            if self.max_fraction > TTL_MAX_FRACTION:
                raise ValueError(
                    f"max_fraction {self.max_fraction:g} is above the safety limit of "
                    f"{TTL_MAX_FRACTION:g} (a run could remove almost every row): "
                    + _OVERRIDE.format(section="ttl")
                )
        return self


class CleanPolicy(SweptPolicy):
    """Expire snapshots, remove orphan files, rewrite manifests."""

    DESTRUCTIVE = {
        "max_snapshot_age_hours": "lower",
        "keep_last_snapshots": "lower",
        "remove_orphans": "set",
        "orphan_min_age_hours": "lower",
        "allow_below_safety_floors": "set",
    }
    ONLY_WITH = {"orphan_min_age_hours": "remove_orphans"}

    keep_last_snapshots: int = Field(default=5, ge=1, le=MAX_COUNT)
    max_snapshot_age_hours: float = Field(  # Iceberg's default: 5 days
        default=120, gt=0, le=MAX_HOURS
    )
    remove_orphans: bool = True
    # Orphan removal lists every file under the table's location (expensive on a large
    # table): a clean task includes it only once this long has passed since it last ran on
    # the table, however often the section's interval_minutes runs expiry. Default: daily.
    orphan_interval_minutes: float = Field(default=1440, ge=1, le=MAX_MINUTES)
    # Files younger than this are never treated as orphans (a writer may be mid-commit);
    # Iceberg's procedure refuses less than 24 hours. Its default: 3 days.
    orphan_min_age_hours: float = Field(default=72, ge=24, le=MAX_HOURS)
    # Rewrite manifests once the current snapshot has this many (each append adds one).
    rewrite_manifests_min_count: int = Field(default=50, ge=2, le=MAX_COUNT)
    # Lets max_snapshot_age_hours go below 1 (the hard bound, more than 0, still holds).
    allow_below_safety_floors: bool = False

    @model_validator(mode="after")
    def _floors(self) -> CleanPolicy:
        if (
            not self.allow_below_safety_floors
            and self.max_snapshot_age_hours < CLEAN_MIN_SNAPSHOT_AGE_HOURS
        ):
            raise ValueError(
                f"max_snapshot_age_hours {self.max_snapshot_age_hours:g} is below the safety "
                f"floor of {CLEAN_MIN_SNAPSHOT_AGE_HOURS} hour: "
                + _OVERRIDE.format(section="clean")
            )
        return self


class StatsPolicy(SweptPolicy):
    """Column statistics (distinct-count sketches) kept fresh for query planners; off by
    default: computing them reads every row of the columns."""

    enabled: bool = False
    # The columns to sketch ([]: every top-level column of a primitive type).
    columns: list[str] = Field(default_factory=list, max_length=64)
    # Statistics of a snapshot older than this are stale once the table changed since (a
    # rewrite makes them stale at once).
    max_age_hours: float = Field(default=24, gt=0, le=MAX_HOURS)
    interval_minutes: float = Field(default=360, ge=1, le=MAX_MINUTES)

    @model_validator(mode="after")
    def _columns(self) -> StatsPolicy:
        check_columns(self.columns)
        return self


NullRate = Annotated[float, Field(ge=0, le=1)]  # a share of rows
AssertionName = Annotated[str, Field(pattern=REF_NAME)]
AssertionSQL = Annotated[str, Field(min_length=1, max_length=4000)]
MAX_ROWS = 10**15  # a batch's rows: no bound in practice


class PublishPolicy(InputModel):
    """Write-audit-publish (lakewarden.publish): writers commit to `branch`; after each of
    its commits the leader audits what the branch holds beyond main (from the manifests: no
    scan) and fast-forwards main to it when every check passes; a failed check alerts and
    leaves main as it is."""

    enabled: bool = False
    branch: str = Field(default="audit", pattern=REF_NAME)
    # Rows the batch (the branch's data files main does not hold) must have.
    min_rows: int = Field(default=0, ge=0, le=MAX_ROWS)
    max_rows: int = Field(default=MAX_ROWS, ge=0, le=MAX_ROWS)
    # The batch's rows against the last published batch's: within [1/x, x] of them.
    max_row_ratio: float | None = Field(default=None, ge=1, le=1_000_000)
    # Per column, the most of the batch's rows that may be null (0..1).
    max_null_rate: dict[str, NullRate] = Field(default_factory=dict, max_length=64)
    # The branch head's schema must be main's.
    schema_unchanged: bool = True
    # Named DuckDB SELECTs over the view `batch` (the batch's rows) that must return no row,
    # run sandboxed in the leader (lakewarden.sql_assertions); a batch whose data files are
    # larger than sql_max_batch_mb fails them rather than being read into the leader.
    sql_assertions: dict[AssertionName, AssertionSQL] = Field(default_factory=dict, max_length=16)
    sql_max_batch_mb: float = Field(default=256, gt=0, le=16_384)
    sql_timeout_seconds: float = Field(default=60, gt=0, le=3600)

    @model_validator(mode="after")
    def _valid(self) -> PublishPolicy:
        if self.branch == MAIN_BRANCH:
            raise ValueError("publish.branch must not be main: writers commit to an audit branch")
        check_columns(list(self.max_null_rate))
        for name, sql in self.sql_assertions.items():
            try:
                sql_assertions.check_query(sql)
            except ValueError as exc:
                raise ValueError(f"publish.sql_assertions.{name} {exc}") from None
        if self.min_rows > self.max_rows:
            raise ValueError("publish.min_rows must not exceed max_rows")
        return self


class SLOPolicy(InputModel):
    """The health the owner expects: below `min_score` for `window_minutes` raises an alert."""

    min_score: int = Field(default=50, ge=0, le=100)
    window_minutes: float = Field(default=60, gt=0, le=MAX_MINUTES)


# The kinds that can make a partition fast to read (readiness.require).
ReadinessKind = Literal["compaction", "clustering", "zorder"]
READINESS_KINDS: tuple[str, ...] = get_args(ReadinessKind)


class ReadinessPolicy(InputModel):
    """When a partition is ready for downstream readers: complete by `rule`, and each kind
    in `require` has looked at it since its last data commit (lakewarden.readiness)."""

    # A ready tag keeps its snapshot from expiry: a shorter life lets clean drop it sooner.
    DESTRUCTIVE = {"tag_retention_days": "lower"}
    ONLY_WITH = {"tag_retention_days": "tag"}

    enabled: bool = False
    # The partition source column: the table's spec must partition by it with an identity,
    # hour, day, month or year transform (checked against the table).
    partition: str | None = None
    # watermark: the writer's posted watermark is at or past the partition's end.
    # quiet: no commit touched the partition for quiet_minutes after its end.
    rule: Literal["watermark", "quiet"] = "quiet"
    quiet_minutes: float = Field(default=60, gt=0, le=MAX_MINUTES)
    # A time-based period with no commit and no writer's heartbeat this long after its end
    # is overdue: not ready, "late: ...", and alerted (partition_overdue). None: never.
    deadline_minutes: float | None = Field(default=None, gt=0, le=MAX_MINUTES)
    require: list[ReadinessKind] = Field(default_factory=list, max_length=len(READINESS_KINDS))
    # Tag `ready-<partition>` on the snapshot that made the partition ready, kept this long.
    tag: bool = False
    tag_retention_days: int = Field(default=7, ge=1, le=3650)

    @model_validator(mode="after")
    def _complete(self) -> ReadinessPolicy:
        if self.partition is not None and not IDENTIFIER.match(self.partition):
            raise ValueError(f"invalid column name {self.partition!r}")
        if self.enabled and self.partition is None:
            raise ValueError("an enabled readiness needs partition (the partition column)")
        if len(set(self.require)) != len(self.require):
            raise ValueError("require must not repeat a kind")
        return self


class TagsPolicy(InputModel):
    """Scheduled tags: once a day (`daily-YYYYMMDD`) or an hour (`hourly-YYYYMMDDHH`, UTC),
    the leader's sweep tags main's current snapshot, so time travel to it outlives snapshot
    expiry. Each tag is kept `retention_days` from when it is made (its max-ref-age: Iceberg's
    expire_snapshots drops it then, and its snapshot with it unless something else keeps it)."""

    DESTRUCTIVE = {"retention_days": "lower"}

    enabled: bool = False
    every: Literal["daily", "hourly"] = "daily"
    retention_days: int = Field(default=30, ge=1, le=MAX_DAYS)


class ValidationPolicy(InputModel):
    """Post-rewrite validation (`lakewarden.spark.validation`): after a rewrite job
    (compaction, clustering, Z-order) commits, each partition it touched must hold the same
    rows as before: row count and an order-independent checksum of `columns`, read with
    Spark at the snapshot before the rewrite and at its last commit. A mismatch fails the
    task, raises a critical alert and undoes the rewrite. On by default: the issue asks it of
    every rewrite job; `enabled: false` turns it off for a table."""

    enabled: bool = True
    # The columns checksummed; empty: every top-level column of a primitive type.
    columns: list[str] = Field(default_factory=list, max_length=100)
    # The cost cap: validation reads the touched partitions twice (before, after); when
    # they held more rows than this before the rewrite, it is skipped and says so.
    max_rows: int = Field(default=10_000_000, ge=1, le=10**12)

    @model_validator(mode="after")
    def _columns(self) -> ValidationPolicy:
        for c in self.columns:
            if not IDENTIFIER.match(c):
                raise ValueError(f"invalid column name {c!r}")
        if len(set(self.columns)) != len(self.columns):
            raise ValueError("columns must not repeat")
        return self


class QuotaPolicy(InputModel):
    """Hard quota (`lakewarden.policy.quotas`): the Spark minutes the table's jobs may use in any
    trailing hour; past it, its tasks wait for a slot (dispatch skips them and says why).
    None: no quota. Pools have theirs in settings (LAKEWARDEN_POOL_QUOTAS)."""

    spark_minutes_per_hour: float | None = Field(default=None, gt=0, le=MAX_MINUTES)


class Policy(InputModel):
    slo: SLOPolicy = Field(default_factory=SLOPolicy)
    compaction: CompactionPolicy = Field(default_factory=CompactionPolicy)
    clustering: ClusteringPolicy = Field(default_factory=ClusteringPolicy)
    zorder: ZOrderPolicy = Field(default_factory=ZOrderPolicy)
    ttl: TTLPolicy = Field(default_factory=TTLPolicy)
    clean: CleanPolicy = Field(default_factory=CleanPolicy)
    stats: StatsPolicy = Field(default_factory=StatsPolicy)
    publish: PublishPolicy = Field(default_factory=PublishPolicy)
    readiness: ReadinessPolicy = Field(default_factory=ReadinessPolicy)
    tags: TagsPolicy = Field(default_factory=TagsPolicy)
    quota: QuotaPolicy = Field(default_factory=QuotaPolicy)
    validation: ValidationPolicy = Field(default_factory=ValidationPolicy)

    @model_validator(mode="after")
    def _one_layout(self) -> Policy:
        if self.clustering.enabled and self.zorder.enabled:
            raise ValueError("enable clustering or zorder, not both: they rewrite the same files")
        if self.readiness.enabled:
            off = [k for k in self.readiness.require if not self.for_kind(k).enabled]
            if off:
                raise ValueError(
                    f"readiness.require names {', '.join(off)}, disabled by this policy: "
                    "enable it, or drop it from require (it would never run)"
                )
            branch = self.compaction.branch
            if "compaction" in self.readiness.require and branch not in (None, MAIN_BRANCH):
                raise ValueError(
                    f"readiness judges main's partitions, but compaction targets branch "
                    f"{branch!r}: drop compaction from readiness.require, or compact main"
                )
        return self

    def for_kind(self, kind: str) -> KindPolicy:
        section = getattr(self, kind, None)
        if not isinstance(section, KindPolicy):
            raise KeyError(kind)
        return section

    def columns_used(self) -> set[str]:
        used = set()
        for section in (self.clustering, self.zorder):
            if section.enabled:
                used |= set(section.columns)
        if self.ttl.enabled and self.ttl.column:
            used.add(self.ttl.column)
        if self.readiness.enabled and self.readiness.partition:
            used.add(self.readiness.partition)
        if self.validation.enabled:
            used |= set(self.validation.columns)
        if self.stats.enabled:
            used |= set(self.stats.columns)
        if self.publish.enabled:
            used |= set(self.publish.max_null_rate)
        return used


# The maintenance kinds: the sections of Policy that are a KindPolicy, in their order.
# lakewarden.kinds.REGISTRY has one Kind for each, and checks so when imported.
KINDS: tuple[str, ...] = tuple(
    name
    for name, field in Policy.model_fields.items()
    if isinstance(field.annotation, type) and issubclass(field.annotation, KindPolicy)
)


def merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Section-wise overlay: the override's keys win, the rest of each section is kept."""
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in base.items()}
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    return out


def first_problem(exc: ValidationError) -> str:
    """`field.path: message` of a policy's first validation error, for reasons and alerts."""
    first = exc.errors()[0]
    return f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}"


def parse_policy(raw: dict[str, Any] | None) -> Policy:
    return Policy.model_validate(raw or {})


def validation_problems(exc: ValidationError) -> str:
    """Why a policy did not validate, field by field (`compaction.min_files: ...; ...`)."""
    return "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())


def effective_policy(
    table_overrides: dict[str, Any] | None, namespace_defaults: dict[str, Any] | None = None
) -> Policy:
    return parse_policy(merge(namespace_defaults or {}, table_overrides or {}))


def destructive_changes(before: Policy, after: Policy) -> list[str]:
    """What in going from `before` to `after` (effective policies) can delete data or
    history, each said in words. Such a change needs the admin role on the table's scope.

    Judged by effect, section by section, from each section's DESTRUCTIVE fields: a section
    that is off deletes nothing, so turning one on is measured against the built-in
    defaults (the most an operator may turn on), not against the settings it held while
    off. A section whose ENABLING_DELETES (TTL) needs admin to turn on at all."""
    found: list[str] = []
    for name in Policy.model_fields:
        b, a = getattr(before, name), getattr(after, name)
        if not isinstance(a, InputModel) or not (a.DESTRUCTIVE or a.ENABLING_DELETES):
            continue
        if not getattr(a, "enabled", True):
            continue  # off: it deletes nothing, whatever else it says
        was_on = getattr(b, "enabled", True)
        if a.ENABLING_DELETES and not was_on:
            found.append(f"enables {name}")
        default = type(a)()
        for field, way in a.DESTRUCTIVE.items():
            guard = a.ONLY_WITH.get(field)
            if guard is not None and not getattr(a, guard):
                continue
            if a.ENABLING_DELETES and not was_on and way != "set":
                continue  # enabling it is already named, and needs admin on its own
            # What the table had in effect: the old value while the section (and the
            # field's guard) was on, the built-in default where it was off.
            base_on = was_on and (guard is None or getattr(b, guard))
            old, new = getattr(b if base_on else default, field), getattr(a, field)
            if _loosens(way, old, new):
                # Said against the default when the section or its guard is turned on now.
                turned_on = None if base_on else (name if not was_on else f"{name}.{guard}")
                found.append(_said(name, field, way, old, new, turned_on=turned_on))
    return found


def _loosens(way: Loosening, old: Any, new: Any) -> bool:
    if way == "set":
        return bool(new) and not old
    if way == "change":
        return bool(new != old)
    if old is None or new is None:  # an unset bound (TTL's retention before it is set)
        return False
    return bool(new < old) if way == "lower" else bool(new > old)


def _said(
    section: str, field: str, way: Loosening, old: Any, new: Any, *, turned_on: str | None
) -> str:
    def shown(v: Any) -> str:
        return f"{v:g}" if isinstance(v, float) else str(v)

    if turned_on is not None:  # measured against the built-in default
        if way == "set":
            return f"enables {turned_on} with {field} set"
        return (
            f"enables {turned_on} with {field} {shown(new)} "
            f"({'below' if way == 'lower' else 'beyond'} the built-in default {shown(old)})"
        )
    if way == "set":
        return f"{'enables' if field == 'remove_orphans' else 'sets'} {section}.{field}"
    verb = {"lower": "lowers", "raise": "raises", "change": "changes"}[way]
    return f"{verb} {section}.{field} from {shown(old)} to {shown(new)}"
