"""A Hudi table's timeline, wherever its catalog keeps it: a `hudi` catalog is only a
warehouse of base paths (`<warehouse>/<namespace>/<name>`: a Hudi table needs no catalog
server to be read, its timeline and files are on storage); a `hive` catalog's metastore
knows the base path Hudi's Hive sync registered (`formats.locations`). Registering a table
checks `.hoodie/hoodie.properties` is there."""

from __future__ import annotations

from lakewarden.catalogs.catalog import CatalogEntry, TableRef
from lakewarden.formats.hudi.timeline import HudiTimeline, NotAHudiTable
from lakewarden.formats.locations import NoSuchLocation, location_of


def open_timeline(entry: CatalogEntry, ref: TableRef) -> HudiTimeline:
    """The table's timeline; NotAHudiTable or UnsupportedTableVersion say what is wrong."""
    try:
        return HudiTimeline(location_of(entry, ref, "hudi"), entry.resolved)
    except NoSuchLocation as exc:
        raise NotAHudiTable(str(exc)) from None
