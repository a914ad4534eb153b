"""A `hudi` catalog: Hudi tables by base path under a warehouse, `<warehouse>/<namespace>/
<name>` (Spark's and Hive's directory layout, so a table's name in lakewarden is its
path's last two parts). A Hudi table needs no catalog server to be read (its timeline and
files are on storage), so the catalog is only that warehouse: registering it checks the
directory is there, registering a table checks `.hoodie/hoodie.properties` is."""

from __future__ import annotations

from pyarrow import fs as pafs

from lakewarden.catalogs.catalog import CatalogConfigError, CatalogEntry, TableRef
from lakewarden.formats.hudi.timeline import HudiTimeline, filesystem


def warehouse(entry: CatalogEntry) -> str:
    return entry.resolved["warehouse"].rstrip("/")


def check_warehouse(entry: CatalogEntry) -> None:
    """CatalogConfigError unless the warehouse is a directory this process can list."""
    where = warehouse(entry)
    fs, path = filesystem(where)
    if fs.get_file_info(path).type != pafs.FileType.Directory:
        raise CatalogConfigError(
            f"catalog {entry.name!r}: its warehouse {where} is not a directory lakewarden can read"
        )


def table_path(entry: CatalogEntry, ref: TableRef) -> str:
    """The base path of the catalog's table `ref`."""
    return "/".join([warehouse(entry), *ref.namespace.split("."), ref.name])


def open_timeline(entry: CatalogEntry, ref: TableRef) -> HudiTimeline:
    """The table's timeline; NotAHudiTable or UnsupportedTableVersion say what is wrong."""
    return HudiTimeline(table_path(entry, ref))
