"""The Hive Metastore, as a `hive` catalog reaches it: over Thrift (pyiceberg's generated
client, `pyiceberg[hive]`), with socket timeouts pyiceberg's own client does not set (a
metastore that drops packets must not hold a registration or a poll).

Four reads: the tables lakewarden manages with their format and, for Iceberg's, metadata
pointers (`listed_tables`: one request per database and per 100 tables, no metadata file
read), one such table (`find_listed`: a Hudi or Delta table's storage location), the
notification log (`events_after`: what DbNotificationListener recorded after an event id,
each event reduced to the table it names and the pointer it moved to) and its newest id.

A metastore holds more than Iceberg tables. Hudi's Hive sync registers a Hudi table with
`spark.sql.sources.provider=hudi` (as a Spark datasource table, its default) and Hoodie's
input formats; a merge-on-read table as `<name>_ro` and `<name>_rt` (read-optimized and
real-time views, `<name>` for the first with `skip_ro_suffix`; Hudi 1.2 adds a `<name>`
snapshot table beside them), all at the table's base path: they are one table, `<name>`.
Spark's catalog registers a Delta table with `spark.sql.sources.provider=delta`. Both are
read by their storage location (`formats.hudi`, `formats.delta`); what else a metastore
holds (Hive tables, views) is not listed.
"""

from __future__ import annotations

import base64
import gzip
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from hive_metastore import ttypes
from hive_metastore.ThriftHiveMetastore import Client
from hive_metastore.ttypes import NotificationEventRequest
from hive_metastore.ttypes import Table as HiveTable
from pyiceberg.catalog.hive import HiveCatalog, _HiveClient
from thrift.protocol.TJSONProtocol import TJSONProtocolFactory
from thrift.Thrift import TException
from thrift.transport import TSocket, TTransport
from thrift.TSerialization import deserialize

# A call that takes longer has failed (a commit's lock wait is retried by pyiceberg itself).
TIMEOUT_S = 10.0
# Tables per get_table_objects_by_name request.
TABLES_PER_REQUEST = 100
METADATA_LOCATION = "metadata_location"


def _let_errors_carry_tracebacks() -> None:
    """The metastore's errors (MetaException, NoSuchObjectException, ...) are generated as
    immutable, and refuse even the `__traceback__` Python sets on an exception leaving a
    `@contextmanager` block: there it became "TypeError: can't modify immutable instance",
    the metastore's message lost. Their fields stay immutable; Python's own dunders pass."""
    for cls in vars(ttypes).values():
        if not (isinstance(cls, type) and issubclass(cls, TException)):
            continue
        guarded = cls.__setattr__

        def __setattr__(self: Any, name: str, value: Any, _guarded: Any = guarded) -> None:
            if name.startswith("__") and name.endswith("__"):
                BaseException.__setattr__(self, name, value)
            else:
                _guarded(self, name, value)

        cls.__setattr__ = __setattr__  # type: ignore[method-assign,assignment]


_let_errors_carry_tracebacks()


class _TimedClient(_HiveClient):
    """pyiceberg's client with a socket timeout (connect and every read)."""

    def __init__(self, uri: str, timeout_s: float, **kwargs: Any) -> None:
        self._timeout_ms = timeout_s * 1000
        super().__init__(uri, **kwargs)

    def _init_thrift_transport(self) -> TTransport.TTransportBase:
        if self._kerberos_auth:
            return super()._init_thrift_transport()
        url = urlparse(self._uri)
        sock = TSocket.TSocket(url.hostname, url.port)
        sock.setTimeout(self._timeout_ms)
        return TTransport.TBufferedTransport(sock)


class TimedHiveCatalog(HiveCatalog):
    """pyiceberg's HiveCatalog whose calls time out after TIMEOUT_S, and which threads may
    share: pyiceberg's keeps one Thrift transport, which each call opens and closes, so two
    threads' calls close each other's socket. Here each thread has its own."""

    def __init__(self, name: str, **properties: str) -> None:
        self._local = threading.local()
        super().__init__(name, **properties)

    @property
    def _client(self) -> _HiveClient:
        client: _HiveClient | None = getattr(self._local, "client", None)
        if client is None:
            client = self._local.client = self._create_hive_client(self.properties)
        return client

    @_client.setter
    def _client(self, client: _HiveClient) -> None:  # HiveCatalog.__init__ sets one
        self._local.client = client

    @staticmethod
    def _create_hive_client(properties: dict[str, str]) -> _HiveClient:
        uri = properties["uri"].split(",")[0]  # several: pyiceberg takes the first that parses
        return _TimedClient(uri, TIMEOUT_S, ugi=properties.get("ugi"))


@contextmanager
def metastore_client(uri: str, timeout_s: float = TIMEOUT_S) -> Iterator[Client]:
    """An open Thrift client of the metastore at `uri` (thrift://host:port), closed after."""
    with _TimedClient(uri.split(",")[0], timeout_s) as client:
        yield client


@dataclass(frozen=True)
class Listed:
    """A table of the metastore lakewarden manages: its format (`states.TableFormatName`'s
    values), an Iceberg table's metadata pointer, a Hudi or Delta table's storage location."""

    format: str
    pointer: str | None = None
    location: str | None = None


def listed_tables(client: Client) -> tuple[dict[tuple[str, str], Listed], int]:
    """Every Iceberg, Hudi and Delta table of the metastore (a merge-on-read Hudi table's
    `_ro`/`_rt` pair once, as `<name>`), and how many requests that took."""
    out: dict[tuple[str, str], Listed] = {}
    requests = 1
    for database in client.get_all_databases():
        requests += 1
        names = client.get_all_tables(database)
        tables: list[HiveTable] = []
        for start in range(0, len(names), TABLES_PER_REQUEST):
            requests += 1
            tables += client.get_table_objects_by_name(
                database, names[start : start + TABLES_PER_REQUEST]
            )
        for table in tables:
            if _is_iceberg(table):
                pointer = table.parameters.get(METADATA_LOCATION)
                out[(table.dbName, table.tableName)] = Listed("iceberg", pointer)
        out |= {(database, name): listed for name, listed in path_tables(tables).items()}
    return out, requests


def path_tables(tables: list[HiveTable]) -> dict[str, Listed]:
    """The Hudi and Delta tables among one database's `tables`, by the name lakewarden
    manages them under: the tables at one location are one table (a merge-on-read pair),
    named by the member without a view suffix, or else by the `_ro` one's name without it."""
    by_location: dict[tuple[str, str], list[str]] = {}
    for table in tables:
        fmt = table_format(table)
        location = _location(table)
        if fmt in ("hudi", "delta") and location:
            by_location.setdefault((fmt, location), []).append(table.tableName)
    out: dict[str, Listed] = {}
    for (fmt, location), names in by_location.items():
        out[_pair_name(names) if fmt == "hudi" else min(names)] = Listed(fmt, None, location)
    return out


# The views Hudi's Hive sync registers a merge-on-read table as.
HUDI_VIEW_SUFFIXES = ("_ro", "_rt")


def _pair_name(names: list[str]) -> str:
    plain = sorted(n for n in names if not n.endswith(HUDI_VIEW_SUFFIXES))
    if len(names) == 1 or plain:
        plain = plain or names
        return plain[0]
    return min(names)[: -len("_ro")]  # `_ro` sorts before `_rt`


def table_format(table: HiveTable) -> str | None:
    """The table's format: "iceberg", "hudi", "delta", or None (a Hive table, a view)."""
    if _is_iceberg(table):
        return "iceberg"
    provider = (table.parameters or {}).get("spark.sql.sources.provider", "").lower()
    if provider in ("hudi", "delta"):
        return provider
    input_format = (table.sd.inputFormat or "") if table.sd else ""
    return "hudi" if input_format.startswith("org.apache.hudi.") else None


def _location(table: HiveTable) -> str | None:
    """Where the table's files are: the storage properties' `path` of a Spark datasource
    table (Spark's catalog leaves a `<name>-__PLACEHOLDER__` location for a table Hive
    cannot read, such as a Delta table; Hudi's sync writes both), else its location."""
    sd = table.sd
    serde = (sd.serdeInfo.parameters if sd and sd.serdeInfo else None) or {}
    location = serde.get("path") or (sd.location if sd else None) or ""
    return location.rstrip("/") or None


def find_listed(client: Client, database: str, name: str) -> Listed | None:
    """The table lakewarden manages (or would) as `database.name`: an Iceberg, Hudi or
    Delta table of that name, or a merge-on-read Hudi table by either of its views; None
    if there is none."""
    for candidate in (name, *(name + s for s in HUDI_VIEW_SUFFIXES)):
        try:
            table = client.get_table(database, candidate)
        except ttypes.NoSuchObjectException:
            continue
        fmt = table_format(table)
        if fmt == "iceberg" and candidate == name:
            return Listed(fmt, table.parameters.get(METADATA_LOCATION))
        if fmt in ("hudi", "delta") and (candidate == name or fmt == "hudi"):
            return Listed(fmt, None, _location(table))
        if candidate == name:
            return None  # a Hive table or a view of that name
    return None


def _is_iceberg(table: HiveTable) -> bool:
    return (table.parameters or {}).get("table_type", "").upper() == "ICEBERG"


def current_event_id(client: Client) -> int:
    return int(client.get_current_notificationEventId().eventId)


@dataclass(frozen=True)
class TableEvent:
    """One notification about an Iceberg table. `op`: create, commit (its metadata pointer
    moved), rename (`old` is its previous (database, name)) or drop; or `relist`: a Hudi or
    Delta table was created or renamed (a MOR pair's names are the listing's to work out:
    the catalog is listed again, `events.metastore`)."""

    event_id: int
    op: str
    database: str
    name: str
    location: str | None
    old: tuple[str, str] | None = None


@dataclass(frozen=True)
class EventBatch:
    events: list[TableEvent]
    last_id: int  # the newest event id read (events of other kinds included)
    gap: bool  # events after `since` were trimmed from the log before they were read


def events_after(client: Client, since: int, limit: int) -> EventBatch:
    """The notification log's events after id `since` (at most `limit`), reduced to those
    about Iceberg tables. Hive's event ids count up by one, so a first id beyond `since + 1`
    means the log was trimmed (`hive.metastore.event.db.listener.timetolive`) past it."""
    response = client.get_next_notification(
        NotificationEventRequest(lastEvent=since, maxEvents=limit)
    )
    raw = response.events or []
    out = [event for e in raw if (event := table_event(e)) is not None]
    last = max((e.eventId for e in raw), default=since)
    return EventBatch(out, last, bool(raw) and raw[0].eventId > since + 1)


def table_event(event: Any) -> TableEvent | None:
    kind = event.eventType
    if kind not in ("CREATE_TABLE", "ALTER_TABLE", "DROP_TABLE"):
        return None
    message = _message(event.messageFormat or "", event.message or "")
    if kind == "DROP_TABLE":
        # The message names the table only: whether it was Iceberg, the caller knows.
        return TableEvent(event.eventId, "drop", event.dbName, event.tableName, None)
    after = _table(message.get("tableObjJson") or message.get("tableObjAfterJson"))
    if after is None:
        return None
    if table_format(after) in ("hudi", "delta"):
        # Created or renamed: relisted. Any other change (Hudi's sync stamping the last
        # commit it synced, statistics) is no commit of lakewarden's to hear: the catalog's
        # poll reads these tables' logs.
        before = _table(message.get("tableObjBeforeJson"))
        if kind == "ALTER_TABLE" and (
            before is None or (before.dbName, before.tableName) == (after.dbName, after.tableName)
        ):
            return None
        return TableEvent(event.eventId, "relist", after.dbName, after.tableName, None)
    if not _is_iceberg(after):
        return None
    location = after.parameters.get(METADATA_LOCATION)
    if kind == "CREATE_TABLE":
        return TableEvent(event.eventId, "create", after.dbName, after.tableName, location)
    before = _table(message.get("tableObjBeforeJson"))
    if before is not None and (before.dbName, before.tableName) != (
        after.dbName,
        after.tableName,
    ):
        old = (before.dbName, before.tableName)
        return TableEvent(event.eventId, "rename", after.dbName, after.tableName, location, old)
    if before is not None and before.parameters.get(METADATA_LOCATION) == location:
        return None  # a property or statistics change: no commit
    return TableEvent(event.eventId, "commit", after.dbName, after.tableName, location)


def _message(fmt: str, message: str) -> dict[str, Any]:
    """The event's JSON body: plain (Hive 2 and 3's `json-0.2`), or gzipped and base64'd
    (Hive 4's `gzip(json-2.0)`)."""
    if fmt.startswith("gzip"):
        message = gzip.decompress(base64.b64decode(message)).decode()
    try:
        body = json.loads(message)
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _table(serialized: str | None) -> HiveTable | None:
    """A table object as the message carries it: Thrift's JSON protocol."""
    if not serialized:
        return None
    table = deserialize(HiveTable(), serialized.encode(), TJSONProtocolFactory())
    table.parameters = table.parameters or {}
    return table
