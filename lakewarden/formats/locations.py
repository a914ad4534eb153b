"""Where a Hudi or Delta table lives: under a path catalog's warehouse (`formats.warehouse`:
`<warehouse>/<namespace>/<name>`), or where a Hive catalog's metastore says it is (Hudi's
Hive sync and Spark's catalog register the table's base path as its location,
`metastore.find_listed`). The metastore is asked each time a table is opened (one
Thrift call), so a table moved there is read where it now is.

A local location as Hive writes it (`file:/x`, `file:///x`) is the path `/x`: the readers
(pyarrow, hudi-rs, delta-rs) and Spark's jobs take a plain path.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from lakewarden.catalogs.catalog import CatalogEntry, TableRef
from lakewarden.formats.warehouse import table_path
from lakewarden.metastore import find_listed, metastore_client


class NoSuchLocation(LookupError):
    """The catalog has no such table of the format (the message names both)."""


def location_of(entry: CatalogEntry, ref: TableRef, fmt: str) -> str:
    """The path of the catalog's `fmt` table `ref` (NoSuchLocation: the metastore has none)."""
    if entry.type != "hive":
        return table_path(entry, ref)
    with metastore_client(entry.resolved["uri"]) as client:
        listed = find_listed(client, ref.namespace, ref.name)
    location = listed.location if listed is not None and listed.format == fmt else None
    if location is None:
        raise NoSuchLocation(
            f"catalog {entry.name!r} has no {fmt.capitalize()} table {ref.dotted} in its metastore"
        )
    return plain_path(location)


def plain_path(location: str) -> str:
    """A `file:` URI as a path; any other location as it is."""
    parts = urlsplit(location)
    if parts.scheme == "file" and parts.netloc in ("", "localhost"):
        return parts.path.rstrip("/") or "/"
    return location.rstrip("/")


def hive_format(entry: CatalogEntry, ref: TableRef) -> str | None:
    """The format of a Hive catalog's table `ref` ("iceberg", "hudi", "delta"), None if
    the metastore has no such table lakewarden reads."""
    with metastore_client(entry.resolved["uri"]) as client:
        listed = find_listed(client, ref.namespace, ref.name)
    return None if listed is None else listed.format
