"""A warehouse of tables by path, `<warehouse>/<namespace>/<name>` (Spark's and Hive's
directory layout): the catalog of a format whose tables need no catalog server to be read
(their log and files are on storage: a `hudi` or a `delta` catalog). Registering such a
catalog checks its warehouse is a directory; a table's name in lakewarden is its path's
last two parts."""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit

from pyarrow import fs as pafs

from lakewarden import hdfs, object_store
from lakewarden.catalogs.catalog import CatalogConfigError, CatalogEntry, TableRef


def filesystem(path: str, props: Mapping[str, str] | None = None) -> tuple[pafs.FileSystem, str]:
    """pyarrow's file system for a table's path (a local path or a URI) and the path in it;
    on S3 with the catalog's resolved properties `props` (`object_store.filesystem`), on
    HDFS through hdfs-native (`lakewarden.hdfs`, its `hadoop.*` properties)."""
    if "://" not in path:
        return pafs.LocalFileSystem(), path.rstrip("/")
    if props and object_store.on_s3(path):
        return object_store.filesystem(props, path)
    if hdfs.on_hdfs(path):  # hdfs-native: pyarrow's own HDFS needs libhdfs and a JVM
        parts = urlsplit(path)
        config = hdfs.client_config(dict(props or {}))
        return hdfs.filesystem(parts.scheme, parts.netloc, config), parts.path.rstrip("/")
    fs, inner = pafs.FileSystem.from_uri(path)
    return fs, inner.rstrip("/")


def warehouse(entry: CatalogEntry) -> str:
    return entry.resolved["warehouse"].rstrip("/")


def check_warehouse(entry: CatalogEntry) -> None:
    """CatalogConfigError unless the warehouse is a directory this process can list."""
    where = warehouse(entry)
    fs, path = filesystem(where, entry.resolved)
    if fs.get_file_info(path).type != pafs.FileType.Directory:
        raise CatalogConfigError(
            f"catalog {entry.name!r}: its warehouse {where} is not a directory lakewarden can read"
        )


def table_path(entry: CatalogEntry, ref: TableRef) -> str:
    """The path of the catalog's table `ref`."""
    return "/".join([warehouse(entry), *ref.namespace.split("."), ref.name])
