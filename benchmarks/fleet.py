"""B10, the fleet (issue 11): many tables in two JDBC catalogs, every one managed by a rule.

One figure, four measures, on one fleet built for it and removed afterwards:

1. auto-registration: N tables created as catalog rows (`iceberg_tables`, FULL 100,000: 60%
   in the default catalog, 40% in a second catalog in a database of its own) over many
   namespaces of one, two and three levels, every row pointing at a REAL metadata file
   (a few template tables written by pyiceberg; many rows share one file); a management
   rule covers them all. Timed: the listing query and the adoption, the steps of
   `poll_catalog` that register tables (tables adopted per second); separately, a whole
   first `poll_catalog` (adopt, then load and ingest each new table) on a subset; and a
   steady-state poll of the full fleet (nothing new, nothing moved).
2. time to managed on JDBC: with a `CommitListener` running over the whole fleet, new tables
   created one by one by pyiceberg in the rule's scope; creation -> managed_tables row.
3. commit -> timeline event -> task (trigger path) over the whole fleet, under a steady
   stream of pyiceberg appends to random real tables.
4. GET /api/v1/tables p99 over the whole fleet (both catalogs): first and deep pages, the
   default order and `sort=health`, with and without `catalog=`.
"""

from __future__ import annotations

import dataclasses
import math
import os
import random
import shutil
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table
from sqlalchemy import Connection, text
from sqlalchemy.engine import make_url

from benchmarks import data
from benchmarks.control_plane import (
    _admin_token,
    _cancel_open_tasks,
    _get,
    _quantile,
    _runtime,
)
from benchmarks.harness import Context, Figure, Stat, measuring
from lakewarden.db.models import Catalog as CatalogRow
from lakewarden.db.models import ManagementRule
from lakewarden.db.session import catalog_engine, engine_for, resolve_migration_url, transaction
from lakewarden.events.listener import CommitListener
from lakewarden.events.poller import _follow, jdbc_listing, poll_catalog
from lakewarden.runtime import Runtime
from lakewarden.tables import TABLE_SORTS
from services.api.app import serve_in_thread
from services.api.paging import sorted_cursor

RUN = uuid.uuid4().hex[:6]
PREFIX = f"fl{RUN}"  # every namespace of the fleet (the rule's scope: f"{PREFIX}_*")
TEMPLATES_NS = f"tpl{RUN}"  # the template tables, outside the rule's scope
URL_ENV = "LW_SECRET_BENCH_FLEET_CATALOG_URL"
# The rule's policy: every commit after the first calls for compaction (as B5's).
POLICY = {"compaction": {"min_small_files": 2, "min_input_files": 2}}
TABLES_PER_NAMESPACE = 200
COMMITS_PER_S = 5.0


@dataclass(frozen=True)
class FleetSizes:
    tables: int  # catalog rows in all (bulk, subset and real tables), both catalogs
    real: int  # real pyiceberg tables per catalog (part 3 commits to them)
    subset: int  # rows per catalog whose whole first poll (with refreshes) is timed
    new_tables: int  # part 2
    commits: int  # part 3
    requests: int  # part 4: per variant and repeat


SIZES = {
    "smoke": FleetSizes(tables=2_000, real=6, subset=10, new_tables=4, commits=10, requests=3),
    "full": FleetSizes(
        tables=100_000, real=150, subset=300, new_tables=20, commits=150, requests=30
    ),
}
DEFAULT_SHARE = 0.6


def _sizes(ctx: Context) -> FleetSizes:
    """The sizes of `ctx`'s run; LAKEWARDEN_BENCH_FLEET_TABLES overrides the fleet's size
    (a reduced full run)."""
    sizes = SIZES[ctx.sizes.name]
    override = os.environ.get("LAKEWARDEN_BENCH_FLEET_TABLES")
    return dataclasses.replace(sizes, tables=int(override)) if override else sizes


@dataclass
class Side:
    """One catalog of the fleet: its name, a writer's pyiceberg client, its database URL,
    its template metadata files and its real tables."""

    name: str
    writer: Catalog
    url: str
    tables: int  # catalog rows of this catalog in the fleet
    templates: list[str] = dataclasses.field(default_factory=list)
    real: list[tuple[str, Table]] = dataclasses.field(default_factory=list)


def _admin_conn(url: str) -> psycopg.Connection:
    admin = make_url(url).set(drivername="postgresql", database="postgres")
    return psycopg.connect(admin.render_as_string(hide_password=False), autocommit=True)


def _namespace(i: int, count: int) -> str:
    """Row i's namespace: a third of the namespaces one level deep, a third two, a third
    three."""
    k = i % count
    return (f"{PREFIX}_a{k}", f"{PREFIX}_b{k}.x", f"{PREFIX}_c{k}.y.z")[k % 3]


def _insert_rows(
    rt: Runtime, side: Side, start: int, stop: int, namespaces: int, label: str
) -> None:
    """Catalog rows `start`..`stop` of `side` (as a JDBC catalog's create leaves them),
    pointing at its template metadata files in turn, in one INSERT per 20,000 rows."""
    engine = catalog_engine(side.url, rt.engine)
    rows = [
        {
            "c": side.name,
            "ns": _namespace(i, namespaces),
            "t": f"{label}{i}",
            "m": side.templates[i % len(side.templates)],
        }
        for i in range(start, stop)
    ]
    with engine.begin() as conn:
        for k in range(0, len(rows), 20_000):
            conn.execute(
                text(
                    "INSERT INTO iceberg_tables (catalog_name, table_namespace, table_name, "
                    "metadata_location, previous_metadata_location) VALUES (:c, :ns, :t, :m, NULL)"
                ),
                rows[k : k + 20_000],
            )


def _real_tables(side: Side, count: int, location: Path) -> None:
    """`count` real tables (pyiceberg create_table and two appends each: their next commit
    calls for compaction under POLICY) in the rule's scope, and two template tables (one
    append each) outside it whose metadata files the bulk rows point at."""
    side.writer.create_namespace_if_not_exists(f"{PREFIX}_real")
    side.writer.create_namespace_if_not_exists(TEMPLATES_NS)

    def make(ident: str, seed: int, appends: int = 2) -> Table:
        where = location / side.name / ident
        table = side.writer.create_table(ident, schema=data.SCHEMA, location=where.as_uri())
        for k in range(appends):
            table.append(data.batch(seed + k, 10 * k, 10))
        return table

    with ThreadPoolExecutor(4) as pool:
        templates = list(pool.map(make, [f"{TEMPLATES_NS}.a", f"{TEMPLATES_NS}.b"], [1, 3], [1, 1]))
        idents = [f"{PREFIX}_real.r{i}" for i in range(count)]
        side.real = list(zip(idents, pool.map(make, idents, range(10, 10 + count)), strict=True))
    side.templates = [t.metadata_location for t in templates]


def _rule(rt: Runtime, catalog: str) -> int:
    with transaction(rt.engine) as session:
        row = ManagementRule(catalog=catalog, namespace=f"{PREFIX}_*", include=["*"], policy=POLICY)
        session.add(row)
        session.flush()
        return row.id


def _mark_refreshed(rt: Runtime, catalog: str, pointers: dict[tuple[str, str], str | None]) -> int:
    """Record each never-refreshed row's catalog pointer as its metadata_location (what its
    first refresh would record), in SQL: the rows the timed subset stands for."""
    rows = [
        {"namespace": ns, "name": name, "location": loc}
        for (ns, name), loc in pointers.items()
        if ns.startswith(PREFIX)
    ]
    done = 0
    with rt.engine.begin() as conn:
        for k in range(0, len(rows), 20_000):
            done += conn.execute(
                text(
                    "UPDATE managed_tables m SET metadata_location = v.location "
                    "FROM jsonb_to_recordset(CAST(:rows AS jsonb)) "
                    "AS v(namespace text, name text, location text) "
                    "WHERE m.catalog = :c AND m.namespace = v.namespace AND m.name = v.name "
                    "AND m.metadata_location IS NULL"
                ),
                {"rows": _json(rows[k : k + 20_000]), "c": catalog},
            ).rowcount
    return done


def _json(rows: list[dict[str, Any]]) -> str:
    import json

    return json.dumps(rows, separators=(",", ":"))


def _managed_count(rt: Runtime, catalog: str) -> int:
    with rt.engine.connect() as conn:
        return int(
            conn.execute(
                text(
                    "SELECT count(*) FROM managed_tables WHERE catalog = :c "
                    "AND namespace LIKE :p AND retired_at IS NULL"
                ),
                {"c": catalog, "p": f"{PREFIX}%"},
            ).scalar_one()
        )


# --- 1. auto-registration ---------------------------------------------------------------


def _register_fleet(
    api: Runtime, sides: list[Side], sizes: FleetSizes, work: Path
) -> dict[str, Any]:
    """Part 1 (see the module doc): the rows, the rules, the timed polls."""
    out: dict[str, Any] = {}
    namespaces = {s.name: max(3, math.ceil(s.tables / TABLES_PER_NAMESPACE)) for s in sides}
    mark = time.perf_counter()
    phases: dict[str, float] = {}
    out["phase_s"] = phases
    for side in sides:
        _real_tables(side, sizes.real, work)
        # the subset: rows whose whole first poll is timed, with the real tables
        _insert_rows(api, side, 0, sizes.subset, namespaces[side.name], "s")
        _rule(api, side.name)
    phases["real_tables_and_subset_rows"], mark = time.perf_counter() - mark, time.perf_counter()
    first: dict[str, Any] = {}
    for side in sides:
        start = time.perf_counter()
        result = poll_catalog(api, api.catalogs.entry(side.name))
        seconds = time.perf_counter() - start
        managed = _managed_count(api, side.name)
        first[side.name] = {
            "tables": managed,
            "seconds": seconds,
            "tables_per_s": managed / seconds,
            "refreshed": result.refreshed,
            "errors": len(result.errors),
        }
    out["first_poll"] = first
    phases["first_poll"], mark = time.perf_counter() - mark, time.perf_counter()
    bulk: dict[str, Any] = {}
    for side in sides:
        rest = side.tables - sizes.subset - sizes.real
        start = time.perf_counter()
        _insert_rows(api, side, 0, rest, namespaces[side.name], "t")
        insert_s = time.perf_counter() - start
        entry = api.catalogs.entry(side.name)
        before = _managed_count(api, side.name)
        start = time.perf_counter()
        pointers, _ = jdbc_listing(api, entry)
        listing_s = time.perf_counter() - start
        assert pointers is not None
        start = time.perf_counter()
        adopted = _follow(api, entry, pointers)
        adopt_s = time.perf_counter() - start
        after = _managed_count(api, side.name)
        assert adopted is not None
        bulk[side.name] = {
            "rows_listed": len(pointers),
            "adopted": len(adopted.adopted),
            "managed_before": before,
            "managed_after": after,
            "listing_s": listing_s,
            "adopt_s": adopt_s,
            "tables_per_s": len(adopted.adopted) / (listing_s + adopt_s),
            "problems": adopted.problems[:3],
            "namespaces": namespaces[side.name],
        }
        start = time.perf_counter()
        with api.engine.begin() as conn:  # the join below wants the new rows' statistics
            conn.execute(text("ANALYZE managed_tables"))
        bulk[side.name]["marked_refreshed"] = _mark_refreshed(api, side.name, pointers)
        bulk[side.name]["setup_s"] = {"insert_rows": insert_s, "mark": time.perf_counter() - start}
    out["bulk"] = bulk
    phases["bulk_rows_adopt_mark"], mark = time.perf_counter() - mark, time.perf_counter()
    with api.engine.begin() as conn:
        conn.execute(text("ANALYZE managed_tables"))
    steady: dict[str, Any] = {}
    for side in sides:
        start = time.perf_counter()
        result = poll_catalog(api, api.catalogs.entry(side.name))
        seconds = time.perf_counter() - start
        steady[side.name] = {
            "tables_seen": result.tables_seen,
            "seconds": seconds,
            "refreshed": result.refreshed,
        }
    out["steady_poll"] = steady
    phases["steady_poll"] = time.perf_counter() - mark
    return out


# --- 2. time to managed -----------------------------------------------------------------


def _row_present(conn: Connection, catalog: str, namespace: str, name: str) -> bool:
    found = conn.execute(
        text(
            "SELECT 1 FROM managed_tables WHERE catalog = :c AND namespace = :n AND name = :t "
            "AND retired_at IS NULL"
        ),
        {"c": catalog, "n": namespace, "t": name},
    ).first()
    conn.rollback()
    return found is not None


def _time_to_managed(api: Runtime, sides: list[Side], count: int, work: Path) -> dict[str, Any]:
    """New tables created by pyiceberg one by one (alternating catalogs), each timed from
    just before create_table to its managed_tables row being visible (watched every 10 ms)."""
    latencies: list[float] = []
    creates: list[float] = []
    per_catalog: dict[str, list[float]] = {s.name: [] for s in sides}
    namespace = f"{PREFIX}_new.l2"
    for side in sides:
        side.writer.create_namespace_if_not_exists(namespace)
    with api.engine.connect() as conn:
        for i in range(count):
            side = sides[i % len(sides)]
            name = f"n{i}"
            time.sleep(0.5)  # one by one: each its own notification and poll
            start = time.perf_counter()
            where = (work / side.name / f"{namespace}.{name}").as_uri()
            side.writer.create_table(f"{namespace}.{name}", schema=data.SCHEMA, location=where)
            creates.append(time.perf_counter() - start)
            while not _row_present(conn, side.name, namespace, name):
                if time.perf_counter() - start > 120:
                    raise TimeoutError(f"{side.name}.{namespace}.{name} not managed in 120 s")
                time.sleep(0.01)
            latencies.append(time.perf_counter() - start)
            per_catalog[side.name].append(latencies[-1])
    return {
        "tables": count,
        "p50_s": _quantile(latencies, 0.5),
        "p99_s": _quantile(latencies, 0.99),
        "max_s": max(latencies),
        "create_table_p50_s": _quantile(creates, 0.5),
        "per_catalog_p50_s": {k: _quantile(v, 0.5) for k, v in per_catalog.items() if v},
    }


# --- 3. commit -> task ------------------------------------------------------------------


class _TaskWatcher(threading.Thread):
    """Reads the tasks created since it started every 5 ms: (table id, snapshot id) ->
    when it first saw the task."""

    def __init__(self, rt: Runtime) -> None:
        super().__init__(name="task-watcher", daemon=True)
        self.rt = rt
        self.seen: dict[tuple[int, int], float] = {}
        self.stop = threading.Event()
        with rt.engine.connect() as conn:
            self.first = int(
                conn.execute(text("SELECT coalesce(max(id), 0) FROM tasks")).scalar_one()
            )

    def run(self) -> None:
        with self.rt.engine.connect() as conn:
            while not self.stop.is_set():
                # every task since the start (ids are taken before their transactions
                # commit, so a lower id may become visible after a higher one)
                rows = conn.execute(
                    text(
                        "SELECT table_id, (trigger->>'snapshot_id')::bigint FROM tasks "
                        "WHERE id > :first"
                    ),
                    {"first": self.first},
                ).all()
                conn.rollback()
                now = time.perf_counter()
                for table_id, snapshot_id in rows:
                    if snapshot_id is not None:
                        self.seen.setdefault((table_id, snapshot_id), now)
                time.sleep(0.005)


def _table_ids(rt: Runtime, side: Side) -> dict[str, int]:
    with rt.engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT namespace || '.' || name, id FROM managed_tables WHERE catalog = :c "
                "AND namespace = :n AND retired_at IS NULL"
            ),
            {"c": side.name, "n": f"{PREFIX}_real"},
        ).all()
    return {k: int(v) for k, v in rows}


def _commit_stream(api: Runtime, sides: list[Side], commits: int) -> dict[str, Any]:
    """`commits` pyiceberg appends at COMMITS_PER_S to random real tables of both catalogs
    whose previous commit has its task (each table's open task cancelled first, so that
    every commit creates one); each timed from just before the append to its task row
    being visible (waited for up to 15 s after the last commit)."""
    targets: list[tuple[Side, Table, int]] = []
    for side in sides:
        ids = _table_ids(api, side)
        targets += [(side, table, ids[ident]) for ident, table in side.real if ident in ids]
    if not targets:
        raise RuntimeError("no real table is managed")
    rng = random.Random(11)
    watcher = _TaskWatcher(api)
    watcher.start()
    pending: list[tuple[int, int, float, float]] = []  # table, snapshot, start, committed
    appends: list[float] = []
    busy_picks = 0
    began = time.perf_counter()
    try:
        for k in range(commits):
            # a table whose last commit has its task already: a commit to a table whose
            # previous one is not ingested yet is evaluated with it (one task for both)
            idle = [t for t in targets if t[2] not in _busy(pending, watcher.seen)]
            side, table, table_id = rng.choice(idle or targets)
            busy_picks += not idle
            _cancel_open_tasks(api, table_id)
            wait = began + k / COMMITS_PER_S - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            start = time.perf_counter()
            table.append(data.batch(1000 + k, k * 10, 10))
            done = time.perf_counter()
            appends.append(done - start)
            snapshot = table.current_snapshot()
            assert snapshot is not None
            pending.append((table_id, snapshot.snapshot_id, start, done))
        sent_s = time.perf_counter() - began
        deadline = time.perf_counter() + 15
        while time.perf_counter() < deadline and any(
            (t, s) not in watcher.seen for t, s, _, _ in pending
        ):
            time.sleep(0.05)
    finally:
        watcher.stop.set()
        watcher.join(5)
    missing = [(t, s) for t, s, _, _ in pending if (t, s) not in watcher.seen]
    from_start = [watcher.seen[(t, s)] - a for t, s, a, _ in pending if (t, s) in watcher.seen]
    from_commit = [watcher.seen[(t, s)] - c for t, s, _, c in pending if (t, s) in watcher.seen]
    return {
        "commits": commits,
        "real_tables": len(targets),
        "commits_per_s": commits / sent_s,
        "tasks_missing": commits - len(from_start),
        "commits_to_a_table_with_one_pending": busy_picks,
        "p50_s": _quantile(from_start, 0.5) if from_start else None,
        "p99_s": _quantile(from_start, 0.99) if from_start else None,
        "after_append_p50_s": _quantile(from_commit, 0.5) if from_commit else None,
        "after_append_p99_s": _quantile(from_commit, 0.99) if from_commit else None,
        "append_p50_s": _quantile(appends, 0.5),
        "why_missing": _why_missing(api, missing[:3]),
    }


def _busy(
    pending: list[tuple[int, int, float, float]], seen: dict[tuple[int, int], Any]
) -> set[int]:
    return {t for t, s, _, _ in pending if (t, s) not in seen}


def _why_missing(rt: Runtime, missing: list[tuple[int, int]]) -> list[str]:
    """For commits that got no task: their timeline event's decision, or that none exists."""
    out = []
    with rt.engine.connect() as conn:
        for table_id, snapshot_id in missing:
            row = conn.execute(
                text(
                    "SELECT decision, decision_detail FROM timeline_events "
                    "WHERE table_id = :t AND snapshot_id = :s"
                ),
                {"t": table_id, "s": snapshot_id},
            ).first()
            out.append("no timeline event" if row is None else f"{row[0]}: {row[1]}"[:300])
    return out


# --- 4. GET /api/v1/tables --------------------------------------------------------------


def _health_scores(rt: Runtime) -> None:
    """Synthetic health scores on the fleet's rows (0..100, one in ten never measured):
    the health watch is not run over 100,000 tables here."""
    with rt.engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE managed_tables SET health_score = CASE WHEN id % 10 = 0 THEN NULL "
                "ELSE (id * 7919) % 101 END WHERE namespace LIKE :p"
            ),
            {"p": f"{PREFIX}%"},
        )
        conn.execute(text("ANALYZE managed_tables"))


def _deep_cursors(rt: Runtime, second: str) -> dict[str, str]:
    """Cursors ~100 rows before the end of each order (keyset: no offset is sent)."""
    out: dict[str, str] = {}
    with rt.engine.connect() as conn:
        live = "retired_at IS NULL"
        last_id = conn.execute(
            text(f"SELECT id FROM managed_tables WHERE {live} ORDER BY id DESC OFFSET 100 LIMIT 1")
        ).scalar_one()
        out["registered"] = str(last_id)
        for key, where in (("health", live), ("health_catalog", f"{live} AND catalog = :c")):
            score, table_id = conn.execute(
                text(
                    f"SELECT health_score, id FROM managed_tables WHERE {where} "
                    "AND health_score IS NOT NULL ORDER BY health_score DESC, id DESC "
                    "OFFSET 100 LIMIT 1"
                ),
                {"c": second} if ":c" in where else {},
            ).one()
            cursor = sorted_cursor("health", (score, table_id), TABLE_SORTS)
            assert cursor is not None
            out[key] = cursor
    return out


def _listing(rt: Runtime, second: str, requests: int, repeats: int) -> dict[str, Any]:
    _health_scores(rt)
    deep = _deep_cursors(rt, second)
    variants: dict[str, dict[str, Any]] = {
        "first": {},
        "deep": {"cursor": deep["registered"]},
        "health_first": {"sort": "health"},
        "health_deep": {"sort": "health", "cursor": deep["health"]},
        "health_catalog_first": {"sort": "health", "catalog": second},
        "health_catalog_deep": {
            "sort": "health",
            "catalog": second,
            "cursor": deep["health_catalog"],
        },
    }
    times: dict[str, list[float]] = {k: [] for k in variants}
    p99s: list[float] = []
    secret = _admin_token(rt)
    with (
        serve_in_thread(rt) as url,
        httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {secret}"}, timeout=60
        ) as client,
    ):
        total = client.get("/api/v1/tables", params={"limit": 1}).json()["total"]
        for params in variants.values():
            _get(client, params)  # warm
        for _ in range(repeats):
            batch: list[float] = []
            for _ in range(requests):
                for key, params in variants.items():
                    times[key].append(_get(client, params))
                    batch.append(times[key][-1])
            p99s.append(_quantile(batch, 0.99))
    every = [t for v in times.values() for t in v]
    return {
        "tables_listed_total": total,
        "requests": len(every),
        "p50_ms": 1000 * _quantile(every, 0.5),
        "p99_ms": 1000 * _quantile(every, 0.99),
        "p99_per_repeat_s": p99s,
        **{f"{k}_p99_ms": 1000 * _quantile(v, 0.99) for k, v in times.items()},
        **{f"{k}_p50_ms": 1000 * _quantile(v, 0.5) for k, v in times.items()},
    }


# --- setup and cleanup ------------------------------------------------------------------


def _second_catalog(rt: Runtime, work: Path) -> tuple[str, str, str]:
    """A database of its own on the bench's server, registered as JDBC catalog `name` (its
    URL given as an environment variable reference): (name, database, URL)."""
    database = f"lw_bench_fleet_{RUN}"
    # As the schema's owner: the services' role may not create databases (lakewarden.db.roles).
    owner = resolve_migration_url(rt.settings)
    with _admin_conn(owner) as conn:
        conn.execute(f'CREATE DATABASE "{database}"')
    url = make_url(owner).set(database=database).render_as_string(hide_password=False)
    os.environ[URL_ENV] = url
    name = f"fleet2_{RUN}"
    warehouse = (work / "second").resolve().as_uri()
    with transaction(rt.engine) as session:
        session.add(
            CatalogRow(
                name=name,
                type="jdbc",
                properties={"uri": {"env": URL_ENV}, "warehouse": warehouse},
                created_by="bench",
            )
        )
    return name, database, url


def _stop_listener(listener: CommitListener | None) -> None:
    """Wait for the listener and its per-database threads (its stop event is set): none may
    still use the second catalog's database when it is dropped."""
    if listener is not None:
        listener.join(10)
        for database in list(listener.databases.values()):
            database.join(10)


def _close_clients(api: Runtime | None, sides: list[Side], default: str) -> None:
    """Close the pools of every client of the second catalog: the writer's, and the one the
    API runtime's registry built for it (its polls and refreshes), before its row goes."""
    for side in sides:
        if side.name == default:
            continue
        clients = [side.writer]
        if api is not None:
            clients.append(api.catalogs.load(side.name))
        for client in clients:
            if isinstance(client, SqlCatalog):
                client.engine.dispose()


def _drop_database(rt: Runtime, database: str) -> None:
    """Drop the second catalog's database. Every connection of ours to it is closed by now;
    any left (a leak) is reported on stderr before FORCE ends it."""
    with _admin_conn(resolve_migration_url(rt.settings)) as admin:
        left = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (database,)
        ).fetchone()
        if left and left[0]:
            print(f"B10 cleanup: {left[0]} connection(s) to {database} still open", file=sys.stderr)
        admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


def _cleanup(
    rt: Runtime, api: Runtime | None, sides: list[Side], database: str | None, work: Path
) -> None:
    """Remove the fleet: its rows and rules, then (nothing of ours connected to it any
    more) the second catalog's row and database, then its files."""
    names = [s.name for s in sides]
    default = rt.settings.catalog_name
    _close_clients(api, sides, default)
    with rt.engine.begin() as conn:
        conn.execute(
            text(
                "DELETE FROM managed_tables WHERE catalog = ANY(:c) AND "
                "(namespace LIKE :p OR namespace LIKE :t)"
            ),
            {"c": names, "p": f"{PREFIX}%", "t": f"{TEMPLATES_NS}%"},
        )
        conn.execute(
            text("DELETE FROM management_rules WHERE catalog = ANY(:c) AND namespace = :ns"),
            {"c": names, "ns": f"{PREFIX}_*"},
        )
        for table in ("iceberg_tables", "iceberg_namespace_properties"):
            if conn.execute(text("SELECT to_regclass(:t) IS NOT NULL"), {"t": table}).scalar():
                conn.execute(
                    text(
                        f"DELETE FROM {table} WHERE catalog_name = :c AND "
                        "(table_namespace LIKE :p OR table_namespace LIKE :t)"
                        if table == "iceberg_tables"
                        else f"DELETE FROM {table} WHERE catalog_name = :c AND "
                        "(namespace LIKE :p OR namespace LIKE :t)"
                    ),
                    {"c": default, "p": f"{PREFIX}%", "t": f"{TEMPLATES_NS}%"},
                )
        second = [n for n in names if n != default]
        conn.execute(text("DELETE FROM catalog_polls WHERE catalog = ANY(:c)"), {"c": second})
        conn.execute(text("DELETE FROM catalogs WHERE name = ANY(:c)"), {"c": second})
    if database is not None:
        url = os.environ.get(URL_ENV)
        if url:
            engine_for(url).dispose()  # catalog_engine's (the bulk rows' inserts, listings)
        _drop_database(rt, database)
    os.environ.pop(URL_ENV, None)
    shutil.rmtree(work, ignore_errors=True)


# --- the figure -------------------------------------------------------------------------


def b10(ctx: Context) -> Figure:
    with measuring(
        "B10",
        "the fleet: auto-registration of N catalog rows in two JDBC catalogs by a management "
        "rule (tables adopted per second); time to managed; commit -> task; GET /api/v1/tables",
        "the issue's targets (>= 1,000 tables/s; managed <= 2 s; p99 <= 1 s; p99 <= 200 ms)",
        "all four targets at 100,000 tables",
    ) as fig:
        sizes = _sizes(ctx)
        began = time.perf_counter()
        work = ctx.work_dir / f"fleet-{RUN}"
        work.mkdir(parents=True, exist_ok=True)
        sides: list[Side] = []
        database: str | None = None
        stop = threading.Event()
        listener: CommitListener | None = None
        api: Runtime | None = None
        try:
            second, database, url = _second_catalog(ctx.rt, work)
            api = _runtime(ctx.rt)  # the API process (its registry sees the second catalog)
            writer = _runtime(ctx.rt)  # a writer of the default catalog
            default_tables = round(sizes.tables * DEFAULT_SHARE)
            sides = [
                Side(ctx.rt.settings.catalog_name, writer.catalog, ctx.rt.db_url, default_tables),
                Side(
                    second,
                    SqlCatalog(second, uri=url, warehouse=(work / "second").resolve().as_uri()),
                    url,
                    sizes.tables - default_tables,
                ),
            ]
            mark = time.perf_counter()
            registration = _register_fleet(api, sides, sizes, work)
            phases: dict[str, float] = registration["phase_s"]
            phases["second_catalog"] = mark - began
            mark = time.perf_counter()
            listener = CommitListener(api, stop)
            listener.start()
            if not listener.connected.wait(300):
                raise RuntimeError("the commit listener did not connect")
            # once connected it polls each catalog to catch up: let that finish first
            time.sleep(1 + sum(v["seconds"] for v in registration["steady_poll"].values()))
            phases["listener_catch_up"], mark = time.perf_counter() - mark, time.perf_counter()
            to_managed = _time_to_managed(api, sides, sizes.new_tables, work)
            phases["time_to_managed"], mark = time.perf_counter() - mark, time.perf_counter()
            stream = _commit_stream(api, sides, sizes.commits)
            phases["commit_stream"], mark = time.perf_counter() - mark, time.perf_counter()
            stop.set()
            _stop_listener(listener)
            listing = _listing(ctx.rt, second, sizes.requests, ctx.repeats)
            phases["list_tables"], mark = time.perf_counter() - mark, time.perf_counter()
        finally:
            stop.set()
            _stop_listener(listener)
            _cleanup(ctx.rt, api, sides, database, work)
        phases["cleanup"] = time.perf_counter() - mark

        bulk = registration["bulk"]
        rates = [bulk[s.name]["tables_per_s"] for s in sides]
        adopted = sum(bulk[s.name]["adopted"] for s in sides)
        bulk_s = sum(bulk[s.name]["listing_s"] + bulk[s.name]["adopt_s"] for s in sides)
        first = registration["first_poll"]
        first_rate = sum(v["tables"] for v in first.values()) / sum(
            v["seconds"] for v in first.values()
        )
        goals = {
            "adoption_ge_1000_per_s": adopted / bulk_s >= 1000,
            "time_to_managed_p99_le_2s": to_managed["p99_s"] <= 2.0,
            "commit_to_task_p99_le_1s": stream["p99_s"] is not None
            and stream["p99_s"] <= 1.0
            and stream["tasks_missing"] == 0,
            "list_p99_le_200ms": listing["p99_ms"] <= 200,
        }
        fig.ratio = Stat.of(rates)
        fig.ratio_label = "tables adopted per second (listing + adopt), per catalog"
        fig.goal_met = all(goals.values()) if sizes.tables >= 100_000 else None
        fig.values = {
            "tables": sizes.tables,
            "catalogs": {s.name: s.tables for s in sides},
            "adopted_bulk": adopted,
            "adoption_tables_per_s": adopted / bulk_s,
            "adoption_per_catalog": bulk,
            "first_poll_with_refresh_tables_per_s": first_rate,
            "first_poll_with_refresh": first,
            "first_poll_with_refresh_100k_estimate_s": 100_000 / first_rate,
            "steady_poll": registration["steady_poll"],
            "time_to_managed": to_managed,
            "commit_to_task": stream,
            "list_tables": listing,
            "goals": goals,
            "phase_s": registration["phase_s"],
            "adopt_over_first_poll_rate": (adopted / bulk_s) / first_rate,
        }
        fig.notes = [
            f"rows: INSERTed into iceberg_tables as a JDBC catalog's create leaves them, "
            f"{DEFAULT_SHARE:.0%} in the default catalog (the bench's database), the rest in a "
            "second catalog in a database of its own (registered as a catalogs row, its URL "
            "as an environment variable reference); namespaces of 1, 2 and 3 levels, "
            f"~{TABLES_PER_NAMESPACE} tables each; every row points at the real metadata.json "
            "of one of two template tables (pyiceberg create_table + one append) of its "
            "catalog: many rows share one file",
            "adoption (headline): one management rule per catalog (namespace glob "
            f"'{PREFIX}_*', include '*') covers every row; timed: jdbc_listing (one query) and "
            "_follow (lakewarden.catalogs.adoption.adopt in one transaction), "
            "the steps of poll_catalog "
            "that register tables, over all rows of the catalog; the refreshes poll_catalog "
            "runs next (load each new table, record its baseline commit) are not in it",
            f"first_poll_with_refresh: a whole poll_catalog (adopt, then load and ingest each "
            f"table) over a subset of {sizes.subset} rows and {sizes.real} real tables per "
            "catalog, before the bulk rows exist; the 100k estimate scales its rate. The bulk "
            "rows were not refreshed: their catalog pointer was recorded as their "
            "metadata_location in SQL (what the first refresh records; no baseline event), "
            "so the later parts see a fleet whose tables are all known",
            "steady_poll: poll_catalog over the full fleet with nothing new and nothing moved "
            "(one listing query, adopt over every row, pointers compared): the per-cycle cost",
            "time_to_managed: a CommitListener (as create_app starts it) over the whole "
            "fleet; pyiceberg create_table in a covered 2-level namespace, one every ~0.5 s, "
            "alternating catalogs; timed from just before create_table to the managed_tables "
            "row being visible (watched every 10 ms); the trigger's 'create' notification "
            "makes the listener poll that catalog (listing + adopt over all its rows); the "
            "first table is created after the listener's catch-up polls (it polls every "
            "catalog once connected): 1 s plus the steady polls' time after it connected",
            f"commit_to_task: pyiceberg appends at {COMMITS_PER_S:g}/s to random real tables "
            "(both catalogs) with the whole fleet managed (the target names 10,000 managed "
            "tables; this is the full fleet); the rule's policy makes every commit call for "
            "compaction; each table's open task is cancelled before its commit, and a table "
            "is committed to only once its previous commit has its task (else both are "
            "evaluated as one, one task for both); timed from "
            "just before the append (so pyiceberg's write and commit are in it; after_append: "
            "from its return) to the task row being seen by a watcher reading new tasks every "
            "5 ms; the event and its task commit in one transaction",
            "list_tables: the real app over HTTP (uvicorn in a thread of this process, as "
            "B8), as an admin, 50 rows a page; deep pages: a cursor ~100 rows before the end "
            "of that order (keyset); health scores are synthetic (0-100, one row in ten "
            "unmeasured): the health watch is not run here; total counts every live managed "
            "table of the bench database (other figures' too)",
            "quantiles are nearest-rank; goal_met is judged only at 100,000 tables; "
            "LAKEWARDEN_BENCH_FLEET_TABLES sets the fleet size (a reduced full run)",
            "everything is removed at the end: the rows, rules, the second catalog and its "
            "database, the tables' files",
        ]
    return fig
