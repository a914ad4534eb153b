"""A warehouse of tables by path, `<warehouse>/<namespace>/<name>` (Spark's and Hive's
directory layout): the catalog of a format whose tables need no catalog server to be read
(their log and files are on storage: a `hudi` or a `delta` catalog). Registering such a
catalog checks its warehouse is a directory; a table's name in lakewarden is its path's
last two parts (or more: a directory per namespace level). Its listing (`list_tables`,
what management rules adopt from) is a walk of the warehouse for the format's marker."""

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


# What makes a directory a table of each format: Hudi's table properties, Delta's log.
MARKERS = {"hudi": ".hoodie/hoodie.properties", "delta": "_delta_log"}
# Namespace levels walked below the warehouse: a table deeper is not listed (register it).
MAX_NAMESPACE_LEVELS = 5


def list_tables(entry: CatalogEntry, fmt: str) -> dict[tuple[str, str], None]:
    """Every `fmt` table under the catalog's warehouse by (namespace, name): a directory at
    least two levels down holding the format's marker (not walked further: a table's own
    directories are not tables). Hidden directories (`.x`, `_x`) are skipped. Raises what
    the store raises: a listing read only in part must not retire the tables it missed."""
    fs, root = filesystem(warehouse(entry), entry.resolved)
    marker = MARKERS[fmt]
    found: dict[tuple[str, str], None] = {}
    pending: list[tuple[str, tuple[str, ...]]] = [(root, ())]
    while pending:
        path, parts = pending.pop()
        for info in fs.get_file_info(pafs.FileSelector(path)):
            if info.type != pafs.FileType.Directory or info.base_name.startswith((".", "_")):
                continue
            here = (*parts, info.base_name)
            if len(here) >= 2 and _holds(fs, f"{info.path}/{marker}"):
                found[(".".join(here[:-1]), here[-1])] = None
            elif len(here) <= MAX_NAMESPACE_LEVELS:
                pending.append((info.path, here))
    return found


def _holds(fs: pafs.FileSystem, path: str) -> bool:
    return fs.get_file_info(path).type != pafs.FileType.NotFound


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
