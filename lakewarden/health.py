"""Table health from Iceberg metadata alone (pyiceberg, no JVM): what the table looks
like, a 0-100 score, and the signals whose thresholds fire.

Score: 100 minus penalties, each capped:
  small files    up to 40  (share of data files that are reducible at the target size)
  deleted rows   up to 40  (equality deletes weigh twice position deletes; full at 20%)
  layout         up to 10  (files per lookup over the policy's maximum, when enabled)
  bloat          up to 10  (snapshots beyond 4 x keep_last; manifests over the rewrite count)
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from pyiceberg.table import Table

from lakewarden.kinds.ttl import as_datetime
from lakewarden.layout import files_per_lookup
from lakewarden.metadata import DataFile, jsonable, read_files
from lakewarden.policy import Policy


@dataclass(frozen=True)
class Signal:
    kind: str
    metric: str
    value: float
    threshold: float
    reason: str


@dataclass
class PartitionHealth:
    partition: dict[str, Any]
    data_files: int
    bytes: int
    records: int
    small_files: int
    deleted_row_ratio: float
    files_per_lookup: dict[str, float | None] = field(default_factory=dict)
    oldest_ttl_value: str | None = None


@dataclass
class TableHealth:
    snapshot_id: int | None
    measured_at: str
    score: int
    data_files: int
    bytes: int
    records: int
    file_size: dict[str, int]
    small_files: int
    reducible_files: int
    delete_files: dict[str, int]
    deleted_row_ratio: float
    snapshots: dict[str, float]
    manifests: dict[str, float]
    layout: dict[str, float | None]
    ttl: dict[str, Any]
    partitions: list[PartitionHealth]
    signals: list[Signal]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _ttl_type(table: Table, column: str) -> str:
    from pyiceberg.types import DateType

    return "date" if isinstance(table.schema().find_field(column).field_type, DateType) else "ts"


def measure(table: Table, policy: Policy, now: datetime | None = None) -> TableHealth:
    now = now or datetime.now(UTC)
    layout_cols = {
        k: s.columns
        for k, s in (("clustering", policy.clustering), ("zorder", policy.zorder))
        if s.columns
    }
    ttl_col = policy.ttl.column
    columns = sorted(
        {c for cols in layout_cols.values() for c in cols} | ({ttl_col} if ttl_col else set())
    )
    files = read_files(table, columns)
    data = files.data
    comp = policy.compaction
    small = [f for f in data if f.size < comp.small_file_threshold_bytes]
    total_bytes = sum(f.size for f in data)
    records = sum(f.records for f in data)
    by_partition: dict[Any, list[DataFile]] = defaultdict(list)
    for f in data:
        by_partition[f.partition].append(f)
    # Files merge only within a partition: count what each partition holds beyond its need.
    reducible = sum(
        len(group) - max(1, math.ceil(sum(f.size for f in group) / comp.target_file_size_bytes))
        for group in by_partition.values()
    )
    pos = [d for d in files.deletes if d.kind == "position"]
    eq = [d for d in files.deletes if d.kind == "equality"]
    pos_rows, eq_rows = sum(d.records for d in pos), sum(d.records for d in eq)
    deleted_ratio = round(sum(f.deleted_records for f in data) / records, 4) if records else 0.0
    ttl_type = _ttl_type(table, ttl_col) if ttl_col else ""

    partitions = []
    for part, group in sorted(by_partition.items(), key=lambda kv: repr(kv[0])):
        recs = sum(f.records for f in group)
        ph = PartitionHealth(
            partition={k: jsonable(v) for k, v in part},
            data_files=len(group),
            bytes=sum(f.size for f in group),
            records=recs,
            small_files=sum(1 for f in group if f.size < comp.small_file_threshold_bytes),
            deleted_row_ratio=round(sum(f.deleted_records for f in group) / recs, 4)
            if recs
            else 0.0,
            files_per_lookup={k: files_per_lookup(group, cols) for k, cols in layout_cols.items()},
        )
        if ttl_col:
            lows = [f.bounds[ttl_col][0] for f in group if ttl_col in f.bounds]
            if lows:
                ph.oldest_ttl_value = as_datetime(min(lows), ttl_type).isoformat()
        partitions.append(ph)

    snaps = sorted(table.snapshots(), key=lambda s: s.timestamp_ms)
    ages = [
        (now - datetime.fromtimestamp(s.timestamp_ms / 1000, tz=UTC)).total_seconds() for s in snaps
    ]
    current = table.current_snapshot()
    manifest_sizes = [m.manifest_length for m in current.manifests(table.io)] if current else []
    layout = {k: files_per_lookup(data, cols) for k, cols in layout_cols.items()}

    ttl: dict[str, Any] = {"column": ttl_col}
    if ttl_col and policy.ttl.retention_days is not None:
        cutoff = now - timedelta(days=policy.ttl.retention_days)
        bounded = [
            (
                f,
                as_datetime(f.bounds[ttl_col][0], ttl_type),
                as_datetime(f.bounds[ttl_col][1], ttl_type),
            )
            for f in data
            if ttl_col in f.bounds
        ]
        ttl.update(
            cutoff=cutoff.isoformat(),
            oldest=min((lo for _, lo, _ in bounded), default=None),
            files_past_retention=sum(1 for _, _, hi in bounded if hi < cutoff),
            files_straddling=sum(1 for _, lo, hi in bounded if lo < cutoff <= hi),
        )
        if ttl["oldest"] is not None:
            ttl["oldest"] = ttl["oldest"].isoformat()

    health = TableHealth(
        snapshot_id=files.snapshot_id,
        measured_at=now.isoformat(),
        score=100,
        data_files=len(data),
        bytes=total_bytes,
        records=records,
        file_size={
            "min": min((f.size for f in data), default=0),
            "p50": int(statistics.median([f.size for f in data])) if data else 0,
            "max": max((f.size for f in data), default=0),
        },
        small_files=len(small),
        reducible_files=reducible,
        delete_files={
            "position": len(pos),
            "equality": len(eq),
            "position_rows": pos_rows,
            "equality_rows": eq_rows,
        },
        deleted_row_ratio=deleted_ratio,
        snapshots={
            "count": len(snaps),
            "oldest_age_s": round(max(ages, default=0), 1),
            "newest_age_s": round(min(ages, default=0), 1),
        },
        manifests={
            "count": len(manifest_sizes),
            "total_bytes": sum(manifest_sizes),
            "avg_bytes": round(statistics.mean(manifest_sizes), 1) if manifest_sizes else 0,
        },
        layout=layout,
        ttl=ttl,
        partitions=partitions,
        signals=[],
    )
    health.signals = signals(health, policy)
    health.score = score(health, policy)
    return health


def signals(h: TableHealth, policy: Policy) -> list[Signal]:
    out = []
    c = policy.compaction
    if h.reducible_files >= c.min_small_files:
        out.append(
            Signal(
                "compaction",
                "reducible_files",
                h.reducible_files,
                c.min_small_files,
                f"{h.reducible_files} files more than the bytes need at the target "
                f"size (>= {c.min_small_files})",
            )
        )
    if h.deleted_row_ratio >= c.delete_ratio_threshold:
        out.append(
            Signal(
                "compaction",
                "deleted_row_ratio",
                h.deleted_row_ratio,
                c.delete_ratio_threshold,
                f"{h.deleted_row_ratio:.0%} of rows are deleted by delete files",
            )
        )
    for kind in ("clustering", "zorder"):
        section = policy.clustering if kind == "clustering" else policy.zorder
        value = h.layout.get(kind)
        if section.enabled and value is not None and value > section.max_files_per_lookup:
            out.append(
                Signal(
                    kind,
                    "files_per_lookup",
                    value,
                    section.max_files_per_lookup,
                    f"a lookup on {section.columns} opens {value} files",
                )
            )
    if policy.ttl.enabled and (h.ttl.get("files_past_retention") or h.ttl.get("files_straddling")):
        out.append(
            Signal(
                "ttl",
                "files_past_retention",
                h.ttl.get("files_past_retention", 0),
                0,
                f"rows older than {policy.ttl.retention_days:g} days remain "
                f"(oldest {h.ttl.get('oldest')})",
            )
        )
    cl = policy.clean
    max_age_s = cl.max_snapshot_age_hours * 3600
    if h.snapshots["count"] > cl.keep_last_snapshots and h.snapshots["oldest_age_s"] > max_age_s:
        out.append(
            Signal(
                "clean",
                "snapshots",
                h.snapshots["count"],
                cl.keep_last_snapshots,
                f"{h.snapshots['count']:.0f} snapshots, the oldest "
                f"{h.snapshots['oldest_age_s'] / 3600:.1f} h old",
            )
        )
    if h.manifests["count"] >= cl.rewrite_manifests_min_count:
        out.append(
            Signal(
                "clean",
                "manifests",
                h.manifests["count"],
                cl.rewrite_manifests_min_count,
                f"{h.manifests['count']:.0f} manifests in the current snapshot",
            )
        )
    return out


def score(h: TableHealth, policy: Policy) -> int:
    penalty = 0.0
    if h.data_files:
        penalty += 40 * max(0.0, h.reducible_files) / h.data_files
    if h.records:
        weighted = h.delete_files["position_rows"] + 2 * h.delete_files["equality_rows"]
        penalty += 40 * min(1.0, weighted / h.records / 0.2)
    for kind, section in (("clustering", policy.clustering), ("zorder", policy.zorder)):
        value = h.layout.get(kind)
        if section.enabled and value is not None and value > section.max_files_per_lookup:
            penalty += 10 * min(
                1.0, (value - section.max_files_per_lookup) / section.max_files_per_lookup
            )
            break
    keep = policy.clean.keep_last_snapshots
    if h.snapshots["count"] > 4 * keep:
        penalty += 5
    if h.manifests["count"] >= policy.clean.rewrite_manifests_min_count:
        penalty += 5
    return max(0, round(100 - penalty))
