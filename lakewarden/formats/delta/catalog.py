"""A Delta table's log, wherever its catalog keeps it: a `delta` catalog is only a
warehouse of paths (`<warehouse>/<namespace>/<name>`: a Delta table needs no catalog server
to be read, its log and files are on storage); a `hive` catalog's metastore knows the path
Spark's catalog registered (`formats.locations`). Registering a table checks `_delta_log/`
has a commit and that its protocol is one lakewarden reads."""

from __future__ import annotations

from lakewarden.catalogs.catalog import CatalogEntry, TableRef
from lakewarden.formats.delta.timeline import DeltaTimeline, NotADeltaTable
from lakewarden.formats.locations import NoSuchLocation, location_of


def open_timeline(entry: CatalogEntry, ref: TableRef) -> DeltaTimeline:
    """The table's log; NotADeltaTable says what is wrong (`open_table` checks the
    protocol: UnsupportedProtocol)."""
    try:
        return DeltaTimeline(location_of(entry, ref, "delta"), entry.resolved)
    except NoSuchLocation as exc:
        raise NotADeltaTable(str(exc)) from None
