"""Table health, pure: what `lakewarden.health.measure` read of a table summed up (overall
and per partition), and its judgement: the signals whose thresholds fire and the 0-100
score. Everything here works on numbers alone, so it is unit-tested without a table.

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

Informational, not scored: file-size buckets, commit rate and whether a streaming writer looks
active, partition skew, metadata-file bloat, and (read only when asked, `lakewarden.storage`)
bytes no snapshot references and bytes only old snapshots hold. None of them slows a reader
the way small files and deletes do, and a score change would move SLO alerts and the
worst-first order of the fleet: they are shown for the operator to judge.

The layout kinds (files per lookup on the section's columns) are the registry's kinds whose
section is a clustering or Z-order policy.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections import defaultdict
from collections.abc import Collection, Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from lakewarden.health.files_per_lookup import files_per_lookup
from lakewarden.kinds import REGISTRY
from lakewarden.kinds.clustering import LayoutPolicy
from lakewarden.kinds.ttl import as_datetime
from lakewarden.metadata import DataFile, KeyBucket, Partition, jsonable
from lakewarden.policy.model import Policy

# Score weights: the most each factor can take off 100.
W_SMALL_FILES = 40.0
W_DELETES = 40.0
W_LAYOUT = 10.0
W_SNAPSHOTS = 5.0
W_MANIFESTS = 5.0
EQUALITY_WEIGHT = 2.0  # an equality-delete row costs readers more than a position delete


@dataclass(frozen=True)
class Signal:
    kind: str  # the maintenance kind whose threshold fired
    metric: str
    value: float
    threshold: float
    reason: str


MiB = 1024 * 1024
GiB = 1024 * MiB
# File-size buckets (label, min bytes inclusive, max bytes exclusive or None): the histogram
# operators of peer tools read. Their labels and bounds are a contract (the dashboard draws
# one bar per bucket): change them together with its consumers.
SIZE_BUCKETS: tuple[tuple[str, int, int | None], ...] = (
    ("<1 MB", 0, MiB),
    ("1-8 MB", MiB, 8 * MiB),
    ("8-32 MB", 8 * MiB, 32 * MiB),
    ("32-128 MB", 32 * MiB, 128 * MiB),
    ("128-512 MB", 128 * MiB, 512 * MiB),
    (">512 MB", 512 * MiB, None),
)
OVER_1GB = GiB  # files_over_1gb counts files of at least this many bytes


def size_buckets(sizes: Iterable[int]) -> list[dict[str, Any]]:
    """Files and bytes per `SIZE_BUCKETS` bucket, every bucket listed (empty ones too)."""
    out: list[dict[str, Any]] = [
        {"label": label, "min_bytes": lo, "max_bytes": hi, "files": 0, "bytes": 0}
        for label, lo, hi in SIZE_BUCKETS
    ]
    for size in sizes:
        bucket = next(b for b in reversed(out) if size >= b["min_bytes"])
        bucket["files"] += 1
        bucket["bytes"] += size
    return out


def files_over(sizes: Iterable[int], at: int = OVER_1GB) -> int:
    return sum(1 for s in sizes if s >= at)


def size_stats(sizes: list[int]) -> dict[str, int]:
    return {
        "min": min(sizes, default=0),
        "p50": int(statistics.median(sizes)) if sizes else 0,
        "max": max(sizes, default=0),
    }


def ratio(part: float, whole: float) -> float:
    return round(part / whole, 4) if whole else 0.0


@dataclass
class PartitionHealth:
    partition: dict[str, Any]  # partition field -> value ({} when unpartitioned)
    data_files: int
    bytes: int
    records: int
    file_size: dict[str, int]  # min / p50 / max bytes
    file_size_buckets: list[dict[str, Any]]  # size_buckets() of the data files
    files_over_1gb: int
    small_files: int
    small_file_ratio: float
    reducible_files: int  # files beyond ceil(bytes / target): what compaction can remove
    # position, equality, position_rows, equality_rows; deletion_vectors and their rows
    # (format v3), counted in position too
    delete_files: dict[str, int]
    deleted_records: float  # rows the delete files remove (estimated, DataFile.deleted_records)
    deleted_row_ratio: float
    files_per_lookup: dict[str, float | None] = field(default_factory=dict)  # per layout kind
    oldest_ttl_value: str | None = None  # min lower bound of the TTL column
    past_retention: bool | None = None  # some row is older than the TTL cutoff


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
    snapshots: dict[str, float]  # count, oldest_age_s, newest_age_s, expirable
    manifests: dict[str, float]  # count, data, deletes, total_bytes, avg_bytes
    layout: dict[str, float | None]  # layout kind -> files per lookup over the whole table
    ttl: dict[str, Any]
    partitions: list[PartitionHealth]
    signals: list[Signal]
    small_file_ratio: float = 0.0
    small_file_threshold_bytes: int = 0
    deleted_records: float = 0.0
    layout_columns: dict[str, list[str]] = field(default_factory=dict)
    penalties: dict[str, float] = field(default_factory=dict)  # what the score lost, per factor
    file_size_buckets: list[dict[str, Any]] = field(default_factory=lambda: size_buckets(()))
    files_over_1gb: int = 0
    commits: dict[str, Any] = field(default_factory=dict)  # commit_summary()
    partition_skew: dict[str, Any] = field(default_factory=dict)  # partition_skew()
    metadata_files: dict[str, Any] = field(default_factory=dict)  # metadata_summary()
    storage: dict[str, Any] | None = None  # lakewarden.storage, when asked for
    buckets: dict[str, Any] | None = None  # bucket_summary(): tables bucketed by key
    statistics: dict[str, Any] | None = None  # column statistics' freshness (kinds.stats)
    format_version: int | None = None  # the Iceberg table's format version (1, 2, 3)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class LiveDelete:
    """A delete file of the current snapshot, by partition."""

    partition: Partition
    kind: str  # "position" | "equality"
    records: int
    deletion_vector: bool = False  # a position delete stored as a Puffin blob (format v3)


@dataclass(frozen=True)
class SnapshotInfo:
    snapshot_id: int
    timestamp_ms: int
    operation: str | None = None  # append | overwrite | replace | delete (summary.operation)


@dataclass(frozen=True)
class MetadataFiles:
    """The table's metadata.json files as its current metadata lists them."""

    files: int  # the current one and those in its metadata log
    delete_after_commit: bool  # write.metadata.delete-after-commit.enabled
    previous_versions_max: int | None  # write.metadata.previous-versions-max (None: unreadable)


@dataclass(frozen=True)
class ManifestInfo:
    """A manifest of the current snapshot."""

    deletes: bool  # it lists delete files (else data files)
    length: int  # bytes


@dataclass(frozen=True)
class TTLColumn:
    name: str
    column_type: str  # "date" | "timestamp" (bounds as days or micros since the epoch)
    cutoff: datetime | None  # rows older than this are past retention (None: no retention)


def ttl_summary(
    ttl: TTLColumn, spans: list[tuple[datetime, datetime]], files: int
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "column": ttl.name,
        "cutoff": ttl.cutoff.isoformat() if ttl.cutoff else None,
        "oldest": min((lo for lo, _ in spans), default=None),
        "newest": max((hi for _, hi in spans), default=None),
        "files_without_bounds": files - len(spans),
    }
    for key in ("oldest", "newest"):
        out[key] = out[key].isoformat() if out[key] is not None else None
    if ttl.cutoff is not None:
        cut = ttl.cutoff
        out["files_past_retention"] = sum(1 for lo, _ in spans if lo < cut)
        out["files_entirely_past_retention"] = sum(1 for _, hi in spans if hi < cut)
    return out


_NO_DELETES = {
    "position": 0,
    "equality": 0,
    "position_rows": 0,
    "equality_rows": 0,
    "deletion_vectors": 0,
    "deletion_vector_rows": 0,
}


def layout_sections(policy: Policy) -> dict[str, LayoutPolicy]:
    """The kinds judged by files per lookup on their section's columns, from the registry."""
    return {
        kind.name: section
        for kind in REGISTRY.values()
        if isinstance(section := kind.section(policy), LayoutPolicy)
    }


def build(
    policy: Policy,
    snapshot_id: int | None,
    data: list[DataFile],
    deletes: list[LiveDelete],
    layout_columns: dict[str, list[str]],
    ttl: TTLColumn | None,
    *,
    snapshots: Collection[SnapshotInfo] = (),
    protected: set[int] | frozenset[int] = frozenset(),
    manifests: Iterable[ManifestInfo] = (),
    now: datetime | None = None,
    metadata: MetadataFiles | None = None,
    buckets: dict[int, KeyBucket] | None = None,
) -> TableHealth:
    """What `measure` read, summed up per partition and overall, with its signals and score
    (`protected`: the snapshots that branches and tags hold)."""
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
        if d.deletion_vector:
            counts["deletion_vectors"] += 1
            counts["deletion_vector_rows"] += d.records

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
            file_size_buckets=size_buckets(f.size for f in group),
            files_over_1gb=files_over(f.size for f in group),
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
    health = TableHealth(
        snapshot_id=snapshot_id,
        measured_at=now.isoformat() if now else "",
        score=100,
        data_files=len(data),
        bytes=sum(f.size for f in data),
        records=records,
        file_size=size_stats([f.size for f in data]),
        file_size_buckets=size_buckets(f.size for f in data),
        files_over_1gb=files_over(f.size for f in data),
        small_files=small,
        small_file_ratio=ratio(small, len(data)),
        small_file_threshold_bytes=small_at,
        reducible_files=sum(p.reducible_files for p in partitions),
        delete_files={k: sum(p.delete_files[k] for p in partitions) for k in _NO_DELETES},
        deleted_records=round(deleted, 1),
        deleted_row_ratio=ratio(deleted, records),
        snapshots=snapshot_summary(policy, snapshots, protected, now),
        manifests=manifest_summary(manifests),
        layout={k: files_per_lookup(data, c) for k, c in layout_columns.items()},
        layout_columns=layout_columns,
        ttl=ttl_summary(ttl, [b for f in data if (b := bounds(f)) is not None], len(data))
        if ttl is not None
        else {"column": None}
        if not policy.ttl.column
        else {
            "column": policy.ttl.column,
            "note": "the table has no such timestamp or date column: nothing measured",
        },
        partitions=partitions,
        signals=[],
        commits=commit_summary(snapshots, now),
        partition_skew=partition_skew(partitions),
        metadata_files=metadata_summary(metadata),
        buckets=bucket_summary(partitions, buckets or {}, comp.max_files_per_bucket),
    )

    health.signals = signals(health, policy)
    health.penalties = penalties(health, policy)
    health.score = score(health, policy)
    return health


def bucket_summary(
    partitions: Iterable[PartitionHealth], buckets: dict[int, KeyBucket], limit: int
) -> dict[str, Any] | None:
    """Per bucket of the key (each partition of a bucket(N, key) field): its data files and
    the delete files of each kind in it, what a read of one key pays. None: not bucketed."""
    if not buckets:
        return None
    first = next(iter(buckets.values()))
    fields = {b.field for b in buckets.values()}
    per_bucket = []
    for p in partitions:
        field = next((f for f in fields if f in p.partition), None)
        if field is None:
            continue
        d = p.delete_files
        per_bucket.append(
            {
                "partition": p.partition,
                "bucket": p.partition[field],
                "data_files": p.data_files,
                "equality_delete_files": d["equality"],
                "equality_delete_rows": d["equality_rows"],
                "position_delete_files": d["position"],
                "position_delete_rows": d["position_rows"],
                "files": p.data_files + d["equality"] + d["position"],
            }
        )
    most = max((b["data_files"] for b in per_bucket), default=0)
    return {
        "field": first.field,
        "column": first.column,
        "num_buckets": first.num_buckets,
        "max_files_per_bucket": limit,
        "buckets": len(per_bucket),
        "most_data_files": most,
        "over_limit": sum(1 for b in per_bucket if limit and b["data_files"] > limit),
        "per_bucket": per_bucket,
    }


def snapshot_summary(
    policy: Policy,
    snapshots: Iterable[SnapshotInfo],
    protected: set[int] | frozenset[int],
    now: datetime | None,
) -> dict[str, float]:
    snaps = sorted(snapshots, key=lambda s: s.timestamp_ms, reverse=True)
    now_ms = now.timestamp() * 1000 if now else 0.0
    ages = [(now_ms - s.timestamp_ms) / 1000 for s in snaps]
    keep, max_age_s = policy.clean.keep_last_snapshots, policy.clean.max_snapshot_age_hours * 3600
    return {
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


# A streaming writer looks active when, in the last hour, at least STREAMING_MIN_COMMITS
# commits added data (append or overwrite: not a rewrite's replace, not a delete), at a
# median interval of at most STREAMING_MAX_INTERVAL_S, and the newest of them is no older
# than twice that median (the cadence goes on now: a burst that ended does not count).
STREAMING_WINDOW_S = 3600
STREAMING_MIN_COMMITS = 4
STREAMING_MAX_INTERVAL_S = 900
DATA_OPERATIONS = frozenset({"append", "overwrite"})
DAY_S = 86400


def commit_summary(snapshots: Iterable[SnapshotInfo], now: datetime | None) -> dict[str, Any]:
    """Commits per day from the snapshots the table still holds (an expired snapshot is not
    counted: after clean, the rate is a lower bound), and the streaming-writer judgement."""
    now_ms = now.timestamp() * 1000 if now else 0.0
    # newest first; a snapshot stamped after `now` (the writer's clock ahead) counts as new
    ages = sorted((max(0.0, (now_ms - s.timestamp_ms) / 1000), s.operation) for s in snapshots)
    daily = [sum(1 for age, _ in ages if d * DAY_S <= age < (d + 1) * DAY_S) for d in range(7)]
    writes = [age for age, op in ages if op in DATA_OPERATIONS and age < STREAMING_WINDOW_S]
    gaps = [b - a for a, b in itertools.pairwise(writes)]
    median_gap = statistics.median(gaps) if gaps else None
    active = (
        len(writes) >= STREAMING_MIN_COMMITS
        and median_gap is not None
        and median_gap <= STREAMING_MAX_INTERVAL_S
        and writes[0] <= max(2 * median_gap, 60.0)
    )
    return {
        "last_24h": daily[0],
        "last_7d": sum(daily),
        "per_day_7d": round(sum(daily) / 7, 2),
        "daily_7d": daily,
        "data_commits_last_hour": len(writes),
        "median_interval_s_last_hour": None if median_gap is None else round(median_gap, 1),
        "streaming_writer_active": active,
    }


def partition_skew(partitions: Iterable[PartitionHealth]) -> dict[str, Any]:
    """The busiest partition, by bytes and by data files, against the median partition (of
    the partitions holding data files): ratio = busiest / median (None: no partition)."""
    holding = [p for p in partitions if p.data_files]
    out: dict[str, Any] = {"partitions": len(holding)}
    for measure in ("bytes", "data_files"):
        values = [getattr(p, measure) for p in holding]
        busiest = max(holding, key=lambda p: getattr(p, measure), default=None)
        median = statistics.median(values) if values else None
        out[measure] = {
            "median": median,
            "busiest": max(values, default=None),
            "busiest_partition": busiest.partition if busiest else None,
            "ratio": round(max(values) / median, 2) if median else None,
        }
    return out


def metadata_summary(m: MetadataFiles | None) -> dict[str, Any]:
    """The metadata.json files: how many the metadata lists and whether the older ones are
    deleted on commit (when not, every commit leaves one more on storage: beyond
    previous_versions_max they leave the log but not the storage, until orphan removal).
    Their bytes need a look at each file: `lakewarden.storage` fills them in when asked."""
    m = m or MetadataFiles(0, False, None)
    return {
        "files": m.files,
        "bytes": None,
        "current_bytes": None,
        "delete_after_commit": m.delete_after_commit,
        "previous_versions_max": m.previous_versions_max,
    }


def manifest_summary(manifests: Iterable[ManifestInfo]) -> dict[str, float]:
    listed = list(manifests)
    sizes = [m.length for m in listed]
    return {
        "count": len(listed),
        "data": sum(1 for m in listed if not m.deletes),
        "deletes": sum(1 for m in listed if m.deletes),
        "total_bytes": sum(sizes),
        "avg_bytes": round(sum(sizes) / len(sizes), 1) if sizes else 0.0,
    }


def layout_value(h: TableHealth, kind: str) -> float | None:
    """The worst partition's files per lookup (what a rewrite can fix: files of different
    partitions never merge), or the table's when no partition was measured."""
    values = [v for p in h.partitions if (v := p.files_per_lookup.get(kind)) is not None]
    return max(values) if values else h.layout.get(kind)


def penalties(h: TableHealth, policy: Policy) -> dict[str, float]:
    """What each factor takes off the score (the formula is at the top of this module)."""
    c, cl = policy.compaction, policy.clean
    out = {"small_files": 0.0, "deletes": 0.0, "layout": 0.0, "snapshots": 0.0, "manifests": 0.0}
    if h.data_files:
        out["small_files"] = W_SMALL_FILES * min(1.0, max(0, h.reducible_files) / h.data_files)
    if h.records:
        d = h.delete_files
        weighted = d.get("position_rows", 0) + EQUALITY_WEIGHT * d.get("equality_rows", 0)
        out["deletes"] = W_DELETES * min(1.0, weighted / h.records / c.delete_ratio_threshold)
    excess = 0.0
    for kind, section in layout_sections(policy).items():
        value = layout_value(h, kind)
        if section.enabled and value is not None and value > section.max_files_per_lookup:
            limit = section.max_files_per_lookup
            excess = max(excess, (value - limit) / limit)
    out["layout"] = W_LAYOUT * min(1.0, excess)
    if h.snapshots["expirable"]:
        beyond = h.snapshots["count"] - cl.keep_last_snapshots
        out["snapshots"] = W_SNAPSHOTS * min(1.0, beyond / (4 * cl.keep_last_snapshots))
    if h.manifests["count"] >= cl.rewrite_manifests_min_count:
        out["manifests"] = W_MANIFESTS
    return {k: round(v, 2) for k, v in out.items()}


def score(h: TableHealth, policy: Policy) -> int:
    return max(0, min(100, round(100 - sum(penalties(h, policy).values()))))


def signals(h: TableHealth, policy: Policy) -> list[Signal]:
    """Every policy threshold the measured table crosses. A threshold fires whether or not
    its kind is enabled (the reason then says so): the operator sees what is left unfixed."""
    out: list[Signal] = []

    def fire(kind: str, metric: str, value: float, threshold: float, reason: str) -> None:
        if not policy.for_kind(kind).enabled:
            reason += f" ({kind} is disabled by policy)"
        out.append(Signal(kind, metric, value, threshold, reason))

    c = policy.compaction
    if h.reducible_files >= c.min_small_files:
        fire(
            "compaction",
            "reducible_files",
            h.reducible_files,
            c.min_small_files,
            f"{h.reducible_files} files more than the bytes need at the target size "
            f"{c.target_file_size_bytes} >= min_small_files {c.min_small_files} "
            f"({h.small_files} of {h.data_files} files are small)",
        )
    if h.deleted_row_ratio >= c.delete_ratio_threshold:
        fire(
            "compaction",
            "deleted_row_ratio",
            h.deleted_row_ratio,
            c.delete_ratio_threshold,
            f"{h.deleted_row_ratio:.0%} of rows are deleted by delete files >= "
            f"delete_ratio_threshold {c.delete_ratio_threshold:.0%}",
        )
    most = (h.buckets or {}).get("most_data_files", 0)
    if c.max_files_per_bucket and most > c.max_files_per_bucket:
        assert h.buckets is not None
        fire(
            "compaction",
            "files_per_bucket",
            most,
            c.max_files_per_bucket,
            f"{h.buckets['over_limit']} bucket(s) of {h.buckets['column']} hold more than "
            f"max_files_per_bucket {c.max_files_per_bucket} data files (most: {most})",
        )
    for kind, section in layout_sections(policy).items():
        value = layout_value(h, kind)
        if section.columns and value is not None and value > section.max_files_per_lookup:
            fire(
                kind,
                "files_per_lookup",
                value,
                section.max_files_per_lookup,
                f"a lookup on {section.columns} opens {value} files (worst partition) > "
                f"max_files_per_lookup {section.max_files_per_lookup}",
            )
    t = policy.ttl
    past = h.ttl.get("files_past_retention") or 0
    if t.column and t.retention_days is not None and past > 0:
        fire(
            "ttl",
            "files_past_retention",
            past,
            0,
            f"{past} file(s) hold rows of {t.column!r} older than {t.retention_days:g} days "
            f"(oldest {h.ttl.get('oldest')})",
        )
    cl = policy.clean
    expirable = int(h.snapshots["expirable"])
    if expirable:
        fire(
            "clean",
            "snapshots",
            h.snapshots["count"],
            cl.keep_last_snapshots,
            f"{h.snapshots['count']:.0f} snapshots > keep_last_snapshots "
            f"{cl.keep_last_snapshots}, {expirable} of them older than "
            f"{cl.max_snapshot_age_hours:g} h (the oldest "
            f"{h.snapshots['oldest_age_s'] / 3600:.1f} h)",
        )
    if h.manifests["count"] >= cl.rewrite_manifests_min_count:
        fire(
            "clean",
            "manifests",
            h.manifests["count"],
            cl.rewrite_manifests_min_count,
            f"{h.manifests['count']:.0f} manifests in the current snapshot >= "
            f"rewrite_manifests_min_count {cl.rewrite_manifests_min_count}",
        )
    return out
