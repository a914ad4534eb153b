"""Bytes on storage against bytes referenced: the files under a table's location that no
snapshot references (orphan candidates), and the data and delete files that only old
snapshots hold (what expiring them would eventually free).

Expensive, so only on request (`GET …/health?storage=true`), never in the health watch: it
lists the table's location directory by directory (at most `max_files` files: past that the
listing stops and says so, and the unreferenced figures are a lower bound), and reads the
manifest list of every snapshot and every distinct manifest once.

Referenced, as Iceberg's own `remove_orphan_files` counts it: the current metadata.json and
those of its metadata log, `metadata/version-hint.text`, statistics files, every snapshot's
manifest list, its manifests and every file their entries name (deleted entries too: a
file a snapshot removed is still the previous snapshot's). A file younger than the clean
policy's `orphan_min_age_hours` may belong to a commit in flight: it is counted apart. As in
Iceberg, hidden names (`hidden`) are not listed, and only the table's location is: data
written elsewhere (`write.data.path`) is not looked for.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pyarrow.fs import FileSelector, FileSystem, FileType
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.manifest import ManifestEntryStatus
from pyiceberg.table import Table

DEFAULT_MAX_FILES = 100_000
LIMIT_MAX_FILES = 10_000_000


@dataclass(frozen=True)
class StoredFile:
    key: str  # the path as the table's filesystem names it (see `Storage.key`)
    size: int
    modified: datetime | None


@dataclass
class Listing:
    files: list[StoredFile]
    capped: bool  # the listing stopped at max_files: more files may exist
    max_files: int


@dataclass
class References:
    """What the table's metadata reaches, by `Storage.key`."""

    referenced: set[str] = field(default_factory=set)
    live_sizes: dict[str, int] = field(default_factory=dict)  # live in some snapshot
    live_in_heads: set[str] = field(default_factory=set)  # live in current / a branch or tag
    metadata_json: list[str] = field(default_factory=list)  # the current one first
    manifests_read: int = 0


def hidden(name: str) -> bool:
    """A name Iceberg's orphan removal never lists (`HiddenPathFilter`: Hadoop's `_SUCCESS`,
    `_temporary/`, `.crc` checksums), nor anything under it; a partition directory
    (`_field=value`) is not hidden."""
    return name.startswith(("_", ".")) and "=" not in name


class Storage:
    """The table's files as its filesystem (pyarrow's, through pyiceberg's FileIO) sees them."""

    def __init__(self, table: Table) -> None:
        io = table.io
        self.io = io if isinstance(io, PyArrowFileIO) else PyArrowFileIO(io.properties)
        scheme, netloc, self.root = self.io.parse_location(table.location(), self.io.properties)
        self.fs: FileSystem = self.io.fs_by_scheme(scheme, netloc)

    def key(self, location: str) -> str:
        """One name per file whatever the spelling (`file:/x`, `file:///x`, `/x`; an object
        store's `bucket/key`), as the listing names it."""
        return self.io.parse_location(location, self.io.properties)[2]

    def walk(self, max_files: int) -> Listing:
        """The files under the table's location, a directory at a time, up to `max_files`."""
        files: list[StoredFile] = []
        pending = [self.root]
        while pending:
            selector = FileSelector(pending.pop(), recursive=False, allow_not_found=True)
            for info in self.fs.get_file_info(selector):
                if hidden(info.base_name):
                    continue
                if info.type == FileType.Directory:
                    pending.append(info.path)
                elif info.type == FileType.File:
                    if len(files) == max_files:
                        return Listing(files, True, max_files)
                    files.append(StoredFile(info.path, info.size or 0, info.mtime))
        return Listing(files, False, max_files)

    def size(self, key: str) -> int | None:
        """One file's bytes, by `key` (None: it is gone)."""
        info = self.fs.get_file_info(key)
        return info.size if info.type == FileType.File else None


def references(table: Table, storage: Storage) -> References:
    meta, refs = table.metadata, References()
    heads = {r.snapshot_id for r in meta.refs.values()}
    if meta.current_snapshot_id is not None:
        heads.add(meta.current_snapshot_id)
    refs.metadata_json = [
        storage.key(loc)
        for loc in [table.metadata_location, *(e.metadata_file for e in meta.metadata_log)]
    ]
    refs.referenced.update(refs.metadata_json)
    refs.referenced.add(storage.key(f"{table.location().rstrip('/')}/metadata/version-hint.text"))
    for stats in [*meta.statistics, *meta.partition_statistics]:
        refs.referenced.add(storage.key(stats.statistics_path))

    live_of: dict[str, set[str]] = {}  # manifest key -> the keys of its live files
    for snapshot in table.snapshots():
        refs.referenced.add(storage.key(snapshot.manifest_list))
        for manifest in snapshot.manifests(table.io):
            mkey = storage.key(manifest.manifest_path)
            refs.referenced.add(mkey)
            if mkey not in live_of:
                live_of[mkey] = set()
                refs.manifests_read += 1
                for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
                    f = entry.data_file
                    fkey = storage.key(f.file_path)
                    refs.referenced.add(fkey)
                    if entry.status != ManifestEntryStatus.DELETED:
                        live_of[mkey].add(fkey)
                        refs.live_sizes[fkey] = f.file_size_in_bytes
            if snapshot.snapshot_id in heads:
                refs.live_in_heads |= live_of[mkey]
    return refs


def summary(
    listing: Listing, refs: References, now: datetime, orphan_min_age_hours: float
) -> dict[str, Any]:
    """The listing less what is referenced, and what only old snapshots hold."""
    unreferenced = [f for f in listing.files if f.key not in refs.referenced]
    cutoff = now - timedelta(hours=orphan_min_age_hours)
    old_enough = [f for f in unreferenced if f.modified is not None and f.modified < cutoff]
    old_only = [k for k in refs.live_sizes if k not in refs.live_in_heads]
    return {
        "listed_files": len(listing.files),
        "listed_bytes": sum(f.size for f in listing.files),
        "capped": listing.capped,
        "max_files": listing.max_files,
        "unreferenced_files": len(unreferenced),
        "unreferenced_bytes": sum(f.size for f in unreferenced),
        "unreferenced_older_files": len(old_enough),
        "unreferenced_older_bytes": sum(f.size for f in old_enough),
        "orphan_min_age_hours": orphan_min_age_hours,
        "old_snapshots_only_files": len(old_only),
        "old_snapshots_only_bytes": sum(refs.live_sizes[k] for k in old_only),
        "manifests_read": refs.manifests_read,
    }


def metadata_json_bytes(
    storage: Storage, listing: Listing, refs: References
) -> tuple[int, int | None]:
    """Bytes of the metadata.json files the metadata lists (from the listing, else each
    looked up once), and of the current one (None: gone)."""
    listed = {f.key: f.size for f in listing.files}
    sizes = [listed[k] if k in listed else storage.size(k) for k in refs.metadata_json]
    return sum(s or 0 for s in sizes), sizes[0] if sizes else None
