"""A `hudi` catalog: Hudi tables by base path under a warehouse (`formats.warehouse`:
`<warehouse>/<namespace>/<name>`). A Hudi table needs no catalog server to be read (its
timeline and files are on storage), so the catalog is only that warehouse; registering a
table checks `.hoodie/hoodie.properties` is there."""

from __future__ import annotations

from lakewarden.catalogs.catalog import CatalogEntry, TableRef
from lakewarden.formats.hudi.timeline import HudiTimeline
from lakewarden.formats.warehouse import table_path


def open_timeline(entry: CatalogEntry, ref: TableRef) -> HudiTimeline:
    """The table's timeline; NotAHudiTable or UnsupportedTableVersion say what is wrong."""
    return HudiTimeline(table_path(entry, ref))
