"""LISTEN for the catalog trigger's notifications (NOTIFY wakes, polling guarantees).

One connection per JDBC catalog database (several registered catalogs may share one). A
burst of notifications is drained at once, each table refreshed once however many commits
it reported, and the tables refreshed set-based (up to REFRESH_BATCH of a catalog in one
transaction, a few such batches at a time): a burst does not queue behind one table. The
listener keeps draining while batches run (`Flow`): a table's commits wait for a free
refresh thread (and for a refresh of that table already running), not for a whole burst. A
table created, dropped or renamed in the catalog is reported to a poll of its catalog
(`poll_catalog`: management rules adopt it, a rename keeps its history, a drop retires it).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from math import ceil

import psycopg
from sqlalchemy.engine import make_url

from lakewarden.catalogs.catalog import InvalidIdentifier, TableRef
from lakewarden.db.trigger import CHANNEL
from lakewarden.events.poller import follow_tables, poll_catalog
from lakewarden.events.refresh import refresh_tables
from lakewarden.runtime import Runtime

log = logging.getLogger(__name__)

# How long a burst is drained before its tables are refreshed, and how many at once.
DRAIN_S = 0.05
REFRESH_THREADS = 4
# While refreshes run, how often the listener takes the notifications that came meanwhile
# and hands tables to threads that came free.
FLOW_POLL_S = 0.02
# The most tables of a burst refreshed in one transaction (refresh.refresh_tables).
REFRESH_BATCH = 100
# How often the listener looks for newly registered JDBC catalogs.
RESCAN_S = 5.0
# Reconnecting after a lost connection: 1 s, doubling up to a minute (a database down for
# long is not worth an error line every second).
RECONNECT_MIN_S, RECONNECT_MAX_S = 1.0, 60.0


def libpq_url(sqlalchemy_url: str) -> str:
    return (
        make_url(sqlalchemy_url).set(drivername="postgresql").render_as_string(hide_password=False)
    )


@dataclass(frozen=True)
class Note:
    op: str  # commit | create | drop | rename
    catalog: str
    ref: TableRef
    location: str | None  # the metadata pointer it moved to
    old: TableRef | None = None  # a renamed table's previous name


def parse(payload: str) -> Note | None:
    try:
        msg = json.loads(payload)
        ref = TableRef(msg["namespace"], msg["name"])
        old = TableRef(msg["old_namespace"], msg["old_name"]) if msg.get("old_name") else None
        op = msg.get("op", "commit")
        return Note(op, msg["catalog"], ref, msg.get("metadata_location"), old)
    except (ValueError, KeyError, TypeError, InvalidIdentifier):
        log.warning("ignoring commit notification %r", payload)
        return None


class CommitListener(threading.Thread):
    """Starts one `DatabaseListener` per JDBC catalog database, and new ones as catalogs
    are registered. `connected` is set once every database known at start is listened to."""

    def __init__(self, rt: Runtime, stop: threading.Event) -> None:
        super().__init__(name="commit-listener", daemon=True)
        self.rt, self.stop = rt, stop
        self.connected = threading.Event()
        self.databases: dict[str, DatabaseListener] = {}

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self._scan()
            except Exception:
                log.exception("commit listener could not read the catalog registry")
            if self.databases and all(d.connected.is_set() for d in self.databases.values()):
                self.connected.set()
            self.stop.wait(RESCAN_S if self.connected.is_set() else 0.1)

    def _scan(self) -> None:
        by_url: dict[str, list[str]] = {}
        # a replica pinned to a region listens to its region's catalogs only (as it polls)
        for entry in self.rt.catalogs.entries(self.rt.settings.pinned_region):
            if entry.type == "jdbc":
                by_url.setdefault(libpq_url(entry.jdbc_url or ""), []).append(entry.name)
        for url in set(self.databases) - set(by_url):
            # Its catalogs were removed: stop listening (the database may be dropped next,
            # and a listener left behind would try to reconnect to it forever).
            self.databases.pop(url).retire.set()
        for url, names in by_url.items():
            listener = self.databases.get(url)
            if listener is None:
                listener = DatabaseListener(self.rt, url, self.stop, frozenset(names))
                self.databases[url] = listener
                listener.start()
            listener.catalogs = frozenset(names)


class DatabaseListener(threading.Thread):
    def __init__(
        self, rt: Runtime, url: str, stop: threading.Event, catalogs: frozenset[str]
    ) -> None:
        super().__init__(name="commit-listener-db", daemon=True)
        self.rt, self.url, self.stop = rt, url, stop
        self.catalogs = catalogs  # the catalogs in this database (rescanned by the parent)
        self.connected = threading.Event()
        self.retire = threading.Event()  # set by the parent when no catalog uses the database

    def _done(self) -> bool:
        return self.stop.is_set() or self.retire.is_set()

    def run(self) -> None:
        delay = RECONNECT_MIN_S
        with ThreadPoolExecutor(REFRESH_THREADS, "notify") as pool:
            flow = Flow(self.rt, pool)
            while not self._done():
                try:
                    with psycopg.connect(self.url, autocommit=True) as conn:
                        conn.execute(f"LISTEN {CHANNEL}")
                        # Anything committed while we were not listening is caught up now
                        # (and the trigger installed where it may be).
                        for name in sorted(self.catalogs):
                            poll_catalog(self.rt, self.rt.catalogs.entry(name))
                        self.connected.set()  # listening, and caught up
                        delay = RECONNECT_MIN_S
                        while not self._done():
                            self._drain(conn, flow)
                except Exception:
                    self.connected.clear()
                    if self._done():
                        break
                    log.exception(
                        "commit listener lost its connection; reconnecting in %.0f s", delay
                    )
                    self._sleep(delay)  # the poller covers the gap meanwhile
                    delay = min(delay * 2, RECONNECT_MAX_S)

    def _sleep(self, seconds: float) -> None:
        """Wait `seconds`, waking within a second of a stop or a retirement."""
        deadline = time.monotonic() + seconds
        while not self._done() and (left := deadline - time.monotonic()) > 0:
            self.stop.wait(min(1.0, left))

    def _drain(self, conn: psycopg.Connection, flow: Flow) -> None:
        """Idle: wait up to 1 s for a notification, then take the rest of the burst.
        Refreshing: take what came in FLOW_POLL_S. Then hand tables to free threads."""
        notes: list[Note] = []
        # The first notification ends the wait at once; the rest of its burst follows it.
        waits = ((1.0, 1), (DRAIN_S, None)) if flow.idle() else ((FLOW_POLL_S, None),)
        for timeout, stop_after in waits:
            for raw in conn.notifies(timeout=timeout, stop_after=stop_after):
                note = parse(raw.payload)
                if note is not None and note.catalog in self.catalogs:
                    notes.append(note)
            if not notes:
                break
        flow.add(notes)


class Flow:
    """A listener's tables with commits to refresh, handed to its REFRESH_THREADS as they
    come free, so the listener drains on while refreshes run: a commit waits for a free
    thread, not for the whole burst before it (which, at 2,000+ commits/s, took seconds:
    B25's listener p99). The ready tables are split over the free threads (up to
    REFRESH_BATCH a transaction: small when commits are few, fuller under a backlog).
    A table being refreshed is not handed out again until that refresh ends (its later
    commits wait for the next); a table created, dropped or renamed goes through `settle`
    once the refreshes running end, so its notes keep their order."""

    def __init__(self, rt: Runtime, pool: ThreadPoolExecutor) -> None:
        self.rt, self.pool = rt, pool
        self._lock = threading.Lock()
        self._pending: dict[tuple[str, TableRef], Note] = {}  # the last commit note of each
        self._busy: set[tuple[str, TableRef]] = set()
        self._running: list[Future[bool]] = []

    def idle(self) -> bool:
        with self._lock:
            return not self._pending and not self._running

    def add(self, notes: list[Note]) -> None:
        """Take a burst's notes and hand out what free threads can take."""
        if any(n.op != "commit" for n in notes):
            with self._lock:  # nothing more is handed out, and what runs ends first
                earlier, self._pending = list(self._pending.values()), {}
                running = list(self._running)
            for f in running:
                f.result()
            settle(self.rt, [*earlier, *notes], self.pool)
            return
        with self._lock:
            for n in notes:  # in commit order: the last word on a table wins; a table
                # keeps its place in the queue (the oldest waiting go first)
                self._pending[(n.catalog, n.ref)] = n
        self._hand_out()

    def _hand_out(self) -> None:
        with self._lock:
            free = REFRESH_THREADS - len(self._running)
            ready = [key for key in self._pending if key not in self._busy]
            if free <= 0 or not ready:
                return
            size = min(REFRESH_BATCH, ceil(len(ready) / free))
            batches: list[tuple[str, dict[TableRef, str | None]]] = []
            by_catalog: dict[str, list[TableRef]] = {}
            for c, r in ready:  # oldest first
                by_catalog.setdefault(c, []).append(r)
            for catalog, refs in by_catalog.items():
                for start in range(0, len(refs), size):
                    batches.append(
                        (
                            catalog,
                            {
                                r: self._pending[(catalog, r)].location or None
                                for r in refs[start : start + size]
                            },
                        )
                    )
            started: list[tuple[Future[bool], list[tuple[str, TableRef]]]] = []
            for catalog, tables in batches[:free]:
                keys = [(catalog, r) for r in tables]
                for key in keys:
                    del self._pending[key]
                self._busy.update(keys)
                try:
                    future = self.pool.submit(_refresh, self.rt, catalog, tables)
                except RuntimeError:  # the listener is stopping (the poller catches up)
                    self._busy.difference_update(keys)
                    break
                self._running.append(future)
                started.append((future, keys))
        # Outside the lock: a future already done runs its callback here and now.
        for future, keys in started:
            future.add_done_callback(partial(self._done, keys=keys))

    def _done(self, future: Future[bool], *, keys: list[tuple[str, TableRef]]) -> None:
        with self._lock:
            self._running.remove(future)
            self._busy.difference_update(keys)
        self._hand_out()  # a thread came free: the next batch need not wait for a poll


def settle(rt: Runtime, notes: list[Note], pool: ThreadPoolExecutor) -> bool:
    """Act on a burst of notes, in commit order (the NOTIFY trigger's, a metastore's
    notification log's): tables created, dropped or renamed are followed, each table with
    commits refreshed once, a few at a time. False if any of it failed (logged; the
    poller catches up)."""
    # Each table as the burst leaves it: dropped (None), or there at a metadata pointer.
    final: dict[tuple[str, TableRef], str | None] = {}
    for n in notes:  # in commit order: the last word on a table wins
        if n.old is not None:
            final[(n.catalog, n.old)] = None
        final[(n.catalog, n.ref)] = None if n.op == "drop" else (n.location or "")
    ok = True
    for catalog in sorted({n.catalog for n in notes if n.op != "commit"}):
        ok &= _follow(rt, catalog, {ref: at for (c, ref), at in final.items() if c == catalog})
    # A table created is refreshed too: adopted by a rule just now, it gets its baseline.
    # A catalog's tables are refreshed set-based, REFRESH_BATCH at a time, a few at once.
    commits = {key: at for key, at in final.items() if at is not None}
    batches: list[tuple[str, dict[TableRef, str | None]]] = []
    for catalog in sorted({c for c, _ in commits}):
        refs = sorted((ref for c, ref in commits if c == catalog), key=lambda r: r.dotted)
        for start in range(0, len(refs), REFRESH_BATCH):
            chunk = refs[start : start + REFRESH_BATCH]
            batches.append((catalog, {ref: commits[(catalog, ref)] or None for ref in chunk}))
    refreshed = pool.map(lambda b: _refresh(rt, *b), batches)
    return all(list(refreshed)) and ok


def _follow(rt: Runtime, catalog: str, tables: dict[TableRef, str | None]) -> bool:
    """Tables created, dropped or renamed: only those (`follow_tables`), not the whole
    catalog (the next poll checks the rest)."""
    there = [(ref.namespace, ref.name, at or None) for ref, at in tables.items() if at is not None]
    gone = [ref for ref, at in tables.items() if at is None]
    try:
        follow_tables(rt, catalog, there, gone)
        return True
    except Exception:
        log.exception("could not follow the tables of catalog %s (the poller will)", catalog)
        return False


def _refresh(rt: Runtime, catalog: str, tables: dict[TableRef, str | None]) -> bool:
    """Refresh the tables at once; should that fail, each alone, so one table's failure
    (logged; the poller retries it) does not hold back the others."""
    try:
        refresh_tables(rt, catalog, tables, source="notify")
        return True
    except Exception:
        if len(tables) == 1:
            ref = next(iter(tables))
            log.exception("could not ingest commit of %s (the poller will retry)", ref.dotted)
            return False
    return all([_refresh(rt, catalog, {ref: at}) for ref, at in tables.items()])
