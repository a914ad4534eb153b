"""The catalogs a deployment watches: the settings' default entry and those registered
through the API (`catalogs` rows), with their pyiceberg clients; and the rules for
registering one (`check_properties`: secrets only as references that `secret_refs`
allows, never as values)."""

from __future__ import annotations

import logging
import threading
import time

from pyiceberg.catalog import Catalog
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from lakewarden.catalogs.catalog import (
    CatalogConfigError,
    CatalogEntry,
    PropertyValue,
    UnknownCatalog,
    build_catalog,
    check_reference,
    default_entry,
)
from lakewarden.db.models import Catalog as CatalogRow
from lakewarden.redact import MASK, is_secret_key, looks_like_credential, url_secrets
from lakewarden.secret_refs import RefRules
from lakewarden.settings import Settings
from lakewarden.states import PATH_CATALOGS

log = logging.getLogger(__name__)

# How long a process trusts its list of registered catalogs before reading it again: a
# catalog registered on one API replica is known to every process this soon after.
REGISTRY_TTL_S = 5.0


class NotIceberg(CatalogConfigError):
    """An Iceberg-only path was asked of a catalog of another format (a hudi or delta
    catalog)."""


class CatalogRegistry:
    """Every catalog this deployment watches: the settings' default entry and the `catalogs`
    rows. Clients are built once per catalog version and shared (pyiceberg's catalogs are
    thread-safe for loads; its HiveCatalog is not, so a hive catalog's client is
    `metastore.TimedHiveCatalog`, one connection per thread)."""

    def __init__(self, settings: Settings, control_plane_url: str, engine: Engine) -> None:
        self._default = default_entry(settings, control_plane_url)
        self._refs = RefRules.of(settings)
        check_default_properties(settings.catalog_type, settings.catalog_properties, self._refs)
        self._engine = engine
        self._lock = threading.Lock()
        self._entries: dict[str, CatalogEntry] = {}
        self._read_at = -REGISTRY_TTL_S
        self._clients: dict[str, tuple[int, Catalog]] = {}

    @property
    def default(self) -> CatalogEntry:
        return self._default

    def entries(self, region: str | None = None) -> list[CatalogEntry]:
        """The default entry first, then the registered ones by name; only `region`'s if
        given (what a process pinned to a region watches: `Settings.pinned_region`)."""
        self._refresh()
        every = [self._default, *sorted(self._entries.values(), key=lambda e: e.name)]
        return every if region is None else [e for e in every if e.region == region]

    def entry(self, name: str) -> CatalogEntry:
        if name == self._default.name:
            return self._default
        self._refresh()
        if name not in self._entries:
            self._refresh(force=True)  # registered a moment ago, perhaps on another replica
        try:
            return self._entries[name]
        except KeyError:
            raise UnknownCatalog(
                f"no catalog {name!r}: GET /api/v1/catalogs lists them, POST registers one"
            ) from None

    def load(self, name: str) -> Catalog:
        """pyiceberg's client of the catalog called `name` (an Iceberg catalog's)."""
        entry = self.entry(name)
        if entry.type in PATH_CATALOGS:
            raise NotIceberg(
                f"catalog {name!r} holds {entry.type.capitalize()} tables, read by path "
                f"(lakewarden.formats.{entry.type}), not through an Iceberg catalog client"
            )
        with self._lock:
            cached = self._clients.get(name)
            if cached is not None and cached[0] == entry.version:
                return cached[1]
        client = build_catalog(entry)
        with self._lock:
            superseded = self._clients.get(name)
            self._clients[name] = (entry.version, client)
        if superseded is not None and superseded[1] is not client:
            _close(superseded[1])  # an older version's client: its pool would stay open
        return client

    def forget(self) -> None:
        """Read the registered catalogs again at the next use (after this process changed them)."""
        with self._lock:
            self._read_at = -REGISTRY_TTL_S

    def _refresh(self, *, force: bool = False) -> None:
        now = time.monotonic()
        with self._lock:
            if not force and now - self._read_at < REGISTRY_TTL_S:
                return
        with Session(self._engine) as session:
            rows = session.scalars(select(CatalogRow)).all()
            entries = {row.name: entry_of(row, self._refs) for row in rows}
        with self._lock:
            self._entries, self._read_at = entries, now
            removed = [
                self._clients.pop(gone)[1]
                for gone in list(self._clients)
                if gone != self._default.name and gone not in entries
            ]
        for client in removed:  # a removed catalog's client: close its connections
            _close(client)


def _close(client: Catalog) -> None:
    """Release a client's connections (a JDBC catalog's pool, a REST session). A request
    still using it keeps its connection until it is done: SQLAlchemy's dispose closes only
    idle ones, and a checked-out connection is closed when returned."""
    try:
        client.close()
    except Exception:  # closing is best effort: never fail the lookup that replaced it
        log.warning("closing the client of catalog %r failed", client.name, exc_info=True)


def entry_of(row: CatalogRow, refs: RefRules) -> CatalogEntry:
    """The registry entry of a `catalogs` row."""
    return CatalogEntry(
        name=row.name,
        type=row.type,
        properties=dict(row.properties),
        poll_interval_s=row.poll_interval_s,
        poll_concurrency=row.poll_concurrency,
        version=row.version,
        refs=refs,
        region=row.region,
    )


# pyiceberg's catalog and FileIO properties that hold credentials (pyiceberg.catalog.rest,
# .catalog.sql, .io), beside what `is_secret_key` recognises by name. Lower case.
_IO_SECRETS = (
    "s3.access-key-id",
    "s3.secret-access-key",
    "s3.session-token",
    "client.access-key-id",
    "client.secret-access-key",
    "client.session-token",
    "gcs.oauth2.token",
    "adls.account-key",
    "adls.sas-token",
    "adls.connection-string",
    "adls.client-secret",
    "adls.credential",
    "adls.token",
    "hf.token",
)
KNOWN_SECRETS: dict[str, frozenset[str]] = {
    "rest": frozenset({"credential", "token", "header.authorization", *_IO_SECRETS}),
    "jdbc": frozenset({"password", "jdbc.password", *_IO_SECRETS}),
    "hive": frozenset(_IO_SECRETS),
}
# Secrets under a prefix (`adls.sas-token.<account>`, `header.<auth header>`).
_SECRET_PREFIXES = ("adls.sas-token.", "adls.connection-string.", "adls.account-key.")


def is_secret_property(kind: str, key: str) -> bool:
    """Whether catalog property `key` of a `kind` catalog holds a credential: one of the
    type's known secret properties, or named like a secret (`redact.is_secret_key`)."""
    lowered = key.lower()
    return (
        lowered in KNOWN_SECRETS.get(kind, frozenset())
        or lowered.startswith(_SECRET_PREFIXES)
        or is_secret_key(key)
    )


def _secret_value(kind: str, key: str, value: PropertyValue) -> bool:
    return isinstance(value, str) and (
        is_secret_property(kind, key) or looks_like_credential(value)
    )


def shown(kind: str, properties: dict[str, PropertyValue]) -> dict[str, PropertyValue]:
    """The properties as responses show them: a secret stored as a value (registered before
    `check_properties` refused it) masked, references as they are."""
    return {k: MASK if _secret_value(kind, k, v) else v for k, v in properties.items()}


def check_default_properties(
    kind: str, properties: dict[str, PropertyValue], refs: RefRules
) -> None:
    """LAKEWARDEN_CATALOG_PROPERTIES (the default catalog's) under `check_properties`' rule
    for the properties beside its URI: references that `refs` allows, no secret as a value.
    A CatalogConfigError names the setting and the property, never the value."""
    try:
        check_properties(kind, {"uri": "", **properties}, refs)
    except CatalogConfigError as exc:
        raise CatalogConfigError(f"LAKEWARDEN_CATALOG_PROPERTIES: {exc}") from None


def check_properties(kind: str, properties: dict[str, PropertyValue], refs: RefRules) -> None:
    """CatalogConfigError unless the properties can be stored: what the catalog type needs
    is there, every reference names what `refs` allows, and no secret is given as a value
    (a secret property, a URL with a password, or a value that looks like a credential).
    A message names the property, never its value."""
    if kind in PATH_CATALOGS:
        if not isinstance(properties.get("warehouse"), str) or not properties["warehouse"]:
            raise CatalogConfigError(
                f"a {kind} catalog needs the property 'warehouse' (the directory or URI its "
                "tables' base paths are under: <warehouse>/<namespace>/<name>)"
            )
    elif "uri" not in properties:
        what = {
            "jdbc": "its database URL",
            "hive": "the metastore's thrift://host:port",
        }.get(kind, "the REST endpoint")
        raise CatalogConfigError(f"a {kind} catalog needs the property 'uri' ({what})")
    for key, value in properties.items():
        if not isinstance(value, str):
            check_reference(key, value, refs)
            continue
        if is_secret_property(kind, key):
            why = "is a secret"
        elif url_secrets(value):
            why = "holds a URL with a password"
        elif looks_like_credential(value):
            why = "looks like a credential (a token, a key, an authorization header)"
        else:
            continue
        raise CatalogConfigError(
            f"property {key!r} {why}: give it as a reference, {refs.hint()}, never as a "
            "value (the value is not repeated here)"
        )
