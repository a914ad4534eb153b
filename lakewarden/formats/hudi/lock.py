"""Which lock lakewarden's Hudi jobs take beside other writers (docs/hudi.md, "Beside a live
writer"): Hudi's optimistic concurrency control is only as safe as the lock every writer of
the table shares. A catalog's properties choose it (`hudi.lock.*`, on a `hudi` catalog or a
`hive` catalog whose Hudi tables lakewarden serves):

- `hudi.lock.provider` = `filesystem`: Hudi's lock file in the table's own `.hoodie/`
  (every process that reaches the table shares it, nothing else to run). The default where
  the store creates a file atomically (a local path, HDFS); Hudi refuses it elsewhere.
- `in-process`: the job's own JVM's lock, shared with no other process. The default on an
  object store (S3): safe only while nobody else writes the table.
- `zookeeper`: Hudi's ZooKeeper lock (`ZookeeperBasedLockProvider`, in Hudi's Spark bundle,
  Curator shaded inside it, ZooKeeper's client from PySpark's jars), at
  `<hudi.lock.zookeeper.base-path>/<hoodie.table.name>` on the ensemble
  `hudi.lock.zookeeper.url` (`host:port[,host:port...]`); the table's writers set the same
  url and base path (their lock key defaults to the table's name, as here).
- `hive-metastore`: the Hive Metastore's lock (`HiveMetastoreBasedLockProvider`, in Hudi's
  Spark bundle; Hive's metastore client from PySpark's jars), on a `hive` catalog only: an
  exclusive lock on the table's own entry, `<database>.<name>` as lakewarden manages it
  there (Hudi's Hive sync database and table), at the catalog's `uri`. The metastore needs
  its transaction tables (as Iceberg's HiveCatalog does). The table is the job's, not the
  catalog's: `for_table` adds it (`TABLE`) to the properties a job or explain passes here.

A catalog is checked when it is registered or patched (`check`: a CatalogConfigError says
what to fix, a 422); a job's Hudi options come from `options`, the explain from
`describe`. Nothing here is secret (Hudi's ZooKeeper lock takes no credentials; the
metastore's `uri` is the catalog's own, by value or reference), so a reference is refused:
the writers must be told the same values.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from lakewarden.catalogs.catalog import CatalogConfigError

PREFIX = "hudi.lock."
PROVIDER = "hudi.lock.provider"
ZK_URL = "hudi.lock.zookeeper.url"
ZK_BASE_PATH = "hudi.lock.zookeeper.base-path"
KNOWN = (PROVIDER, ZK_URL, ZK_BASE_PATH)

FILESYSTEM, IN_PROCESS, ZOOKEEPER = "filesystem", "in-process", "zookeeper"
HIVE_METASTORE = "hive-metastore"
CLASSES = {
    FILESYSTEM: "org.apache.hudi.client.transaction.lock.FileSystemBasedLockProvider",
    IN_PROCESS: "org.apache.hudi.client.transaction.lock.InProcessLockProvider",
    ZOOKEEPER: "org.apache.hudi.client.transaction.lock.ZookeeperBasedLockProvider",
    HIVE_METASTORE: "org.apache.hudi.hive.transaction.lock.HiveMetastoreBasedLockProvider",
}
# The metastore's lock names a table (`<database>.<name>`): the job's, which `for_table`
# sets; never a catalog property (`check` refuses it there).
TABLE = "lakewarden.hudi.lock.table"
# Catalog types whose tables can be Hudi's (a `hive` catalog's, as Hudi's Hive sync
# registers them).
CATALOG_TYPES = ("hudi", "hive")

# Hudi's file-system lock needs a store that creates a file atomically (Hudi's
# `StorageSchemes`): a path's scheme.
ATOMIC_CREATE_SCHEMES = ("", "file", "hdfs", "viewfs")
# A lock a killed process left in `.hoodie/` expires after this many minutes.
FILESYSTEM_EXPIRE_MINUTES = 2


def check(kind: str, properties: Mapping[str, Any]) -> None:
    """CatalogConfigError unless the catalog's `hudi.lock.*` properties name a lock a job
    can take: a known provider, what it needs given, nothing unknown."""
    if TABLE in properties:
        raise CatalogConfigError(
            f"property {TABLE!r} is not a catalog's: lakewarden sets it per table"
        )
    given = {k: v for k, v in properties.items() if k.startswith(PREFIX)}
    if not given:
        return
    if kind not in CATALOG_TYPES:
        raise CatalogConfigError(
            f"the hudi.lock.* properties are for a hudi or hive catalog, not a {kind} catalog"
        )
    for key, value in given.items():
        if key not in KNOWN:
            raise CatalogConfigError(
                f"unknown property {key!r}: the Hudi lock's are {', '.join(KNOWN)}"
            )
        if not isinstance(value, str):
            raise CatalogConfigError(
                f"property {key!r} is not a secret: give it as a value (the table's "
                "writers must set the same)"
            )
    provider = given.get(PROVIDER, "")
    if provider not in CLASSES:
        raise CatalogConfigError(
            f"property {PROVIDER!r} must be one of {', '.join(CLASSES)} (got {provider!r})"
            if PROVIDER in given
            else f"{', '.join(sorted(given))} without {PROVIDER!r}: say which lock "
            f"({', '.join(CLASSES)})"
        )
    warehouse = properties.get("warehouse")
    if provider == FILESYSTEM and isinstance(warehouse, str) and not atomic(warehouse):
        raise CatalogConfigError(
            f"{PROVIDER} 'filesystem' cannot serve the warehouse {warehouse}: Hudi's lock "
            "file needs a store that creates files atomically (a local path, HDFS); "
            "use zookeeper"
        )
    if provider == HIVE_METASTORE and (kind != "hive" or not properties.get("uri")):
        raise CatalogConfigError(
            f"{PROVIDER} 'hive-metastore' needs a Hive Metastore: it is for a hive catalog's "
            f"tables (the metastore at its 'uri'), and this {kind} catalog has none; use "
            "zookeeper, or register the tables through the hive catalog"
        )
    if provider != ZOOKEEPER:
        extra = sorted(k for k in given if k.startswith(f"{PREFIX}zookeeper."))
        if extra:
            raise CatalogConfigError(f"{', '.join(extra)} given, but {PROVIDER} is {provider!r}")
        return
    _check_zookeeper(str(given.get(ZK_URL, "")), str(given.get(ZK_BASE_PATH, "")))


def _check_zookeeper(url: str, base_path: str) -> None:
    if not url:
        raise CatalogConfigError(
            f"{PROVIDER} 'zookeeper' needs {ZK_URL!r}: the ensemble, host:port[,host:port...]"
        )
    for server in url.split(","):
        host, _, port = server.strip().rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise CatalogConfigError(
                f"{ZK_URL!r}: {server.strip()!r} is not host:port (a port from 1 to 65535)"
            )
    if not base_path.startswith("/") or base_path.endswith("/") or "//" in base_path:
        raise CatalogConfigError(
            f"{PROVIDER} 'zookeeper' needs {ZK_BASE_PATH!r}: a ZooKeeper path such as "
            "/hudi/locks (absolute, no trailing slash), the one the table's writers use"
        )


def atomic(path: str) -> bool:
    """Whether Hudi can keep its lock file on the store of `path`."""
    return urlsplit(path).scheme.lower() in ATOMIC_CREATE_SCHEMES


def provider_of(base_path: str, props: Mapping[str, str]) -> str:
    """The lock a job on the table at `base_path` takes: the catalog's, else the file
    system's where it creates files atomically, else the job's own (in-process)."""
    chosen = props.get(PROVIDER)
    if chosen:
        return chosen
    return FILESYSTEM if atomic(base_path) else IN_PROCESS


def for_table(props: Mapping[str, str], namespace: str, name: str) -> dict[str, str]:
    """The catalog's properties for a job on, or the explain of, its table `namespace.name`
    (the metastore's lock is on that table's entry)."""
    return {**props, TABLE: f"{namespace}.{name}"}


def _hive_table(props: Mapping[str, str]) -> tuple[str, str]:
    database, _, name = props.get(TABLE, "").rpartition(".")
    if not database or not name:
        raise CatalogConfigError(
            f"{PROVIDER} 'hive-metastore' locks a table of the metastore, and none was "
            "given (formats.hudi.lock.for_table)"
        )
    return database, name


def options(
    base_path: str, props: Mapping[str, str], table_name: Callable[[], str]
) -> dict[str, str]:
    """Hudi's lock settings for a job on the table (`table_name`: its `hoodie.table.name`,
    the ZooKeeper lock's key, read only when that lock is taken)."""
    provider = provider_of(base_path, props)
    out = {"hoodie.write.lock.provider": CLASSES[provider]}
    if provider == HIVE_METASTORE:
        database, name = _hive_table(props)
        return out | {
            "hoodie.write.lock.hivemetastore.uris": props["uri"],
            "hoodie.write.lock.hivemetastore.database": database,
            "hoodie.write.lock.hivemetastore.table": name,
        }
    if provider == FILESYSTEM:
        out["hoodie.write.lock.filesystem.expire"] = str(FILESYSTEM_EXPIRE_MINUTES)
    elif provider == ZOOKEEPER:
        url = props[ZK_URL]
        out |= {
            "hoodie.write.lock.zookeeper.url": url,
            # Hudi's connect string is the url alone; its port setting is required anyway.
            "hoodie.write.lock.zookeeper.port": url.split(",")[0].rpartition(":")[2],
            "hoodie.write.lock.zookeeper.base_path": props[ZK_BASE_PATH],
            "hoodie.write.lock.zookeeper.lock_key": table_name(),
        }
    return out


def describe(base_path: str, props: Mapping[str, str]) -> dict[str, Any]:
    """The lock, as the `/hudi` explain shows it: which, and whether other writers share it."""
    provider = provider_of(base_path, props)
    shown: dict[str, Any] = {"provider": provider, "class": CLASSES[provider]}
    if provider == IN_PROCESS:
        shown["shared_with_other_writers"] = False
        shown["why"] = (
            "the job's own JVM's lock: safe only while no other writer writes the table"
            + ("" if PROVIDER in props else " (the store cannot hold Hudi's lock file)")
            + f"; set {PROVIDER} to zookeeper (or hive-metastore, on a hive catalog) on the "
            "catalog for a lock writers share"
        )
    elif provider == FILESYSTEM:
        shown["shared_with_other_writers"] = True
        shown["why"] = "a lock file in the table's .hoodie/, which every writer there takes"
    elif provider == HIVE_METASTORE:
        database, name = _hive_table(props)
        shown["shared_with_other_writers"] = True
        # Not the metastore's uri: a catalog may give it by reference.
        shown["hive_metastore"] = {"database": database, "table": name}
        shown["why"] = (
            f"the Hive Metastore's lock on {database}.{name}: the table's writers take it "
            "with the same database and table (their Hive sync's) at the catalog's metastore"
        )
    else:
        shown["shared_with_other_writers"] = True
        shown["zookeeper"] = {"url": props[ZK_URL], "base_path": props[ZK_BASE_PATH]}
        shown["why"] = (
            f"ZooKeeper's lock at {props[ZK_BASE_PATH]}/<hoodie.table.name>: the table's "
            "writers take it with the same url and base path"
        )
    return shown
