"""Table health from Iceberg metadata alone (pyiceberg, no JVM): what the table looks like,
overall and per partition, a 0-100 score, and the signals whose thresholds fire.

What is measured (the current snapshot): data files, their sizes (min/p50/max) and how many
are small (< compaction target x small_file_ratio); reducible files (per partition, files
beyond ceil(bytes / target): what compaction can remove); live delete files (position and
equality) and the share of rows they delete (`DataFile.deleted_records`); snapshots (count,
ages, how many clean would expire); manifests (count, bytes); files per lookup on the
clustering and Z-order columns; the oldest value of the TTL column and what is past retention.

Score = 100 minus five penalties, each capped, rounded, never below 0:

  small files  40 x min(1, reducible files / data files)
  deletes      40 x min(1, (position-delete rows + 2 x equality-delete rows) / rows
                            / compaction.delete_ratio_threshold)     (equality weighs double,
                                                                       as in Amoro)
  layout       10 x min(1, (files per lookup - max) / max), worst partition, for an enabled
               clustering or zorder section (the larger of the two)
  snapshots     5 x min(1, (snapshots - keep_last) / (4 x keep_last)), when clean would
               expire some (beyond keep_last_snapshots and older than max_snapshot_age_hours)
  manifests     5 when the current snapshot has >= clean.rewrite_manifests_min_count

So a table of well-sized files with no deletes scores 100; one whose files could all be
merged away scores at most 60; all deletes past the threshold as well: at most 20.
"""

from __future__ import annotations

import math
from collections import defaultdict
from datetime import UTC, datetime, timedelta

from pyiceberg.manifest import DataFileContent, ManifestContent
from pyiceberg.table import Table
from pyiceberg.types import DateType, TimestampType, TimestamptzType

from lakewarden.health_model import (
    LiveDelete,
    PartitionHealth,
    TableHealth,
    TTLColumn,
    penalties,
    ratio,
    score,
    signals,
    size_stats,
    ttl_summary,
)
from lakewarden.kinds.ttl import as_datetime
from lakewarden.layout import files_per_lookup
from lakewarden.metadata import DataFile, Partition, jsonable, read_files
from lakewarden.policy import Policy

_NO_DELETES = {"position": 0, "equality": 0, "position_rows": 0, "equality_rows": 0}


def build(
    policy: Policy,
    snapshot_id: int | None,
    data: list[DataFile],
    deletes: list[LiveDelete],
    layout_columns: dict[str, list[str]],
    ttl: TTLColumn | None,
) -> TableHealth:
    """Files and deletes summed up, per partition and overall (pure: unit-tested without a
    table). Snapshots, manifests and the score are filled in by `measure`."""
    comp = policy.compaction
    small_at = comp.small_file_threshold_bytes
    by_partition: dict[Partition, list[DataFile]] = defaultdict(list)
    deletes_of: dict[Partition, dict[str, int]] = defaultdict(lambda: dict(_NO_DELETES))
    for f in data:
        by_partition[f.partition].append(f)
    for d in deletes:
        by_partition.setdefault(d.partition, [])  # e.g. global equality deletes
        counts = deletes_of[d.partition]
        counts[d.kind] += 1
        counts[f"{d.kind}_rows"] += d.records

    def bounds(f: DataFile) -> tuple[datetime, datetime] | None:
        assert ttl is not None
        if ttl.name not in f.bounds:
            return None
        lo, hi = f.bounds[ttl.name]
        return as_datetime(lo, ttl.column_type), as_datetime(hi, ttl.column_type)

    partitions = []
    for part, group in sorted(by_partition.items(), key=lambda kv: repr(kv[0])):
        size = sum(f.size for f in group)
        recs = sum(f.records for f in group)
        deleted = sum(f.deleted_records for f in group)
        small = sum(1 for f in group if f.size < small_at)
        needed = max(1, math.ceil(size / comp.target_file_size_bytes)) if group else 0
        ph = PartitionHealth(
            partition={k: jsonable(v) for k, v in part},
            data_files=len(group),
            bytes=size,
            records=recs,
            file_size=size_stats([f.size for f in group]),
            small_files=small,
            small_file_ratio=ratio(small, len(group)),
            reducible_files=len(group) - needed,
            delete_files=deletes_of.get(part, dict(_NO_DELETES)),
            deleted_records=round(deleted, 1),
            deleted_row_ratio=ratio(deleted, recs),
            files_per_lookup={k: files_per_lookup(group, c) for k, c in layout_columns.items()},
        )
        if ttl is not None:
            spans = [b for f in group if (b := bounds(f)) is not None]
            if spans:
                ph.oldest_ttl_value = min(lo for lo, _ in spans).isoformat()
                if ttl.cutoff is not None:
                    ph.past_retention = any(lo < ttl.cutoff for lo, _ in spans)
        partitions.append(ph)

    records = sum(f.records for f in data)
    deleted = sum(f.deleted_records for f in data)
    small = sum(p.small_files for p in partitions)
    return TableHealth(
        snapshot_id=snapshot_id,
        measured_at="",
        score=100,
        data_files=len(data),
        bytes=sum(f.size for f in data),
        records=records,
        file_size=size_stats([f.size for f in data]),
        small_files=small,
        small_file_ratio=ratio(small, len(data)),
        small_file_threshold_bytes=small_at,
        reducible_files=sum(p.reducible_files for p in partitions),
        delete_files={k: sum(p.delete_files[k] for p in partitions) for k in _NO_DELETES},
        deleted_records=round(deleted, 1),
        deleted_row_ratio=ratio(deleted, records),
        snapshots={"count": 0, "oldest_age_s": 0.0, "newest_age_s": 0.0, "expirable": 0},
        manifests={"count": 0, "data": 0, "deletes": 0, "total_bytes": 0, "avg_bytes": 0.0},
        layout={k: files_per_lookup(data, c) for k, c in layout_columns.items()},
        layout_columns=layout_columns,
        ttl=ttl_summary(ttl, [b for f in data if (b := bounds(f)) is not None], len(data))
        if ttl is not None
        else {"column": None},
        partitions=partitions,
        signals=[],
    )


def _columns(table: Table, columns: list[str]) -> list[str]:
    """The policy's columns the table still has (its schema may have changed since)."""
    schema, out = table.schema(), []
    for c in columns:
        try:
            schema.find_field(c)
        except ValueError:
            continue
        out.append(c)
    return out


def _ttl_column(table: Table, policy: Policy, now: datetime) -> TTLColumn | None:
    t = policy.ttl
    if not t.column or not _columns(table, [t.column]):
        return None
    ftype = table.schema().find_field(t.column).field_type
    if not isinstance(ftype, DateType | TimestampType | TimestamptzType):
        return None
    kind = "date" if isinstance(ftype, DateType) else "timestamp"
    cutoff = None if t.retention_days is None else now - timedelta(days=t.retention_days)
    if cutoff is not None and kind == "date":  # a date is a whole day: keep the cutoff day
        cutoff = cutoff.replace(hour=0, minute=0, second=0, microsecond=0)
    return TTLColumn(t.column, kind, cutoff)


def measure(table: Table, policy: Policy, now: datetime | None = None) -> TableHealth:
    now = now or datetime.now(UTC)
    layout_columns = {
        kind: cols
        for kind, section in (("clustering", policy.clustering), ("zorder", policy.zorder))
        if (cols := _columns(table, section.columns))
    }
    ttl = _ttl_column(table, policy, now)
    wanted = {c for cols in layout_columns.values() for c in cols} | ({ttl.name} if ttl else set())
    files = read_files(table, sorted(wanted))

    current = table.current_snapshot()
    manifests = current.manifests(table.io) if current else []
    specs = table.specs()
    deletes = []
    for m in manifests:
        if m.content != ManifestContent.DELETES:
            continue
        for entry in m.fetch_manifest_entry(table.io, discard_deleted=True):
            f = entry.data_file
            names = [pf.name for pf in specs[f.spec_id].fields]
            part = tuple((n, f.partition[i]) for i, n in enumerate(names))
            kind = "equality" if f.content == DataFileContent.EQUALITY_DELETES else "position"
            deletes.append(LiveDelete(part, kind, f.record_count))

    health = build(policy, files.snapshot_id, files.data, deletes, layout_columns, ttl)
    health.measured_at = now.isoformat()
    if ttl is None and policy.ttl.column:
        health.ttl = {
            "column": policy.ttl.column,
            "note": "the table has no such timestamp or date column: nothing measured",
        }

    snaps = sorted(table.snapshots(), key=lambda s: s.timestamp_ms, reverse=True)
    ages = [(now.timestamp() * 1000 - s.timestamp_ms) / 1000 for s in snaps]
    keep, max_age_s = policy.clean.keep_last_snapshots, policy.clean.max_snapshot_age_hours * 3600
    protected = {r.snapshot_id for r in table.metadata.refs.values()}
    health.snapshots = {
        "count": len(snaps),
        "oldest_age_s": round(max(ages, default=0.0), 1),
        "newest_age_s": round(min(ages, default=0.0), 1),
        # what clean would expire: beyond the newest keep_last, too old, not a branch or tag
        "expirable": sum(
            1
            for s, age in list(zip(snaps, ages, strict=True))[keep:]
            if age > max_age_s and s.snapshot_id not in protected
        ),
    }
    sizes = [m.manifest_length for m in manifests]
    health.manifests = {
        "count": len(manifests),
        "data": sum(1 for m in manifests if m.content == ManifestContent.DATA),
        "deletes": sum(1 for m in manifests if m.content == ManifestContent.DELETES),
        "total_bytes": sum(sizes),
        "avg_bytes": round(sum(sizes) / len(sizes), 1) if sizes else 0.0,
    }
    health.signals = signals(health, policy)
    health.penalties = penalties(health, policy)
    health.score = score(health, policy)
    return health
