"""Table policies: what a table owner asks lakewarden to keep true, validated.

Unknown keys are rejected (a typo must not silently disable maintenance).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

MiB = 1024 * 1024


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CompactionPolicy(_Strict):
    """Bin-pack small files towards the target size.

    A commit triggers a task when the table holds at least `min_small_files`
    more files than its bytes need at the target size ("reducible files").
    """

    enabled: bool = True
    target_file_size_bytes: int = Field(default=128 * MiB, ge=1024, le=16 * 1024 * MiB)
    # Files smaller than target_file_size_bytes * small_file_ratio count as small
    # (Iceberg's own min-file-size default is 75% of the target).
    small_file_ratio: float = Field(default=0.75, gt=0, le=1)
    min_small_files: int = Field(default=12, ge=2, le=100_000)
    # Per partition: fewer small files than this are left alone (Iceberg's min-input-files).
    min_input_files: int = Field(default=5, ge=2, le=100_000)
    priority: int = Field(default=0, ge=-100, le=100)
    max_attempts: int = Field(default=3, ge=1, le=20)

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


class Policy(_Strict):
    compaction: CompactionPolicy = Field(default_factory=CompactionPolicy)

    def for_kind(self, kind: str) -> CompactionPolicy:
        if kind == "compaction":
            return self.compaction
        raise KeyError(kind)


KINDS = ("compaction",)


def parse_policy(raw: dict[str, Any] | None) -> Policy:
    return Policy.model_validate(raw or {})
