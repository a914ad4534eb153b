"""Polling: catch every commit no notification reported, on every catalog, cheaply.

A poll of one catalog lists its tables, with their metadata pointers in one query on a JDBC
catalog (and installs the commit trigger where it may), a few requests per database on a
Hive Metastore (`lakewarden.metastore`), or namespace by namespace on a REST catalog;
follows that list (management rules adopt new tables; renamed and dropped ones are
followed); then refreshes only the managed tables whose pointer moved (on a REST catalog each
is loaded to see its pointer, at most `poll_concurrency` at once).

`poll_due` is what the API replicas run: a replica polls a catalog only when it wins the
catalog's due time in `catalog_polls`, so each catalog is polled once per its interval
however many replicas run, and the cost does not grow with them. A replica started with
LAKEWARDEN_REGION polls only that region's catalogs (it may not reach another data
center's); without it, every catalog.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from pyiceberg.catalog import Catalog
from pyiceberg.catalog.rest import RestCatalog
from sqlalchemy import Engine, select, text, tuple_

from lakewarden.catalogs.adoption import DROPPED, AdoptResult, adopt
from lakewarden.catalogs.catalog import CatalogEntry, InvalidIdentifier, TableRef
from lakewarden.catalogs.metadata_view import TableRead
from lakewarden.catalogs.rest_loads import ConditionalLoads, Load
from lakewarden.db.models import ManagedTable
from lakewarden.db.session import catalog_engine, transaction
from lakewarden.db.trigger import install_commit_trigger
from lakewarden.errors import headline
from lakewarden.events.path_tables import LOGS, refresh_path_table
from lakewarden.events.refresh import refresh_table, refresh_tables
from lakewarden.formats import warehouse
from lakewarden.isolation import PerTable, error_line
from lakewarden.leader import FencedOut
from lakewarden.metastore import listed_tables, metastore_client
from lakewarden.runtime import Runtime
from lakewarden.states import PATH_CATALOGS, CatalogType
from lakewarden.tables import LIVE, retire_tables

log = logging.getLogger(__name__)

# A table of the catalog: (namespace, name) -> its metadata pointer (None: not read).
Listing = dict[tuple[str, str], str | None]


@dataclass
class PollResult:
    catalog: str
    tables_seen: int = 0
    refreshed: int = 0
    requests: int = 0  # catalog requests (REST loads and lists; 1 per JDBC query)
    commit_trigger: bool | None = None
    errors: list[str] = field(default_factory=list)


def jdbc_listing(rt: Runtime, entry: CatalogEntry) -> tuple[Listing | None, bool]:
    """Every table of a JDBC catalog with its metadata pointer, in one query (None if the
    catalog has no `iceberg_tables` yet); and whether the commit trigger is installed there
    (installed now if lakewarden may: on a catalog database that is not its own it may lack
    the rights, and then polling is the road)."""
    engine = catalog_engine(entry.jdbc_url or "", rt.engine)
    with engine.begin() as conn:
        if not conn.execute(text("SELECT to_regclass('iceberg_tables') IS NOT NULL")).scalar():
            return None, False
        # Iceberg-Java's V1 schema lists views in the same table: only tables are managed.
        has_type = conn.execute(
            text(
                "SELECT EXISTS (SELECT FROM information_schema.columns WHERE "
                "table_name = 'iceberg_tables' AND column_name = 'iceberg_type' "
                "AND table_schema = current_schema())"
            )
        ).scalar()
        only_tables = " AND (iceberg_type IS NULL OR iceberg_type = 'TABLE')" if has_type else ""
        rows = conn.execute(
            text(
                "SELECT table_namespace, table_name, metadata_location FROM iceberg_tables "
                "WHERE catalog_name = :c" + only_tables
            ),
            {"c": entry.name},
        ).all()
    return {(r[0], r[1]): r[2] for r in rows}, _ensure_trigger(engine, entry)


def rest_listing(client: Catalog, concurrency: int = 1) -> tuple[Listing, int]:
    """Every table of a REST catalog (every namespace level walked, a level's lists
    `concurrency` at once), without pointers (a list does not return them); and how many
    requests that took."""
    listing: Listing = {}
    requests = 0
    level: list[tuple[str, ...]] = [()]

    def children(parent: tuple[str, ...]) -> list[tuple[str, ...]]:
        found = client.list_namespaces(parent) if parent else client.list_namespaces()
        return [(*parent, *child[len(parent) :]) if parent else tuple(child) for child in found]

    with ThreadPoolExecutor(max(1, concurrency), "list") as pool:
        while level:
            namespaces = [ns for found in pool.map(children, level) for ns in found]
            for identifiers in pool.map(client.list_tables, namespaces):
                for identifier in identifiers:
                    listing[(".".join(identifier[:-1]), identifier[-1])] = None
            requests += len(level) + len(namespaces)
            level = namespaces
    return listing, requests


def _follow(
    rt: Runtime,
    entry: CatalogEntry,
    listing: Listing,
    formats: dict[tuple[str, str], str] | None = None,
) -> AdoptResult | None:
    """Bring the catalog's managed tables in line with its listing: rules adopt new tables,
    renamed ones keep their history, dropped ones retire (`lakewarden.catalogs.adoption.adopt`)."""
    try:
        with transaction(rt.engine) as session:
            result = adopt(
                session,
                entry.name,
                [(ns, name, location) for (ns, name), location in listing.items()],
                actor=f"poll:{rt.process_id}",
                formats=formats,
            )
    except Exception as exc:
        log.exception("catalog %s: could not follow its table list", entry.name)
        raise PollFailed(f"following the table list: {error_line(exc)}") from exc
    if any(result.counts.values()):
        log.info("catalog %s: %s", entry.name, result.counts)
    for problem in result.problems:
        log.warning("catalog %s: %s", entry.name, problem)
    return result


def follow_tables(
    rt: Runtime,
    catalog: str,
    created: list[tuple[str, str, str | None]],
    gone: list[TableRef],
) -> AdoptResult:
    """Follow a few tables a notification named, without listing the catalog: those `gone`
    (dropped, or the old name of a rename) are retired as dropped, then those `created`
    (or renamed to) are adopted by the rules, a rename recognised by its metadata pointer."""
    actor = f"notify:{rt.process_id}"
    with transaction(rt.engine) as session:
        if gone:
            ids = session.scalars(
                select(ManagedTable.id).where(
                    ManagedTable.catalog == catalog,
                    LIVE,
                    tuple_(ManagedTable.namespace, ManagedTable.name).in_(
                        [(ref.namespace, ref.name) for ref in gone]
                    ),
                )
            ).all()
            retire_tables(session, ids, reason=DROPPED, by=actor)
        # a note names an Iceberg table (a Hudi or Delta one is relisted: events.metastore)
        return adopt(session, catalog, created, actor=actor, complete=False, formats={})


class PollFailed(RuntimeError):
    pass


def _ensure_trigger(engine: Engine, entry: CatalogEntry) -> bool:
    try:
        with engine.begin() as conn:
            return install_commit_trigger(conn)
    except Exception as exc:  # no rights on a database that is not ours: poll instead
        log.info("catalog %s: no commit trigger (%s); polling it", entry.name, error_line(exc))
        return False


def _managed(rt: Runtime, catalog: str) -> dict[tuple[str, str], tuple[str | None, str]]:
    """The catalog's live managed tables: (metadata location, format) by (namespace, name)."""
    with transaction(rt.engine) as session:
        rows = session.execute(
            select(
                ManagedTable.namespace,
                ManagedTable.name,
                ManagedTable.metadata_location,
                ManagedTable.format,
            ).where(ManagedTable.catalog == catalog, LIVE)
        ).all()
    return {(ns, name): (location, fmt) for ns, name, location, fmt in rows}


def poll_catalog(rt: Runtime, entry: CatalogEntry) -> PollResult:
    """Follow the catalog's table list (`_follow`), then refresh every managed table of it
    whose metadata pointer moved (tables just adopted included). A table that fails is
    alerted (`lakewarden.isolation`) and retried on the next poll."""
    result = PollResult(entry.name)
    isolated = PerTable("poller")
    if entry.type in PATH_CATALOGS:
        # The warehouse walked for the format's tables (rules adopt from it), then each
        # managed table's log is read for its head token.
        fmt = PATH_CATALOGS[CatalogType(entry.type)].value
        try:
            listing: Listing = dict(warehouse.list_tables(entry, fmt))
        except Exception as exc:
            raise PollFailed(f"listing the warehouse: {error_line(exc)}") from exc
        result.tables_seen = len(listing)
        _follow(rt, entry, listing, dict.fromkeys(listing, fmt))
        managed = _managed(rt, entry.name)
        for (namespace, name), (known, fmt) in managed.items():
            with isolated.table(f"{namespace}.{name}"):
                ref = TableRef(namespace, name)
                result.refreshed += refresh_path_table(rt, entry, ref, known, fmt)
    elif entry.type in ("jdbc", "hive"):
        pointers: Listing | None
        formats: dict[tuple[str, str], str] | None = None
        if entry.type == "jdbc":
            pointers, result.commit_trigger = jdbc_listing(rt, entry)
            result.requests = 1
        else:  # the metastore lists its tables' pointers: nothing is loaded to compare
            with metastore_client(entry.resolved["uri"]) as client:
                listed, result.requests = listed_tables(client)
            pointers = {key: t.pointer for key, t in listed.items()}
            formats = {key: t.format for key, t in listed.items() if t.format != "iceberg"}
        if pointers is not None:
            result.tables_seen = len(pointers)
            _follow(rt, entry, pointers, formats)
        managed = _managed(rt, entry.name)
        for key, (known, fmt) in managed.items():
            if fmt in LOGS:  # a Hive catalog's Hudi or Delta table: its log is read
                with isolated.table(".".join(key)):
                    ref = TableRef(*key)
                    result.refreshed += refresh_path_table(rt, entry, ref, known, fmt)
                continue
            if pointers is not None and pointers.get(key) == known:
                continue
            result.refreshed += _refresh(rt, entry.name, key, isolated)
    else:
        client = rt.catalogs.load(entry.name)
        listing, result.requests = rest_listing(client, entry.poll_concurrency)
        result.tables_seen = len(listing)
        _follow(rt, entry, listing)
        checked, result.refreshed = _refresh_rest(rt, entry, client, isolated)
        result.requests += checked
    with transaction(rt.engine) as session:
        isolated.record(session)
    result.errors = sorted(isolated.failed)
    return result


# Tables whose pointer moved are ingested this many at a time (`refresh_tables`, set-based):
# the first poll after adopting a large fleet finds every table moved.
REST_REFRESH_CHUNK = 200


def _refresh_rest(
    rt: Runtime, entry: CatalogEntry, client: Catalog, isolated: PerTable
) -> tuple[int, int]:
    """Load each managed table of a REST catalog conditionally (`rest_loads`: a 304 for an
    unchanged one where the catalog keeps ETags), at most `poll_concurrency` at once; ingest
    those whose pointer moved, set-based, a chunk as soon as it is loaded (while the next
    loads run: a chunk's metadata is let go once ingested, not held for the whole fleet);
    then keep the ETags that describe what is now recorded. Returns (tables loaded, tables
    with new commits)."""
    with transaction(rt.engine) as session:
        rows = session.execute(
            select(
                ManagedTable.namespace,
                ManagedTable.name,
                ManagedTable.metadata_location,
                ManagedTable.catalog_etag,
            ).where(ManagedTable.catalog == entry.name, LIVE)
        ).all()
    assert isinstance(client, RestCatalog)
    concurrency = max(1, entry.poll_concurrency)
    load_if_changed = ConditionalLoads(client, concurrency)

    def check(row: tuple[str, str, str | None, str | None]) -> tuple[TableRef, Load] | None:
        namespace, name, known, etag = row
        with isolated.table(f"{namespace}.{name}"):
            try:
                ref = TableRef(namespace, name)
            except InvalidIdentifier:
                return None
            return ref, load_if_changed(ref, known, etag)
        return None

    loads: dict[TableRef, Load] = {}
    chunk: dict[TableRef, TableRead | None] = {}
    refreshed = 0
    with ThreadPoolExecutor(concurrency, "poll") as pool:
        try:
            for found in pool.map(check, rows):
                if found is None:
                    continue
                ref, load = found
                if load.table is not None:
                    chunk[ref] = load.table
                    load = replace(load, table=None)
                loads[ref] = load
                if len(chunk) >= REST_REFRESH_CHUNK:
                    refreshed += _ingest_chunk(rt, entry.name, chunk, isolated)
                    chunk = {}
        except BaseException:
            pool.shutdown(cancel_futures=True)  # cut short (FencedOut): no more loads
            raise
    if chunk:
        refreshed += _ingest_chunk(rt, entry.name, chunk, isolated)
    _keep_etags(rt, entry.name, loads, {(ns, name): etag for ns, name, _, etag in rows})
    return len(rows), refreshed


def _ingest_chunk(
    rt: Runtime, catalog: str, chunk: dict[TableRef, TableRead | None], isolated: PerTable
) -> int:
    """Ingest a chunk of loaded tables in one set-based refresh; if that fails, table by
    table, so one bad table is alerted alone and the others are ingested."""
    loaded = {ref: table for ref, table in chunk.items() if table is not None}
    try:
        found = refresh_tables(
            rt, catalog, {ref: None for ref in loaded}, source="poll", loaded=loaded
        )
    except FencedOut:
        raise
    except Exception:
        log.warning("catalog %s: a chunk of %d tables failed; one by one", catalog, len(loaded))
        count = 0
        for ref, table in loaded.items():
            with isolated.table(ref.dotted):
                outcome = refresh_table(rt, catalog, ref, source="poll", table=table)
                count += 1 if outcome and outcome.new_event_ids else 0
        return count
    return sum(1 for outcome in found.values() if outcome and outcome.new_event_ids)


def _keep_etags(
    rt: Runtime,
    catalog: str,
    loads: dict[TableRef, Load],
    stored: dict[tuple[str, str], str | None],
) -> None:
    """Record each ETag that changed, on the row only while it holds the pointer that ETag
    was answered with (a table whose ingest failed keeps its old one and is loaded in full
    next time)."""
    changed = [
        {"ns": ref.namespace, "t": ref.name, "etag": load.etag, "loc": load.location}
        for ref, load in loads.items()
        if load.etag and load.location and load.etag != stored.get((ref.namespace, ref.name))
    ]
    if not changed:
        return
    with rt.engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE managed_tables m SET catalog_etag = v.etag "
                "FROM jsonb_to_recordset(CAST(:rows AS jsonb)) "
                "AS v(ns text, t text, etag text, loc text) "
                "WHERE m.catalog = :c AND m.namespace = v.ns AND m.name = v.t "
                "AND m.metadata_location = v.loc"
            ),
            {"rows": json.dumps(changed), "c": catalog},
        )


def _refresh(rt: Runtime, catalog: str, key: tuple[str, str], isolated: PerTable) -> int:
    """Refresh one managed table (isolated: a failure is alerted, the poll goes on); 1 if
    it had new commits."""
    namespace, name = key
    with isolated.table(f"{namespace}.{name}"):
        try:
            ref = TableRef(namespace, name)
        except InvalidIdentifier:
            return 0
        outcome = refresh_table(rt, catalog, ref, source="poll")
        return 1 if outcome and outcome.new_event_ids else 0
    return 0


def poll_once(rt: Runtime) -> int:
    """Poll every catalog now; returns how many tables got new commits."""
    return sum(_poll_recorded(rt, entry).refreshed for entry in rt.catalogs.entries())


# A claim holds the catalog while its poll runs: due again only after POLL_LEASE_S (or
# three times its last poll's duration, if longer), when the claimer is taken to have died
# mid-poll. A finished poll makes it due `poll_interval_s` later (`_poll_recorded`). So
# polls of one catalog never overlap, however long one takes: a poll that outlasts the
# interval is followed by the next one, not joined by another replica's.
POLL_LEASE_S = 600.0
_CLAIM = text(
    """
    INSERT INTO catalog_polls AS p (catalog, due_at, polled_by)
    VALUES (:catalog, now() + make_interval(secs => :lease), :me)
    ON CONFLICT (catalog) DO UPDATE
        SET due_at = now() + make_interval(
                secs => greatest(:lease, 3 * coalesce(p.duration_ms, 0) / 1000.0)),
            polled_by = EXCLUDED.polled_by
        WHERE p.due_at <= now()
    RETURNING catalog
    """
)


def poll_due(rt: Runtime, poll: Callable[[Runtime, CatalogEntry], PollResult] | None = None) -> int:
    """Poll each catalog that is due and that this replica wins (see the module doc)."""
    refreshed = 0
    for entry in rt.catalogs.entries(rt.settings.pinned_region):
        with transaction(rt.engine) as session:
            won = session.execute(
                _CLAIM,
                {"catalog": entry.name, "lease": POLL_LEASE_S, "me": rt.process_id},
            ).scalar()
        if won:
            refreshed += _poll_recorded(rt, entry, poll).refreshed
    return refreshed


def _poll_recorded(
    rt: Runtime,
    entry: CatalogEntry,
    poll: Callable[[Runtime, CatalogEntry], PollResult] | None = None,
) -> PollResult:
    """Poll one catalog and record how it went in `catalog_polls` (operators read it)."""
    started = time.monotonic()
    try:
        result = (poll or poll_catalog)(rt, entry)
        error = "; ".join(result.errors[:5]) or None
        if error:
            error = entry.without_secrets(error, "reading some tables")
    except Exception as exc:
        log.exception("could not poll catalog %s", entry.name)
        error = entry.without_secrets(error_line(exc), type(exc).__name__, headline(exc))
        result = PollResult(entry.name)
    with transaction(rt.engine) as session:
        session.execute(
            text(
                """
                INSERT INTO catalog_polls AS p (catalog, due_at, polled_by, polled_at,
                    duration_ms, tables_seen, tables_refreshed, catalog_requests,
                    commit_trigger, error)
                VALUES (:catalog, now() + make_interval(secs => :interval), :me, now(), :ms,
                    :seen, :refreshed, :requests, :trigger, :error)
                ON CONFLICT (catalog) DO UPDATE SET polled_by = EXCLUDED.polled_by,
                    -- the claimer's poll ended: due an interval from now (another's
                    -- unclaimed poll, poll_once, leaves the claim as it is)
                    due_at = CASE WHEN p.polled_by = EXCLUDED.polled_by
                                  THEN EXCLUDED.due_at ELSE p.due_at END,
                    polled_at = now(), duration_ms = EXCLUDED.duration_ms,
                    tables_seen = EXCLUDED.tables_seen,
                    tables_refreshed = EXCLUDED.tables_refreshed,
                    catalog_requests = EXCLUDED.catalog_requests,
                    commit_trigger = EXCLUDED.commit_trigger, error = EXCLUDED.error
                """
            ),
            {
                "catalog": entry.name,
                "interval": entry.poll_interval_s,
                "me": rt.process_id,
                "ms": int((time.monotonic() - started) * 1000),
                "seen": result.tables_seen,
                "refreshed": result.refreshed,
                "requests": result.requests,
                "trigger": result.commit_trigger,
                "error": error,
            },
        )
    return result
