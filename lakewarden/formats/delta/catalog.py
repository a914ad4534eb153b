"""A `delta` catalog: Delta tables by path under a warehouse (`formats.warehouse`:
`<warehouse>/<namespace>/<name>`). A Delta table needs no catalog server to be read (its
log and files are on storage), so the catalog is only that warehouse; registering a table
checks `_delta_log/` has a commit and that its protocol is one lakewarden reads."""

from __future__ import annotations

from lakewarden.catalogs.catalog import CatalogEntry, TableRef
from lakewarden.formats.delta.timeline import DeltaTimeline
from lakewarden.formats.warehouse import table_path


def open_timeline(entry: CatalogEntry, ref: TableRef) -> DeltaTimeline:
    """The table's log; NotADeltaTable says what is wrong (`open_table` checks the
    protocol: UnsupportedProtocol)."""
    return DeltaTimeline(table_path(entry, ref))
