"""The Iceberg catalog, as pyiceberg (workers, API) and Spark (jobs) both see it.

Both sides must name the catalog the same: it is a column of `iceberg_tables`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import urlparse

from pyiceberg import __version__ as PYICEBERG
from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import IcebergTables, SqlCatalog
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
from pyiceberg.exceptions import ValidationError as MetadataInvalid
from pyiceberg.io import FileIO, load_file_io
from pyiceberg.table import Table
from sqlalchemy import select, tuple_
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from lakewarden import secret_refs
from lakewarden.catalogs.metadata_view import TableRead, read_view
from lakewarden.db.session import checked_on_checkout
from lakewarden.hdfs import with_file_io
from lakewarden.redact import quotes_part_of
from lakewarden.secret_refs import RefRefused, RefRules
from lakewarden.settings import DEFAULT_REGION, Settings, sqlalchemy_pg_url
from lakewarden.states import CatalogType

# Identifiers that reach Spark SQL are validated, then backquoted: never pasted raw.
# `\Z`, not `$`: `$` also matches before a trailing newline, and pyiceberg strips it, so
# "sec\n" would name the same Iceberg namespace as "sec" under a second managed row.
IDENTIFIER = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]{0,127}\Z")


class InvalidIdentifier(ValueError):
    pass


@dataclass(frozen=True)
class TableRef:
    """A table of a catalog: its namespace (one level, or several joined by dots, as Iceberg
    allows: `a.b.c`) and its name. Every level is validated, and quoted where it reaches SQL."""

    namespace: str
    name: str

    def __post_init__(self) -> None:
        levels = (self.namespace or "").split(".")
        for part, value in [("namespace", level) for level in levels] + [("name", self.name)]:
            if not IDENTIFIER.match(value or ""):
                raise InvalidIdentifier(
                    f"invalid table {part} {value!r}: use letters, digits and underscores, "
                    "starting with a letter or underscore (at most 128 characters); a "
                    "namespace may have several such levels joined by dots (a.b.c)"
                )

    @classmethod
    def parse(cls, dotted: str) -> TableRef:
        namespace, sep, name = dotted.rpartition(".")
        if not sep:
            raise InvalidIdentifier(f"table {dotted!r} must be written as namespace.name")
        return cls(namespace, name)

    @property
    def levels(self) -> tuple[str, ...]:
        """The namespace's levels."""
        return tuple(self.namespace.split("."))

    @property
    def identifier(self) -> tuple[str, ...]:
        """The identifier pyiceberg takes: every namespace level, then the name."""
        return (*self.levels, self.name)

    @property
    def dotted(self) -> str:
        return f"{self.namespace}.{self.name}"

    def spark_name(self, catalog: str) -> str:
        return ".".join(f"`{part}`" for part in (catalog, *self.identifier))


def valid_namespace(namespace: str) -> bool:
    """Whether `namespace` is one or more identifiers joined by dots."""
    return all(IDENTIFIER.match(level) for level in namespace.split("."))


class UnreadableMetadata(ValueError):
    """pyiceberg cannot read the table's metadata (a type it does not know: Iceberg v3's
    variant, geometry and geography columns in pyiceberg 0.12), so lakewarden cannot plan
    or measure it: registration refuses it (422), saying which."""


# pyiceberg's (pydantic's) message: "… validation error for …  Value error, <why> [type=…"
_WHY = re.compile(r"Value error, (?P<why>[^\[\n]+)")


def load_table(catalog: Catalog, ref: TableRef) -> Table:
    """The table from the catalog; pyiceberg's `NoSuchTableError` naming the catalog and the
    table if it has no such table (nor namespace); `UnreadableMetadata` if pyiceberg cannot
    read its metadata."""
    try:
        return catalog.load_table(ref.identifier)
    except (NoSuchTableError, NoSuchNamespaceError) as exc:
        raise NoSuchTableError(f"catalog {catalog.name!r} has no table {ref.dotted}") from exc
    except MetadataInvalid as exc:
        found = _WHY.search(str(exc))
        why = found["why"].strip() if found else "its metadata does not validate"
        raise UnreadableMetadata(
            f"table {ref.dotted} of catalog {catalog.name!r}: pyiceberg {PYICEBERG} cannot "
            f"read its metadata ({why}); Iceberg format v3's variant, geometry and geography "
            "columns are not read by it, so lakewarden cannot plan or measure this table"
        ) from None


def find_table(catalog: Catalog, ref: TableRef) -> Table | None:
    """The table from the catalog, or None if it has no such table."""
    try:
        return load_table(catalog, ref)
    except NoSuchTableError:
        return None


def find_tables(catalog: Catalog, refs: list[TableRef]) -> dict[TableRef, TableRead | None]:
    """`find_table` of many tables, as ingest reads them. A JDBC catalog's pointers are read
    in one query (not one session and query per table: a batch of commits reads its tables
    at once), then each table's metadata file as a `MetadataView` (its snapshots parsed
    only when asked for; a file a view does not read is parsed in full); other catalogs
    load them one by one."""
    if not isinstance(catalog, SqlCatalog) or not refs:
        return {ref: find_table(catalog, ref) for ref in refs}
    stmt = select(IcebergTables).where(
        IcebergTables.catalog_name == catalog.name,
        tuple_(IcebergTables.table_namespace, IcebergTables.table_name).in_(
            [(ref.namespace, ref.name) for ref in refs]
        ),
    )
    # pyiceberg's own filters and conversion (private: pinned with pyiceberg), so a table
    # read here is the one SqlCatalog.load_table reads.
    if (type_filter := catalog._iceberg_type_filter()) is not None:
        stmt = stmt.where(type_filter)
    with Session(catalog.engine) as session:
        rows = {TableRef(r.table_namespace, r.table_name): r for r in session.scalars(stmt)}
    ios: dict[str, FileIO] = {}  # one FileIO per scheme, not one per table
    out: dict[TableRef, TableRead | None] = {}
    for ref in refs:
        row = rows.get(ref)
        location = row.metadata_location if row is not None else None
        if row is None or not location:
            out[ref] = catalog._convert_orm_to_iceberg(row) if row is not None else None
            continue
        scheme = urlparse(location).scheme
        if scheme not in ios:
            ios[scheme] = load_file_io(properties=catalog.properties, location=location)
        view = read_view(ios[scheme], location)
        out[ref] = view if view is not None else catalog._convert_orm_to_iceberg(row)
    return out


CATALOG_TYPES = tuple(CatalogType)


class CatalogConfigError(ValueError):
    """A catalog entry that cannot be used as given (the message says what to fix)."""


class UnknownCatalog(LookupError):
    pass


# A property value: the value itself, or a reference to where the secret is kept.
PropertyValue = str | dict[str, str]


@dataclass(frozen=True)
class CatalogEntry:
    """One Iceberg catalog lakewarden watches: the settings-configured default, or one
    registered through the API. `name` is the Iceberg catalog's own name (the JDBC catalog's
    `catalog_name` column; Spark's catalog of that name). `properties` are pyiceberg's
    catalog properties, secrets as references (`resolve_properties`) that `refs` allows."""

    name: str
    type: str
    properties: dict[str, PropertyValue] = field(repr=False)
    poll_interval_s: float = 30.0
    poll_concurrency: int = 4
    version: int = 1
    default: bool = False
    refs: RefRules = field(kw_only=True, repr=False)
    region: str = field(default=DEFAULT_REGION, kw_only=True)  # lakewarden.catalogs.regions

    @property
    def resolved(self) -> dict[str, str]:
        return resolve_properties(self.properties, self.refs)

    @property
    def secret_values(self) -> list[str]:
        """The values its references resolve to now (those that can be read)."""
        out = []
        for key, value in self.properties.items():
            if not isinstance(value, str):
                try:
                    out.append(secret_refs.read(key, value, self.refs))
                except RefRefused:
                    continue
        return out

    def without_secrets(self, line: str, what: str, raw: str | None = None) -> str:
        """`line`, an error of using this catalog, unless it quotes any part of a value
        read from a reference (a host parsed out of a URL, a line of a secret file): then
        only `what` failed (the error's type) and where the whole message is. `raw`: the
        error's text before redaction, which is what is judged (redaction masks a whole
        value read from a reference, not the parts of it an error may quote)."""
        if not quotes_part_of(line if raw is None else raw, self.secret_values):
            return line
        return (
            f"{what} (its message is withheld: it quotes a value read from a secret "
            "reference; the process's log has it, masked)"
        )

    @property
    def jdbc_url(self) -> str | None:
        """The SQLAlchemy URL of a JDBC catalog's database (None for REST)."""
        if self.type != "jdbc":
            return None
        return sqlalchemy_pg_url(self.resolved.get("uri", ""))


def resolve_properties(properties: dict[str, PropertyValue], refs: RefRules) -> dict[str, str]:
    """The properties with every secret reference replaced by its value (`secret_refs`:
    what a reference may name). One refused or unreadable is a CatalogConfigError naming
    it, never quoting what was read."""
    out: dict[str, str] = {}
    for key, value in properties.items():
        out[key] = value if isinstance(value, str) else _read_reference(key, value, refs)
    return out


def _read_reference(key: str, ref: dict[str, str], refs: RefRules) -> str:
    try:
        return secret_refs.read(key, ref, refs)
    except RefRefused as exc:
        raise CatalogConfigError(str(exc)) from None


def check_reference(key: str, ref: dict[str, str], refs: RefRules) -> None:
    """CatalogConfigError unless `refs` allows the reference (nothing is read)."""
    try:
        secret_refs.check(key, ref, refs)
    except RefRefused as exc:
        raise CatalogConfigError(str(exc)) from None


def default_entry(settings: Settings, control_plane_url: str) -> CatalogEntry:
    """The settings-configured catalog, as the registry's default entry."""
    if settings.catalog_type not in CATALOG_TYPES:
        raise ValueError(
            f"unsupported catalog type {settings.catalog_type!r}: use jdbc, rest or hive"
        )
    if settings.catalog_type in ("rest", "hive"):
        if not settings.catalog_uri:
            raise ValueError(
                f"LAKEWARDEN_CATALOG_URI is required for a {settings.catalog_type} catalog"
            )
        uri = settings.catalog_uri
    else:
        uri = settings.catalog_database_url or control_plane_url
    for key in ("uri", "warehouse"):
        if key in settings.catalog_properties:
            setting = "CATALOG_URI" if key == "uri" else "WAREHOUSE"
            raise ValueError(
                f"LAKEWARDEN_CATALOG_PROPERTIES may not set {key!r}: use LAKEWARDEN_{setting}"
            )
    return CatalogEntry(
        name=settings.catalog_name,
        type=settings.catalog_type,
        properties={**settings.catalog_properties, "uri": uri, "warehouse": settings.warehouse_uri},
        poll_interval_s=settings.poll_interval_s,
        default=True,
        refs=RefRules.of(settings),
    )


def build_catalog(entry: CatalogEntry) -> Catalog:
    """pyiceberg's client for the entry (a warehouse on HDFS read through hdfs-native)."""
    props = with_file_io(entry.resolved)
    if entry.type == "rest":
        from pyiceberg.catalog.rest import RestCatalog

        return RestCatalog(entry.name, **props)
    if entry.type == "hive":
        from lakewarden.metastore import TimedHiveCatalog

        return TimedHiveCatalog(entry.name, **props)
    if entry.type != "jdbc":
        raise CatalogConfigError(f"unsupported catalog type {entry.type!r}: use jdbc, rest or hive")
    from pyiceberg.catalog.sql import SqlCatalog

    props["uri"] = sqlalchemy_pg_url(props.get("uri", ""))
    # survive a database restart: check pooled connections before use, as the control
    # plane's own (`checked_on_checkout`, no round trip per load); a `pool_pre_ping` set
    # on the entry still pings each
    catalog = SqlCatalog(entry.name, **{"pool_pre_ping": "false", **props})
    checked_on_checkout(catalog.engine)
    return catalog


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
