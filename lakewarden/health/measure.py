"""Table health, measured: read a table's current state from Iceberg metadata alone
(pyiceberg, no JVM) and hand it to `lakewarden.health.model`, which sums it up and scores it
(the score's formula is documented there, where it is computed).

What is read (the current snapshot): data files, their sizes, rows, partitions and the bounds
of the columns the policy names (clustering and Z-order columns, the TTL column); live delete
files (position and equality; deletion vectors, format v3's position deletes, counted
apart too) with their rows; every snapshot's time and operation and the
snapshots that branches and tags hold; the current snapshot's manifests; the metadata log
and the table properties on metadata files. Nothing is listed: `add_storage` does that, only
when asked.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from pyiceberg.manifest import DataFileContent, FileFormat, ManifestContent
from pyiceberg.table import Table
from pyiceberg.table import TableProperties as P
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.types import DateType, TimestampType, TimestamptzType

from lakewarden import storage
from lakewarden.health.model import (
    LiveDelete,
    ManifestInfo,
    MetadataFiles,
    SnapshotInfo,
    TableHealth,
    TTLColumn,
    build,
    layout_sections,
)
from lakewarden.kinds import stats
from lakewarden.metadata import key_buckets, read_files
from lakewarden.policy.model import Policy


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


def _metadata_files(table: Table) -> MetadataFiles:
    props = table.metadata.properties
    try:
        keep: int | None = int(
            props.get(P.METADATA_PREVIOUS_VERSIONS_MAX, P.METADATA_PREVIOUS_VERSIONS_MAX_DEFAULT)
        )
    except ValueError:  # Iceberg itself would fail on it: shown as unknown, not a 500
        keep = None
    # Java's Boolean.parseBoolean, as Iceberg reads it: anything but "true" (any case) is false
    delete_after_commit = str(props.get(P.METADATA_DELETE_AFTER_COMMIT_ENABLED)).lower()
    return MetadataFiles(1 + len(table.metadata.metadata_log), delete_after_commit == "true", keep)


def _snapshot(s: Snapshot) -> SnapshotInfo:
    operation = s.summary.operation.value if s.summary else None
    return SnapshotInfo(s.snapshot_id, s.timestamp_ms, operation)


def measure(table: Table, policy: Policy, now: datetime | None = None) -> TableHealth:
    now = now or datetime.now(UTC)
    layout_columns = {
        kind: cols
        for kind, section in layout_sections(policy).items()
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
            dv = f.file_format == FileFormat.PUFFIN  # a deletion vector: one a Puffin blob
            deletes.append(LiveDelete(part, kind, f.record_count, dv))

    health = build(
        policy,
        files.snapshot_id,
        files.data,
        deletes,
        layout_columns,
        ttl,
        snapshots=[_snapshot(s) for s in table.snapshots()],
        protected={r.snapshot_id for r in table.metadata.refs.values()},
        manifests=[
            ManifestInfo(m.content == ManifestContent.DELETES, m.manifest_length) for m in manifests
        ],
        now=now,
        metadata=_metadata_files(table),
        buckets=key_buckets(table),
    )
    health.statistics = statistics_freshness(stats.read_state(table), now)
    health.format_version = table.metadata.format_version
    return health


def statistics_freshness(state: stats.StatsState, now: datetime) -> dict[str, Any]:
    """What the newest column statistics describe, and how far the table moved since."""
    at = state.stats_snapshot_at
    return {
        "snapshot_id": state.stats_snapshot_id,
        "current": state.stats_snapshot_id is not None
        and state.stats_snapshot_id == state.current_snapshot_id,
        "age_hours": round((now - at).total_seconds() / 3600, 3) if at else None,
        "columns": sorted(state.stats_columns),
        "snapshots_since": len(state.changes),
        "rewrites_since": sum(1 for c in state.changes if c.operation == stats.REWRITE),
    }


def add_storage(
    health: TableHealth, table: Table, policy: Policy, now: datetime, max_files: int
) -> TableHealth:
    """`health` with what a listing of the table's storage finds (`lakewarden.storage`, its
    cost is there): `storage`, and the bytes of the metadata.json files."""
    store = storage.Storage(table)
    listing = store.walk(max_files)
    refs = storage.references(table, store)
    health.storage = storage.summary(listing, refs, now, policy.clean.orphan_min_age_hours)
    total, current = storage.metadata_json_bytes(store, listing, refs)
    health.metadata_files.update(bytes=total, current_bytes=current)
    return health
