"""A warehouse of tables by path, `<warehouse>/<namespace>/<name>` (Spark's and Hive's
directory layout): the catalog of a format whose tables need no catalog server to be read
(their log and files are on storage: a `hudi` or a `delta` catalog). Registering such a
catalog checks its warehouse is a directory; a table's name in lakewarden is its path's
last two parts."""

from __future__ import annotations

import posixpath
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


# Schemes that name one store: Hadoop's s3a/s3n and s3 are the same bucket.
_SAME_STORE = {"s3a": "s3", "s3n": "s3", "file": ""}


def _canonical(path: str) -> str:
    """`path` spelled one way: a local path for `file:` URIs (Hadoop writes `file:/x`,
    Python `file:///x`), `s3` for s3a/s3n, no trailing slash or `.`/`..` parts."""
    if ":" in path.split("/", 1)[0]:
        parts = urlsplit(path)
        scheme = _SAME_STORE.get(parts.scheme, parts.scheme)
        inner = posixpath.normpath(parts.path or "/")
        return f"{scheme}://{parts.netloc}{inner}" if scheme else inner
    return posixpath.normpath(path)


def table_at(entry: CatalogEntry, path: str) -> tuple[str, str] | None:
    """The (namespace, name) whose `table_path` in the catalog is `path` (a writer's base
    path, however its engine spells it), or None if the catalog's warehouse does not hold
    it two or more levels down."""
    root, wanted = _canonical(warehouse(entry)), _canonical(path)
    if not wanted.startswith(root.rstrip("/") + "/"):
        return None
    *namespace, name = wanted[len(root.rstrip("/")) + 1 :].split("/")
    return (".".join(namespace), name) if namespace else None
