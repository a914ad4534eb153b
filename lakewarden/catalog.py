"""The Iceberg catalog, as pyiceberg (workers, API) and Spark (jobs) both see it.

Both sides must name the catalog the same: it is a column of `iceberg_tables`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
from pyiceberg.table import Table
from sqlalchemy.engine import make_url

from lakewarden.settings import Settings

# Identifiers that reach Spark SQL are validated, then backquoted: never pasted raw.
# `\Z`, not `$`: `$` also matches before a trailing newline, and pyiceberg strips it, so
# "sec\n" would name the same Iceberg namespace as "sec" under a second managed row.
IDENTIFIER = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]{0,127}\Z")


class InvalidIdentifier(ValueError):
    pass


@dataclass(frozen=True)
class TableRef:
    namespace: str
    name: str

    def __post_init__(self) -> None:
        for part, value in (("namespace", self.namespace), ("name", self.name)):
            if not IDENTIFIER.match(value or ""):
                raise InvalidIdentifier(
                    f"invalid table {part} {value!r}: use letters, digits and underscores, "
                    "starting with a letter or underscore (at most 128 characters)"
                )

    @classmethod
    def parse(cls, dotted: str) -> TableRef:
        namespace, sep, name = dotted.rpartition(".")
        if not sep:
            raise InvalidIdentifier(f"table {dotted!r} must be written as namespace.name")
        return cls(namespace, name)

    @property
    def dotted(self) -> str:
        return f"{self.namespace}.{self.name}"

    def spark_name(self, catalog: str) -> str:
        return f"`{catalog}`.`{self.namespace}`.`{self.name}`"


def load_table(catalog: Catalog, ref: TableRef) -> Table:
    """The table from the catalog; pyiceberg's `NoSuchTableError` naming the catalog and the
    table if it has no such table (nor namespace)."""
    try:
        return catalog.load_table((ref.namespace, ref.name))
    except (NoSuchTableError, NoSuchNamespaceError) as exc:
        raise NoSuchTableError(f"catalog {catalog.name!r} has no table {ref.dotted}") from exc


def find_table(catalog: Catalog, ref: TableRef) -> Table | None:
    """The table from the catalog, or None if it has no such table."""
    try:
        return load_table(catalog, ref)
    except NoSuchTableError:
        return None


def catalog_db_url(settings: Settings, control_plane_url: str) -> str:
    return settings.catalog_database_url or control_plane_url


def load_catalog(settings: Settings, control_plane_url: str) -> Catalog:
    if settings.catalog_type == "rest":
        from pyiceberg.catalog.rest import RestCatalog

        if not settings.catalog_uri:
            raise ValueError("LAKEWARDEN_CATALOG_URI is required for a REST catalog")
        return RestCatalog(
            settings.catalog_name, uri=settings.catalog_uri, warehouse=settings.warehouse_uri
        )
    if settings.catalog_type != "jdbc":
        raise ValueError(f"unsupported catalog type {settings.catalog_type!r}: use jdbc or rest")
    from pyiceberg.catalog.sql import SqlCatalog

    return SqlCatalog(
        settings.catalog_name,
        uri=catalog_db_url(settings, control_plane_url),
        warehouse=settings.warehouse_uri,
        # survive a database restart: check pooled connections before use
        pool_pre_ping="true",
    )


@dataclass(frozen=True)
class JdbcParams:
    url: str
    user: str | None
    password: str | None


def jdbc_params(sqlalchemy_url: str) -> JdbcParams:
    """Translate a SQLAlchemy Postgres URL into what Iceberg's JdbcCatalog takes."""
    u = make_url(sqlalchemy_url)
    port = u.port or 5432
    return JdbcParams(
        url=f"jdbc:postgresql://{u.host or '127.0.0.1'}:{port}/{u.database}",
        user=u.username,
        password=u.password,
    )
