"""The Hive Metastore, as a `hive` catalog reaches it: over Thrift (pyiceberg's generated
client, `pyiceberg[hive]`), with socket timeouts pyiceberg's own client does not set (a
metastore that drops packets must not hold a registration or a poll).

Three reads: the Iceberg tables with their metadata pointers (`iceberg_pointers`: one
request per database and per 100 tables, no metadata file read), the notification log
(`events_after`: what DbNotificationListener recorded after an event id, each event reduced
to the table it names and the pointer it moved to) and its newest id.
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


def iceberg_pointers(client: Client) -> tuple[dict[tuple[str, str], str | None], int]:
    """Every Iceberg table of the metastore (`table_type=ICEBERG`) with its metadata pointer;
    and how many requests that took."""
    out: dict[tuple[str, str], str | None] = {}
    requests = 1
    for database in client.get_all_databases():
        requests += 1
        names = client.get_all_tables(database)
        for start in range(0, len(names), TABLES_PER_REQUEST):
            requests += 1
            for table in client.get_table_objects_by_name(
                database, names[start : start + TABLES_PER_REQUEST]
            ):
                if _is_iceberg(table):
                    out[(table.dbName, table.tableName)] = table.parameters.get(METADATA_LOCATION)
    return out, requests


def _is_iceberg(table: HiveTable) -> bool:
    return (table.parameters or {}).get("table_type", "").upper() == "ICEBERG"


def current_event_id(client: Client) -> int:
    return int(client.get_current_notificationEventId().eventId)


@dataclass(frozen=True)
class TableEvent:
    """One notification about an Iceberg table. `op`: create, commit (its metadata pointer
    moved), rename (`old` is its previous (database, name)) or drop."""

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
    if after is None or not _is_iceberg(after):
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
