"""What ingest reads of an Iceberg table's metadata file, without parsing all of it.

pyiceberg builds the whole `TableMetadata` (every schema and its fields, every snapshot and
its summary) through pydantic with Python `__init__`s: most of an ingest's time (B25: ~40%
of the API's at 1,000 events a batch), though a commit's ingest reads only the head and the
few snapshots it has not seen. A `MetadataView` is the file's JSON with the snapshots
validated one by one as they are asked for (`pyiceberg.table.snapshots.Snapshot`, the
model the full parse builds them with). It answers what ingest and the batch endpoint ask
of a table (`TableRead`: a view or a pyiceberg `Table`): its pointer, current snapshot,
snapshots by id and their ancestry, properties and location. Only plain JSON of format 2
and 3 is viewed; anything else is parsed in full (`read_view` returns None).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import cached_property
from itertools import islice
from typing import Any

from pyiceberg.io import FileIO
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot


class MetadataView:
    """One metadata file as ingest reads it (see the module's docstring)."""

    def __init__(self, metadata_location: str, raw: dict[str, Any]) -> None:
        self.metadata_location = metadata_location
        self._raw = raw
        self._by_id: dict[int, dict[str, Any]] = {
            int(s["snapshot-id"]): s for s in raw.get("snapshots") or []
        }
        self._parsed: dict[int, Snapshot] = {}

    @property
    def metadata(self) -> MetadataView:
        """The view itself, so `table.metadata.snapshot_by_id` reads as on a `Table`."""
        return self

    @property
    def properties(self) -> dict[str, str]:
        return {k: str(v) for k, v in (self._raw.get("properties") or {}).items()}

    def location(self) -> str:
        return str(self._raw["location"])

    @property
    def current_snapshot_id(self) -> int | None:
        current = self._raw.get("current-snapshot-id")
        return None if current is None or int(current) == -1 else int(current)

    def has_snapshot(self, snapshot_id: int) -> bool:
        return snapshot_id in self._by_id

    def parent_id(self, snapshot_id: int) -> int | None:
        """The snapshot's parent (None: none, or the snapshot is not in the metadata)."""
        parent = self._by_id.get(snapshot_id, {}).get("parent-snapshot-id")
        return None if parent is None else int(parent)

    def snapshot_by_id(self, snapshot_id: int) -> Snapshot | None:
        if snapshot_id not in self._parsed:
            raw = self._by_id.get(snapshot_id)
            if raw is None:
                return None
            self._parsed[snapshot_id] = Snapshot.model_validate(raw)
        return self._parsed[snapshot_id]

    def current_snapshot(self) -> Snapshot | None:
        current = self.current_snapshot_id
        return None if current is None else self.snapshot_by_id(current)

    @cached_property
    def snapshots(self) -> list[Snapshot]:
        """Every snapshot, parsed (a first sight's foreign-optimizer check reads them)."""
        return [s for i in self._by_id if (s := self.snapshot_by_id(i)) is not None]


TableRead = Table | MetadataView


def ancestors(table: TableRead, head: Snapshot | None, limit: int | None) -> Iterator[Snapshot]:
    """`head` and its ancestors still in the metadata, newest first (at most `limit`): what
    `formats.iceberg.history.ancestors` walks on a `Table`, on either."""

    def walk() -> Iterator[Snapshot]:
        snap = head
        while snap is not None:
            yield snap
            parent = snap.parent_snapshot_id
            snap = table.metadata.snapshot_by_id(parent) if parent is not None else None

    return islice(walk(), limit)


def has_snapshot(table: TableRead, snapshot_id: int) -> bool:
    """Whether the metadata holds the snapshot (a view answers without parsing it)."""
    if isinstance(table, MetadataView):
        return table.has_snapshot(snapshot_id)
    return table.metadata.snapshot_by_id(snapshot_id) is not None


def ancestor_ids(table: TableRead, limit: int | None) -> Iterator[int]:
    """The ids of the current snapshot and its ancestors still in the metadata, newest
    first (at most `limit`); a view walks them without parsing a snapshot."""
    if not isinstance(table, MetadataView):
        return (s.snapshot_id for s in ancestors(table, table.current_snapshot(), limit))

    def walk(view: MetadataView) -> Iterator[int]:
        at = view.current_snapshot_id
        while at is not None and view.has_snapshot(at):
            yield at
            at = view.parent_id(at)

    return islice(walk(table), limit)


def read_view(io: FileIO, metadata_location: str) -> MetadataView | None:
    """The view of the metadata file at `metadata_location`; None when it is not one a view
    reads (compressed, format 1: parse it in full)."""
    if not metadata_location.endswith(".metadata.json") or metadata_location.endswith(
        ".gz.metadata.json"
    ):
        return None
    with io.new_input(metadata_location).open() as f:
        return view_of(metadata_location, json.loads(f.read()))


def view_of(metadata_location: str, raw: Any) -> MetadataView | None:
    """The view of a metadata file's JSON already read (a REST catalog's load answers it
    in its body); None when a view does not read it (format 1, or not an object)."""
    if not isinstance(raw, dict) or int(raw.get("format-version", 1)) < 2:
        return None
    return MetadataView(metadata_location, raw)
