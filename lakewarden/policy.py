"""Table policies: what a table owner asks lakewarden to keep true, validated.

One section per maintenance kind. Unknown keys are rejected (a typo must not
silently disable maintenance). A table's stored policy holds only what was set
explicitly; the effective policy layers it over its namespace's defaults over
the built-in defaults (`effective_policy`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from lakewarden.catalog import IDENTIFIER

MiB = 1024 * 1024


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class KindPolicy(_Strict):
    enabled: bool = True
    priority: int = Field(default=0, ge=-100, le=100, description="higher runs first")
    max_attempts: int = Field(default=3, ge=1, le=20, description="attempts before failing")
    timeout_minutes: float = Field(
        default=120, gt=0, description="a job running longer is cancelled"
    )
    # Jobs of a pool share its concurrency limit (LAKEWARDEN_POOL_LIMITS), across schedulers.
    pool: str = Field(default="default", pattern=r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")


class SweptPolicy(KindPolicy):
    """A time-based kind: the scheduler's sweep creates a task every `interval_minutes`."""

    interval_minutes: float = Field(default=60, ge=1)


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
    # small-file threshold, each 4x the one below; the smallest tier holding min_input_files
    # files is merged into files of the next tier's size, so large files are not rewritten
    # again and again while small ones keep arriving.
    tiers: int = Field(default=0, ge=0, le=4)

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


class _LayoutPolicy(KindPolicy):
    enabled: bool = False
    columns: list[str] = Field(default_factory=list, max_length=8)
    # Commits adding at least this many data files since the last such task trigger one.
    min_changed_files: int = Field(default=20, ge=1)
    # Rewrite partitions where a point lookup must open more files than this on average.
    max_files_per_lookup: float = Field(default=2.0, ge=1.0)
    target_file_size_bytes: int = Field(default=128 * MiB, ge=1024, le=16 * 1024 * MiB)

    @model_validator(mode="after")
    def _columns(self) -> _LayoutPolicy:
        for c in self.columns:
            if not IDENTIFIER.match(c):
                raise ValueError(f"invalid column name {c!r}")
        if len(set(self.columns)) != len(self.columns):
            raise ValueError("columns must not repeat")
        if self.enabled and len(self.columns) < self._min_columns:
            raise ValueError(f"needs at least {self._min_columns} column(s) when enabled")
        return self

    _min_columns = 1


class ClusteringPolicy(_LayoutPolicy):
    """Sort files by `columns` (in that order) where the layout is poor."""


class ZOrderPolicy(_LayoutPolicy):
    """Z-order files by `columns` (two or more) where multi-column lookups open many files."""

    _min_columns = 2


class TTLPolicy(SweptPolicy):
    """Expire rows whose event-time `column` is older than `retention_days`."""

    enabled: bool = False
    column: str | None = None
    retention_days: float | None = Field(default=None, gt=0)
    # partition: drop whole partitions (metadata only) when the partitioning aligns with
    # the column; row: a row-level delete; auto: partition when possible, else row.
    level: Literal["auto", "partition", "row"] = "auto"
    # Hold (and alert) instead of running when a run would remove more than this fraction.
    max_fraction: float = Field(default=0.5, gt=0, le=1)

    @model_validator(mode="after")
    def _complete(self) -> TTLPolicy:
        if self.column is not None and not IDENTIFIER.match(self.column):
            raise ValueError(f"invalid column name {self.column!r}")
        if self.enabled and (self.column is None or self.retention_days is None):
            raise ValueError("an enabled TTL needs both column and retention_days")
        return self


class CleanPolicy(SweptPolicy):
    """Expire snapshots, remove orphan files, rewrite manifests."""

    keep_last_snapshots: int = Field(default=5, ge=1)
    max_snapshot_age_hours: float = Field(default=120, gt=0)  # Iceberg's default: 5 days
    remove_orphans: bool = True
    # Files younger than this are never treated as orphans (a writer may be mid-commit);
    # Iceberg's procedure refuses less than 24 hours. Its default: 3 days.
    orphan_min_age_hours: float = Field(default=72, ge=24)
    # Rewrite manifests once the current snapshot has this many (each append adds one).
    rewrite_manifests_min_count: int = Field(default=50, ge=2)


class SLOPolicy(_Strict):
    """The health the owner expects: below `min_score` for `window_minutes` raises an alert."""

    min_score: int = Field(default=50, ge=0, le=100)
    window_minutes: float = Field(default=60, gt=0)


class Policy(_Strict):
    slo: SLOPolicy = Field(default_factory=SLOPolicy)
    compaction: CompactionPolicy = Field(default_factory=CompactionPolicy)
    clustering: ClusteringPolicy = Field(default_factory=ClusteringPolicy)
    zorder: ZOrderPolicy = Field(default_factory=ZOrderPolicy)
    ttl: TTLPolicy = Field(default_factory=TTLPolicy)
    clean: CleanPolicy = Field(default_factory=CleanPolicy)

    @model_validator(mode="after")
    def _one_layout(self) -> Policy:
        if self.clustering.enabled and self.zorder.enabled:
            raise ValueError("enable clustering or zorder, not both: they rewrite the same files")
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
        return used


KINDS = ("compaction", "clustering", "zorder", "ttl", "clean")


def merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Section-wise overlay: the override's keys win, the rest of each section is kept."""
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in base.items()}
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    return out


def parse_policy(raw: dict[str, Any] | None) -> Policy:
    return Policy.model_validate(raw or {})


def effective_policy(
    table_overrides: dict[str, Any] | None, namespace_defaults: dict[str, Any] | None = None
) -> Policy:
    return parse_policy(merge(namespace_defaults or {}, table_overrides or {}))
