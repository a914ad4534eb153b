"""B11, polling a REST catalog (issue 11): catalog requests and CPU per minute as API
replicas are added.

A real Iceberg REST catalog (tests/rest_catalog.py, a process of its own over pyiceberg's
SqlCatalog in a database of its own) holds N tables, every one adopted by a management rule.
Then K = 1, 2, 4 replica processes (each its own Runtime, as an API replica) run `poll_due`
every POLL_TICK_S, as the API's poller ticker does, for a window of W seconds each. Measured
per window: the catalog requests the REST server served (its request counter), the CPU
seconds of the replicas together and of the REST server (psutil: user + system), the polls
performed. The target: requests and CPU per minute stay flat as K grows (a catalog is polled
once per interval, by the one replica that wins its due time).

    python -m benchmarks.rest_polling CATALOG   # one replica (the figure starts these)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

import psutil
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from benchmarks import data
from benchmarks.control_plane import _runtime
from benchmarks.fleet import _admin_conn
from benchmarks.harness import Context, Figure, Stat, measuring
from lakewarden.catalogs.catalog import CatalogEntry
from lakewarden.db.models import Catalog as CatalogRow
from lakewarden.db.models import ManagementRule
from lakewarden.db.session import resolve_migration_url, transaction
from lakewarden.events.poller import (
    REST_REFRESH_CHUNK,
    PollResult,
    _follow,
    _ingest_chunk,
    poll_catalog,
    rest_listing,
)
from lakewarden.runtime import Runtime

RUN = uuid.uuid4().hex[:6]
PREFIX = f"rp{RUN}"  # the rule's namespaces: f"{PREFIX}_*"
TEMPLATES_NS = f"rptpl{RUN}"  # two real tables whose metadata files the rows point at
ROOT = Path(__file__).resolve().parents[1]
POLL_TICK_S = 2.0  # services.api.app.POLL_TICK_S: how often a replica runs poll_due
CONCURRENCY = 4  # the catalogs row's poll_concurrency (its default)
REPLICAS = (1, 2, 4)


@dataclass(frozen=True)
class RestSizes:
    tables: int
    namespaces: int
    interval_s: float  # the catalog's poll_interval_s
    window_s: float  # how long each K runs


SIZES = {
    "smoke": RestSizes(tables=50, namespaces=5, interval_s=2.0, window_s=5.0),
    "full": RestSizes(tables=10_000, namespaces=50, interval_s=30.0, window_s=90.0),
}


def _sizes(ctx: Context) -> RestSizes:
    """The sizes of `ctx`'s run; LAKEWARDEN_BENCH_REST_TABLES and
    LAKEWARDEN_BENCH_REST_INTERVAL_S override the table count and the poll interval."""
    sizes = SIZES[ctx.sizes.name]
    tables = os.environ.get("LAKEWARDEN_BENCH_REST_TABLES")
    interval = os.environ.get("LAKEWARDEN_BENCH_REST_INTERVAL_S")
    if tables:
        sizes = replace(sizes, tables=int(tables), namespaces=max(1, int(tables) // 200))
    if interval:
        sizes = replace(sizes, interval_s=float(interval))
    return sizes


# --- a replica (a process of its own) ---------------------------------------------------


def replica(catalog: str) -> None:
    """One API replica's poller: `poll_due` every POLL_TICK_S once told "go" on stdin;
    "report" answers with the polls started and those finished (one JSON line). Only the
    benchmark's catalog is polled (not the bench database's default catalog)."""
    from lakewarden.events.poller import poll_due
    from lakewarden.runtime import make_runtime

    rt = make_runtime("bench-replica")
    registry = rt.catalogs
    registry.entries = lambda region=None: [registry.entry(catalog)]  # type: ignore[method-assign]
    registry.load(catalog)  # the client's GET /v1/config: before the window
    started: list[float] = []
    polls: list[dict[str, Any]] = []

    def poll(rt: Runtime, entry: Any) -> Any:
        start = time.monotonic()
        started.append(start)
        result = poll_catalog(rt, entry)
        polls.append(
            {
                "s": time.monotonic() - start,
                "requests": result.requests,
                "seen": result.tables_seen,
                "refreshed": result.refreshed,
                "errors": len(result.errors),
            }
        )
        return result

    def loop() -> None:
        while True:
            start = time.monotonic()
            poll_due(rt, poll)
            time.sleep(max(0.0, POLL_TICK_S - (time.monotonic() - start)))

    print("ready", flush=True)
    for line in sys.stdin:
        command = line.strip()
        if command == "go":
            threading.Thread(target=loop, name="poller", daemon=True).start()
        elif command == "report":
            print(json.dumps({"started": len(started), "finished": polls}), flush=True)
        elif command == "quit":
            break


class Replica:
    def __init__(self, db_url: str, catalog: str) -> None:
        env = {**os.environ, "LAKEWARDEN_DATABASE_URL": db_url}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.rest_polling", catalog],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.ps = psutil.Process(self.proc.pid)

    @property
    def _stdin(self) -> IO[str]:
        assert self.proc.stdin is not None
        return self.proc.stdin

    def read(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"replica {self.proc.pid} ended (exit {self.proc.poll()})")
        return line

    def send(self, command: str) -> None:
        self._stdin.write(command + "\n")
        self._stdin.flush()

    def cpu(self) -> float:
        t = self.ps.cpu_times()
        return float(t.user + t.system)

    def close(self) -> None:
        """Ended at once (a poll under way is cut short)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)


def _cpu(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return float(t.user + t.system)


# --- setup ------------------------------------------------------------------------------


def _catalog_database(rt: Runtime) -> tuple[str, str]:
    database = f"lw_bench_rest_{RUN}"
    # As the schema's owner: the services' role may not create databases (lakewarden.db.roles).
    owner = resolve_migration_url(rt.settings)
    with _admin_conn(owner) as conn:
        conn.execute(f'CREATE DATABASE "{database}"')
    url = make_url(owner).set(database=database).render_as_string(hide_password=False)
    return database, url


def _server(sql_url: str, warehouse: str, *flags: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "tests/rest_catalog.py", sql_url, warehouse, *flags],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    uri = proc.stdout.readline().strip()
    if not uri.startswith("http"):
        proc.kill()
        raise RuntimeError(f"the REST catalog did not start (exit {proc.poll()})")
    return proc, uri


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def _tables(sql_url: str, warehouse: Path, sizes: RestSizes) -> dict[tuple[str, str], str]:
    """Two real template tables (pyiceberg create_table + one append, outside the rule's
    scope), then N rows in the catalog's `iceberg_tables` (as SqlCatalog's create leaves
    them) over `namespaces` namespaces, pointing at the templates' metadata files in turn;
    returns each row's (namespace, name) -> metadata location."""
    from pyiceberg.catalog.sql import SqlCatalog

    writer = SqlCatalog("rest", uri=sql_url, warehouse=warehouse.as_uri())
    try:
        writer.create_namespace(TEMPLATES_NS)
        templates = []
        for k in range(2):
            table = writer.create_table(f"{TEMPLATES_NS}.t{k}", schema=data.SCHEMA)
            table.append(data.batch(k, 0, 10))
            templates.append(table.metadata_location)
        for n in range(sizes.namespaces):
            writer.create_namespace(f"{PREFIX}_{n}")
    finally:
        writer.engine.dispose()
    rows = {
        (f"{PREFIX}_{i % sizes.namespaces}", f"t{i}"): templates[i % 2] for i in range(sizes.tables)
    }
    engine = create_engine(sql_url)
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO iceberg_tables (catalog_name, table_namespace, table_name, "
                    "metadata_location, previous_metadata_location) VALUES ('rest', :ns, :t, :m, "
                    "NULL)"
                ),
                [{"ns": ns, "t": t, "m": m} for (ns, t), m in rows.items()],
            )
    finally:
        engine.dispose()
    return rows


def _register(rt: Runtime, name: str, uri: str, sizes: RestSizes) -> None:
    with transaction(rt.engine) as session:
        session.add(
            CatalogRow(
                name=name,
                type="rest",
                properties={"uri": uri},
                poll_interval_s=sizes.interval_s,
                poll_concurrency=CONCURRENCY,
                version=1,
                created_by="bench",
            )
        )
        rule = ManagementRule(catalog=name, namespace=f"{PREFIX}_*", include=["*"], exclude=[])
        session.add(rule)


def _adopt(api: Runtime, name: str, rows: dict[tuple[str, str], str]) -> dict[str, Any]:
    """The rule adopts every row (REST listing + adopt, the poll's first steps); then each
    row's pointer is recorded as its metadata_location in SQL (what its first refresh
    records), so the windows see a fleet that is all known: the steady state."""
    entry = api.catalogs.entry(name)
    start = time.perf_counter()
    listing, requests = rest_listing(api.catalogs.load(name))
    listing_s = time.perf_counter() - start
    start = time.perf_counter()
    adopted = _follow(api, entry, {k: rows.get(k) for k in listing})
    adopt_s = time.perf_counter() - start
    payload = [{"ns": ns, "t": t, "m": m} for (ns, t), m in rows.items()]
    with api.engine.begin() as conn:
        marked = conn.execute(
            text(
                "UPDATE managed_tables m SET metadata_location = v.m "
                "FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS v(ns text, t text, m text) "
                "WHERE m.catalog = :c AND m.namespace = v.ns AND m.name = v.t"
            ),
            {"rows": json.dumps(payload), "c": name},
        ).rowcount
    return {
        "listed": len(listing),
        "listing_requests": requests,
        "listing_s": listing_s,
        "adopted": len(adopted.adopted) if adopted else 0,
        "adopt_s": adopt_s,
        "marked_refreshed": marked,
    }


def _cleanup(rt: Runtime, name: str, database: str | None, work: Path) -> None:
    with rt.engine.begin() as conn:
        for table in ("managed_tables", "management_rules", "catalog_polls"):
            conn.execute(text(f"DELETE FROM {table} WHERE catalog = :c"), {"c": name})
        conn.execute(text("DELETE FROM catalogs WHERE name = :c"), {"c": name})
    if database is not None:
        with _admin_conn(resolve_migration_url(rt.settings)) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    shutil.rmtree(work, ignore_errors=True)


# --- the windows ------------------------------------------------------------------------


def _served(uri: str) -> int:
    import httpx

    return int(httpx.get(f"{uri}/test/requests", timeout=30).json()["requests"])


def _window(
    rt: Runtime, db_url: str, name: str, uri: str, server: psutil.Process, k: int, w: float
) -> dict[str, Any]:
    """K fresh replicas poll for `w` seconds, the catalog due at the start; then they are
    ended (a poll under way is cut short)."""
    with rt.engine.begin() as conn:
        conn.execute(text("DELETE FROM catalog_polls WHERE catalog = :c"), {"c": name})
    replicas = [Replica(db_url, name) for _ in range(k)]
    try:
        for r in replicas:
            if r.read().strip() != "ready":
                raise RuntimeError("a replica did not start")
        time.sleep(1)  # let in-flight requests of the last window drain
        requests0, server0 = _served(uri), _cpu(server)
        cpu0 = [r.cpu() for r in replicas]
        start = time.perf_counter()
        for r in replicas:
            r.send("go")
        time.sleep(w)
        seconds = time.perf_counter() - start
        requests1, server1 = _served(uri), _cpu(server)
        cpu1 = [r.cpu() for r in replicas]
        reports = []
        for r in replicas:
            r.send("report")
            reports.append(json.loads(r.read()))
    finally:
        for r in replicas:
            r.close()
    polls = [p for report in reports for p in report["finished"]]
    per_min = 60.0 / seconds
    cpu = [b - a for a, b in zip(cpu0, cpu1, strict=True)]
    return {
        "replicas": k,
        "window_s": seconds,
        "catalog_requests": requests1 - requests0,
        "requests_per_min": (requests1 - requests0) * per_min,
        "replica_cpu_s": sum(cpu),
        "replica_cpu_s_per_min": sum(cpu) * per_min,
        "replica_cpu_s_each": cpu,
        "server_cpu_s_per_min": (server1 - server0) * per_min,
        "polls_started": sum(report["started"] for report in reports),
        "polls_started_by_replica": [report["started"] for report in reports],
        "polls_finished": len(polls),
        "poll_s": [p["s"] for p in polls],
        "poll_requests": [p["requests"] for p in polls],
        "refreshed": sum(p["refreshed"] for p in polls),
        "poll_errors": sum(p["errors"] for p in polls),
    }


# --- the figure -------------------------------------------------------------------------


def b11(ctx: Context) -> Figure:
    with measuring(
        "B11",
        "REST catalog polling: catalog requests and replica CPU per minute, N tables all "
        "managed by a rule, K = 1, 2, 4 API replicas each running poll_due",
        "the same with 1 replica",
        "flat as replicas are added: K=4 / K=1 within 0.8-1.25 for requests and CPU per minute",
    ) as fig:
        sizes = _sizes(ctx)
        work = ctx.work_dir / f"rest-{RUN}"
        work.mkdir(parents=True, exist_ok=True)
        name = f"rest_{RUN}"
        database: str | None = None
        server_proc: subprocess.Popen[str] | None = None
        phases: dict[str, float] = {}
        try:
            mark = time.perf_counter()
            database, sql_url = _catalog_database(ctx.rt)
            server_proc, uri = _server(sql_url, (work / "wh").resolve().as_uri())
            server = psutil.Process(server_proc.pid)
            rows = _tables(sql_url, (work / "wh").resolve(), sizes)
            phases["create_tables"], mark = time.perf_counter() - mark, time.perf_counter()
            _register(ctx.rt, name, uri, sizes)
            api = _runtime(ctx.rt)
            adoption = _adopt(api, name, rows)
            phases["adopt"], mark = time.perf_counter() - mark, time.perf_counter()
            # one poll at N, in this process: its duration and requests
            requests0 = _served(uri)
            start = time.perf_counter()
            one = poll_catalog(api, api.catalogs.entry(name))
            one_poll = {
                "seconds": time.perf_counter() - start,
                "requests_counted": _served(uri) - requests0,
                "requests_reported": one.requests,
                "tables_seen": one.tables_seen,
                "refreshed": one.refreshed,
                "errors": len(one.errors),
            }
            phases["one_poll"], mark = time.perf_counter() - mark, time.perf_counter()
            windows = {
                k: _window(ctx.rt, ctx.rt.db_url, name, uri, server, k, sizes.window_s)
                for k in REPLICAS
            }
            phases["windows"] = time.perf_counter() - mark
        finally:
            mark = time.perf_counter()
            if server_proc is not None:
                _stop(server_proc)
            _cleanup(ctx.rt, name, database, work)
            phases["cleanup"] = time.perf_counter() - mark

        first, last = windows[REPLICAS[0]], windows[REPLICAS[-1]]
        req_ratio = last["requests_per_min"] / first["requests_per_min"]
        cpu_ratio = last["replica_cpu_s_per_min"] / first["replica_cpu_s_per_min"]
        flat = all(0.8 <= r <= 1.25 for r in (req_ratio, cpu_ratio))
        fig.ratio = Stat.of([req_ratio])
        fig.ratio_label = f"K={REPLICAS[-1]} / K=1 catalog requests per minute"
        fig.goal_met = flat if sizes.tables >= 10_000 else None
        fig.values = {
            "tables": sizes.tables,
            "namespaces": sizes.namespaces,
            "poll_interval_s": sizes.interval_s,
            "poll_concurrency": CONCURRENCY,
            "window_s": sizes.window_s,
            "requests_per_min_ratio": req_ratio,
            "replica_cpu_per_min_ratio": cpu_ratio,
            "one_poll": one_poll,
            "by_replicas": {str(k): v for k, v in windows.items()},
            "adoption": adoption,
            "phase_s": phases,
        }
        fig.notes = [
            "catalog: tests/rest_catalog.py (the REST protocol over pyiceberg's SqlCatalog) "
            "as a process of its own, in a Postgres database of its own on the bench's server; "
            "its requests counted by its own middleware (GET /test/requests, not counted)",
            f"tables: two real template tables (pyiceberg create_table + one append, outside "
            f"the rule's scope) and N rows INSERTed into the SqlCatalog's iceberg_tables over "
            f"{sizes.namespaces} namespaces, each pointing at a template's metadata.json (many "
            "rows share one file; a load reads and returns it like any table's)",
            "adoption: a management rule (namespace glob over the N rows' namespaces, include "
            "'*') adopted every row through the poll's own steps (rest_listing, _follow); each "
            "row's pointer was then recorded as its metadata_location in SQL (what its first "
            "refresh records), so the windows measure the steady state: listing + one load per "
            "managed table, no pointer moved",
            f"replicas: K processes (python -m benchmarks.rest_polling), each its own Runtime on "
            f"the bench database, running poll_due every {POLL_TICK_S:g} s (the API's poller "
            "tick) over the benchmark's catalog only; K fresh ones per window (their start-up "
            "not measured), killed at its end; the catalog made due at each window's start (its "
            "catalog_polls row deleted)",
            "requests per minute: the REST server's count over the window; CPU: psutil user + "
            "system seconds of the active replicas (and of the REST server, apart) over the "
            "window; a poll under way at the window's end is counted as far as it got (its "
            "requests and CPU; polls_started counts it, polls_finished does not)",
            "one_poll: poll_catalog at N in the bench process (duration, requests counted at "
            "the server and as the poll reports them)",
            "everything is removed at the end: the catalog row, rule, managed rows, its poll "
            "row, the catalog's database and files",
        ]
    return fig


# --- B30: one steady poll, conditional loads against the loads before them ----------------


def _old_steady_loads(api: Runtime, name: str) -> float:
    """The steady poll's loads as they were before conditional loads (the reference): every
    managed table loaded in full through pyiceberg (`find_table`), `CONCURRENCY` at once,
    and its pointer compared with the one recorded; seconds."""
    from concurrent.futures import ThreadPoolExecutor

    from lakewarden.catalogs.catalog import TableRef, find_table

    client = api.catalogs.load(name)
    with api.engine.begin() as conn:
        rows = conn.execute(
            text(
                "SELECT namespace, name, metadata_location FROM managed_tables WHERE catalog = :c"
            ),
            {"c": name},
        ).all()

    def load(row: Any) -> bool:
        table = find_table(client, TableRef(row[0], row[1]))
        return table is not None and table.metadata_location != row[2]

    start = time.perf_counter()
    with ThreadPoolExecutor(CONCURRENCY, "old-poll") as pool:
        moved = sum(pool.map(load, rows))
    seconds = time.perf_counter() - start
    assert moved == 0, f"{moved} tables moved in a steady poll"
    return seconds


def _timed_poll(
    api: Runtime,
    name: str,
    uri: str,
    server: psutil.Process,
    poll: Callable[[Runtime, CatalogEntry], Any] = poll_catalog,
) -> dict[str, Any]:
    """One poll (`poll_catalog` unless told): its seconds, the catalog's requests and 304s,
    and the CPU seconds of this process (the poller) and of the catalog server over it."""
    served0, own0, server0 = httpx_json(uri), _cpu(psutil.Process()), _cpu(server)
    start = time.perf_counter()
    result = poll(api, api.catalogs.entry(name))
    seconds = time.perf_counter() - start
    served1, own1, server1 = httpx_json(uri), _cpu(psutil.Process()), _cpu(server)
    return {
        "seconds": seconds,
        "poller_cpu_s": own1 - own0,
        "server_cpu_s": server1 - server0,
        "requests": served1["requests"] - served0["requests"],
        "not_modified": served1["not_modified"] - served0["not_modified"],
        "tables_seen": result.tables_seen,
        "refreshed": result.refreshed,
        "errors": len(result.errors),
        "load_avg": os.getloadavg()[0],
    }


def _old_first_poll(api: Runtime, entry: CatalogEntry) -> PollResult:
    """The first poll's REST loads and ingest as they were before 2026-11-27 (the reference):
    listing and adoption as now; then every table loaded (If-None-Match as now) and parsed
    in full into a pyiceberg Table, `CONCURRENCY` at once, all loads before any ingest, then
    ingested 200 a chunk (`_ingest_chunk`, as now). Its ETags are not kept (one statement)."""
    from pyiceberg.catalog.rest import Endpoints, RestCatalog, TableResponse

    from lakewarden.catalogs.catalog import TableRef
    from lakewarden.isolation import PerTable

    client = api.catalogs.load(entry.name)
    assert isinstance(client, RestCatalog)
    result = PollResult(entry.name)
    listing, result.requests = rest_listing(client)
    result.tables_seen = len(listing)
    _follow(api, entry, listing)
    with api.engine.begin() as conn:
        rows = conn.execute(
            text("SELECT namespace, name FROM managed_tables WHERE catalog = :c"),
            {"c": entry.name},
        ).all()

    def load(row: Any) -> tuple[TableRef, Any]:
        ref = TableRef(row[0], row[1])
        url = client.url(
            Endpoints.load_table,
            prefixed=True,
            **client._split_identifier_for_path(ref.identifier),
        )
        response = client._session.get(url)
        response.raise_for_status()
        parsed = TableResponse.model_validate_json(response.text)
        return ref, client._response_to_table(ref.identifier, parsed)

    with ThreadPoolExecutor(CONCURRENCY, "old-first-poll") as pool:
        loaded = list(pool.map(load, rows))
    isolated = PerTable("bench")
    for start in range(0, len(loaded), REST_REFRESH_CHUNK):
        chunk = dict(loaded[start : start + REST_REFRESH_CHUNK])
        result.refreshed += _ingest_chunk(api, entry.name, chunk, isolated)
    result.requests += len(rows)
    return result


def _bare_loads(uri: str, rows: list[tuple[str, str]], concurrency: int) -> dict[str, Any]:
    """A bare client (requests, one kept-alive session per thread, `concurrency` threads)
    loading `rows` in full and doing nothing with them: what the catalog serves at most."""
    import requests

    local = threading.local()

    def get(row: tuple[str, str]) -> None:
        session = getattr(local, "session", None)
        if session is None:
            session = local.session = requests.Session()
        session.get(f"{uri}/v1/namespaces/{row[0]}/tables/{row[1]}").raise_for_status()

    start = time.perf_counter()
    with ThreadPoolExecutor(concurrency, "bare") as pool:
        list(pool.map(get, rows))
    seconds = time.perf_counter() - start
    return {"loads": len(rows), "seconds": seconds, "loads_per_s": len(rows) / seconds}


def httpx_json(uri: str) -> dict[str, int]:
    import httpx

    return dict(httpx.get(f"{uri}/test/requests", timeout=30).json())


def _forget_etags(api: Runtime, name: str) -> None:
    with api.engine.begin() as conn:
        conn.execute(
            text("UPDATE managed_tables SET catalog_etag = NULL WHERE catalog = :c"), {"c": name}
        )


def b30(ctx: Context) -> Figure:
    with measuring(
        "B30",
        "a REST catalog of N tables (test catalog, poll_concurrency 4): the first poll after "
        "a rule adopts them (every table loaded and ingested), and one steady poll (none "
        "changed: conditional loads, 304s)",
        "first poll: as before 2026-11-27 (catalog served with Nagle on, the poller's full "
        "parse, all loads before ingest), arms alternated in one run; steady poll: the same "
        "tables loaded as before conditional loads (pyiceberg load_table each)",
        "a steady poll of 10,000 tables <= 30 s; the first poll after adopting them ingests "
        "fast enough for 100,000 in <= 10 min (>= 167 tables/s)",
    ) as fig:
        sizes = _sizes(ctx)
        repeats = 2 if ctx.sizes.name == "smoke" else 3
        work = ctx.work_dir / f"rest30-{RUN}"
        work.mkdir(parents=True, exist_ok=True)
        name = f"rest30_{RUN}"
        names: list[str] = []
        database: str | None = None
        procs: list[subprocess.Popen[str]] = []
        try:
            database, sql_url = _catalog_database(ctx.rt)
            warehouse = (work / "wh").resolve()
            rows = list(_tables(sql_url, warehouse, sizes))
            api = _runtime(ctx.rt)

            def first_poll(arm: str, uri: str, server: psutil.Process, poll: Any) -> Any:
                arm_name = f"{name}_{arm}_{len(names)}"
                names.append(arm_name)
                _register(ctx.rt, arm_name, uri, sizes)
                return _timed_poll(api, arm_name, uri, server, poll)

            # The reference: the catalog as served before (Nagle on) and the old poller.
            old_proc, old_uri = _server(sql_url, warehouse.as_uri(), "--nagle")
            procs.append(old_proc)
            old_server = psutil.Process(old_proc.pid)
            bare_sample = rows[: min(len(rows), 2_000)]
            bare_before = _bare_loads(old_uri, bare_sample, CONCURRENCY)
            before = first_poll("before", old_uri, old_server, _old_first_poll)
            _stop(old_proc)
            server_proc, uri = _server(sql_url, warehouse.as_uri())
            procs.append(server_proc)
            server = psutil.Process(server_proc.pid)
            bare = {c: _bare_loads(uri, bare_sample, c) for c in (1, CONCURRENCY, 8)}
            old_poller, new = [], []
            for _ in range(repeats):  # alternated: the old poller, then the new one
                old_poller.append(first_poll("oldpoller", uri, server, _old_first_poll))
                new.append(first_poll("new", uri, server, poll_catalog))
            steady_name = names[-1]
            conditional, unconditional, old = [], [], []
            for _ in range(repeats):
                old.append(_old_steady_loads(api, steady_name))
                _forget_etags(api, steady_name)
                unconditional.append(_timed_poll(api, steady_name, uri, server))
                conditional.append(_timed_poll(api, steady_name, uri, server))
        finally:
            for proc in procs:
                if proc.poll() is None:
                    _stop(proc)
            for arm_name in names[1:]:
                _cleanup(ctx.rt, arm_name, None, work)
            _cleanup(ctx.rt, names[0] if names else name, database, work)
        steady = [p["seconds"] for p in conditional]
        new_s = [p["seconds"] for p in new]
        fig.ratio = Stat.of([before["seconds"] / s for s in new_s])
        fig.ratio_label = "first poll: before / now, seconds"
        first_rate = Stat.of([sizes.tables / s for s in new_s])
        if sizes.tables >= 10_000:
            fig.goal_met = Stat.of(steady).median <= 30.0 and first_rate.median >= 167
        fig.values = {
            "tables": sizes.tables,
            "poll_concurrency": CONCURRENCY,
            "first_poll_before": before,
            "first_poll_old_poller": old_poller,
            "first_poll": new,
            "first_poll_tables_per_s": first_rate.as_json(),
            "first_poll_before_tables_per_s": sizes.tables / before["seconds"],
            "first_poll_old_poller_tables_per_s": Stat.of(
                [sizes.tables / p["seconds"] for p in old_poller]
            ).as_json(),
            "bare_client_before": bare_before,
            "bare_client_by_concurrency": {str(c): b for c, b in bare.items()},
            "conditional_poll": conditional,
            "conditional_poll_s": Stat.of(steady).as_json(),
            "poll_without_etags": unconditional,
            "poll_without_etags_s": Stat.of([p["seconds"] for p in unconditional]).as_json(),
            "old_loads_s": Stat.of(old).as_json(),
            "steady_old_loads_over_conditional": Stat.of(
                [o / c for o, c in zip(old, steady, strict=True)]
            ).as_json(),
        }
        fig.notes = [
            "catalog and tables as B11's (tests/rest_catalog.py as a process of its own, N rows "
            "in its SqlCatalog pointing at two real metadata files); each first poll is a new "
            "catalog registration (same REST server) adopted by its own rule",
            "first_poll_before: the catalog served with --nagle (as before: every kept-alive "
            "response with a body waited ~40 ms on the client's delayed ACK) and the old "
            "poller (_old_first_poll); first_poll_old_poller: the old poller on the catalog as "
            "served now; first_poll: poll_catalog now (views, not full parses; each chunk of "
            "200 ingested as it is loaded); old poller and new alternated",
            "bare_client: requests, a kept-alive session per thread, full loads of up to 2,000 "
            "tables and nothing done with them: what the catalog serves at that concurrency",
            "steady: each repeat, the old loads (reference), a poll with the ETags forgotten, "
            "a poll with the ETags stored (304s), on the last first poll's catalog",
        ]
        for poll in conditional + unconditional:
            if poll["refreshed"] or poll["errors"]:
                fig.notes.append(f"a steady poll refreshed or failed tables: {poll}")
    return fig


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m benchmarks.rest_polling CATALOG")
    replica(sys.argv[1])
