"""Following a Hive Metastore's notification log: how a `hive` catalog's commits are heard.

Iceberg's HiveCatalog commits by altering the table's `metadata_location` parameter, and a
metastore with DbNotificationListener records every such change as an ALTER_TABLE event
(creates, drops and renames too) in its notification log. `follow_due` reads that log from
the event id stored in the catalog's `catalog_polls` row, turns the Iceberg tables' events
into the same notes the JDBC catalog's NOTIFY trigger sends (`listener.settle`: rules
adopt, drops retire, renames keep their history, commits are ingested and evaluated), and
stores the newest id read. No table is loaded but those that moved. A Hudi or Delta table
created or renamed there (`metastore.table_event`'s `relist`) has the catalog polled now
(`poller.poll_catalog`: rules adopt it in its format, and its log is read); their commits
do not go through the metastore, and the poll hears them as a path catalog's.

One replica follows a catalog at a time: it must win the catalog's `notifications_due_at`,
claimed as the poller claims `due_at`. The cursor only moves forward, after what it covers
was acted on; a replica that dies mid-batch leaves it where it was, and the batch is read
again (ingest is idempotent: one event per snapshot). A metastore that does not answer
leaves the cursor too, and it resumes there when the metastore is back. The poller still
lists the catalog at its interval (`poller.poll_catalog`), for what a trimmed log lost.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from sqlalchemy import text

from lakewarden.catalogs.catalog import CatalogEntry, InvalidIdentifier, TableRef
from lakewarden.db.session import transaction
from lakewarden.errors import headline
from lakewarden.events.listener import REFRESH_THREADS, Note, settle
from lakewarden.isolation import error_line
from lakewarden.metastore import TableEvent, current_event_id, events_after, metastore_client
from lakewarden.runtime import Runtime

log = logging.getLogger(__name__)

# How often an API replica looks for a Hive catalog whose log is due (a commit becomes a
# task within about this, plus one table load).
FOLLOW_TICK_S = 0.5
# Events read per follow.
BATCH = 1000
# A claim holds the log while it is followed; a follower that died is replaced after this.
LEASE_S = 60.0
# After the metastore did not answer: the next try (each try is one connect).
RETRY_S = 2.0

_CLAIM = text(
    """
    INSERT INTO catalog_polls AS p (catalog, notifications_due_at)
    VALUES (:catalog, now() + make_interval(secs => :lease))
    ON CONFLICT (catalog) DO UPDATE SET notifications_due_at = EXCLUDED.notifications_due_at
        WHERE p.notifications_due_at IS NULL OR p.notifications_due_at <= now()
    RETURNING notification_id
    """
)
_RECORD = text(
    """
    UPDATE catalog_polls SET
        notification_id = CASE WHEN :reset THEN :id
                               ELSE greatest(coalesce(notification_id, 0), :id) END,
        notifications_due_at = now() + make_interval(secs => :next),
        -- what the log cannot tell (trimmed past the cursor, a table that failed): a full
        -- poll of the catalog, now
        due_at = CASE WHEN :poll_now THEN least(due_at, now()) ELSE due_at END
    WHERE catalog = :catalog
    """
)


@dataclass(frozen=True)
class Followed:
    cursor: int | None  # None: leave it
    notes: int = 0
    reset: bool = False  # the cursor goes to `cursor` even if that is back
    poll_now: bool = False


def note_of(catalog: str, event: TableEvent) -> Note | None:
    """The listener's note for a metastore event (None: a name lakewarden cannot manage)."""
    try:
        ref = TableRef(event.database, event.name)
        old = TableRef(*event.old) if event.old else None
    except InvalidIdentifier:
        return None
    return Note(event.op, catalog, ref, event.location, old)


def follow_catalog(rt: Runtime, entry: CatalogEntry, since: int | None) -> Followed:
    """Act on the catalog's events after `since`; where the cursor goes next. The first
    follow (no cursor) starts at the log's newest event: what is older, the poller's
    listing adopts. A log that went back (a new metastore database) starts over, the same."""
    uri = entry.resolved["uri"]
    with metastore_client(uri) as client:
        if since is None:
            return Followed(current_event_id(client), reset=True, poll_now=True)
        batch = events_after(client, since, BATCH)
        if batch.last_id == since:  # nothing new; or a log that went back: start over
            newest = current_event_id(client)
            return Followed(newest, reset=True, poll_now=True) if newest < since else Followed(None)
    relist = any(e.op == "relist" for e in batch.events)
    events = [e for e in batch.events if e.op != "relist"]
    notes = [n for e in events if (n := note_of(entry.name, e)) is not None]
    ok = True
    if notes:
        with ThreadPoolExecutor(REFRESH_THREADS, "metastore") as pool:
            ok = settle(rt, notes, pool)
    if not ok:
        # Some table failed. If the metastore itself is gone, this raises: the cursor stays
        # and the batch is read again when it answers. Otherwise it is that table's fault:
        # go on, and let a full poll (which isolates and alerts per table) retry it.
        with metastore_client(uri) as client:
            current_event_id(client)
    if batch.gap:
        log.warning(
            "catalog %s: its metastore's notification log was trimmed past event %d; "
            "polling the catalog for what was lost",
            entry.name,
            since,
        )
    return Followed(batch.last_id, len(notes), poll_now=batch.gap or not ok or relist)


def follow_due(rt: Runtime) -> int:
    """Follow each Hive catalog's log that is due and that this replica wins, one after
    another; how many notes were acted on (tests and benchmarks; the API runs `Followers`)."""
    return sum(follow_one(rt, e) for e in rt.catalogs.entries() if e.type == "hive")


def follow_one(rt: Runtime, entry: CatalogEntry) -> int:
    """Follow the catalog's log if it is due and this replica wins it; notes acted on."""
    with transaction(rt.engine) as session:
        won = session.execute(_CLAIM, {"catalog": entry.name, "lease": LEASE_S}).first()
    if won is None:
        return 0
    try:
        followed = follow_catalog(rt, entry, won[0])
        next_s = FOLLOW_TICK_S
    except Exception as exc:  # the metastore does not answer: the cursor stays
        log.warning(
            "catalog %s: could not read its metastore's notification log: %s",
            entry.name,
            entry.without_secrets(error_line(exc), type(exc).__name__, headline(exc)),
        )
        followed, next_s = Followed(None), RETRY_S
    with transaction(rt.engine) as session:
        session.execute(
            _RECORD,
            {
                "catalog": entry.name,
                "id": followed.cursor if followed.cursor is not None else won[0],
                "reset": followed.reset or followed.cursor is None,
                "next": next_s,
                "poll_now": followed.poll_now,
            },
        )
    return followed.notes


class Followers:
    """What an API replica runs on its ticker: each Hive catalog followed on a thread of
    its own (`follow_one`), so a metastore that does not answer (each try waits out the
    socket timeout) holds up only its own catalog; a catalog whose follow is still under
    way in this process is skipped, not queued."""

    def __init__(self, rt: Runtime, threads: int = 8) -> None:
        self.rt = rt
        self._pool = ThreadPoolExecutor(threads, "metastore-follow")
        self._busy: set[str] = set()
        self._lock = threading.Lock()

    def tick(self) -> None:
        for entry in self.rt.catalogs.entries(self.rt.settings.pinned_region):
            if entry.type != "hive":
                continue
            with self._lock:
                if entry.name in self._busy:
                    continue
                self._busy.add(entry.name)
            self._pool.submit(self._follow, entry)

    def _follow(self, entry: CatalogEntry) -> None:
        try:
            follow_one(self.rt, entry)
        except Exception:  # the database, most likely: the next tick tries again
            log.exception("catalog %s: following its metastore's log failed", entry.name)
        finally:
            with self._lock:
                self._busy.discard(entry.name)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
