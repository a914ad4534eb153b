"""Bin-pack compaction planning.

Pure logic over file descriptions (unit-tested), plus `describe_files` which
reads them from an Iceberg table with pyiceberg.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from pyiceberg.table import Table

from lakewarden.policy import CompactionPolicy


@dataclass(frozen=True)
class DataFile:
    path: str
    size: int
    records: int
    spec_id: int
    partition: tuple[tuple[str, Any], ...]  # ((field name, value), ...)


@dataclass(frozen=True)
class PlanOutcome:
    plan: dict[str, Any] | None  # None: nothing worth doing
    reason: str


def describe_files(table: Table) -> tuple[int | None, list[DataFile]]:
    """The current snapshot id and its live data files."""
    snapshot = table.current_snapshot()
    if snapshot is None:
        return None, []
    specs = table.specs()
    files: list[DataFile] = []
    for task in table.scan(snapshot_id=snapshot.snapshot_id).plan_files():
        f = task.file
        names = [field.name for field in specs[f.spec_id].fields]
        values = [f.partition[i] for i in range(len(names))]
        files.append(
            DataFile(
                path=f.file_path,
                size=f.file_size_in_bytes,
                records=f.record_count,
                spec_id=f.spec_id,
                partition=tuple(zip(names, values, strict=True)),
            )
        )
    return snapshot.snapshot_id, files


def plan_compaction(
    policy: CompactionPolicy, snapshot_id: int | None, files: list[DataFile]
) -> PlanOutcome:
    if snapshot_id is None:
        return PlanOutcome(None, "table has no snapshot: nothing to compact")
    threshold = policy.small_file_threshold_bytes
    target = policy.target_file_size_bytes
    groups: dict[tuple[int, tuple[tuple[str, Any], ...]], list[DataFile]] = defaultdict(list)
    for f in files:
        groups[(f.spec_id, f.partition)].append(f)

    partitions: list[dict[str, Any]] = []
    for (spec_id, partition), group in sorted(groups.items(), key=lambda kv: repr(kv[0])):
        small = [f for f in group if f.size < threshold]
        if len(small) < policy.min_input_files:
            continue
        small_bytes = sum(f.size for f in small)
        after = math.ceil(small_bytes / target)
        if after >= len(small):
            continue
        partitions.append(
            {
                "spec_id": spec_id,
                "partition": {k: _jsonable(v) for k, v in partition},
                "data_files": len(group),
                "small_files": len(small),
                "small_bytes": small_bytes,
                "records": sum(f.records for f in small),
                "expected_files_after": len(group) - len(small) + after,
            }
        )
    small_total = sum(1 for f in files if f.size < threshold)
    if not partitions:
        return PlanOutcome(
            None,
            f"no partition has >= {policy.min_input_files} files under {threshold} bytes "
            f"({small_total} small of {len(files)} data files in {len(groups)} partitions)",
        )
    rewritten = sum(p["small_files"] for p in partitions)
    files_after = (
        len(files) - rewritten + sum(math.ceil(p["small_bytes"] / target) for p in partitions)
    )
    plan = {
        "action": "rewrite_data_files",
        "strategy": "binpack",
        "snapshot_id": snapshot_id,
        "options": {
            "target-file-size-bytes": str(target),
            "min-file-size-bytes": str(threshold),
            "min-input-files": str(policy.min_input_files),
            # commit per file group: a conflict with a writer loses only that group
            "partial-progress.enabled": "true",
            "partial-progress.max-commits": "10",
        },
        "partitions": partitions,
        "files_before": len(files),
        "files_to_rewrite": rewritten,
        "bytes_to_rewrite": sum(p["small_bytes"] for p in partitions),
        "expected_files_after": files_after,
    }
    reason = (
        f"rewrite {rewritten} small files in {len(partitions)} partition(s): "
        f"{len(files)} -> ~{files_after} data files"
    )
    return PlanOutcome(plan, reason)


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)
