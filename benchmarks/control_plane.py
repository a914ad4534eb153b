"""The control plane's own figures (no Spark: tables are written by pyiceberg).

B5: commit -> task latency, on the trigger path (NOTIFY + LISTEN) and the poll path.
B7: commit events ingested through POST /api/v1/events/batch and POST /api/v1/events,
    exactly once.
B8: GET /api/v1/tables latency as the fleet grows.

The API is served by uvicorn in a thread of this process over real HTTP (loopback), so
the client threads share the server's interpreter: the rates are lower bounds.
"""

from __future__ import annotations

import dataclasses
import math
import random
import statistics
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table
from sqlalchemy import Connection, Engine, create_engine, text

from benchmarks import data
from benchmarks.harness import Context, Figure, Stat, measuring
from lakewarden import tables
from lakewarden.auth import tokens
from lakewarden.auth.grants import parse_grants
from lakewarden.catalogs.catalog import TableRef
from lakewarden.db.session import transaction
from lakewarden.events.listener import CommitListener
from lakewarden.events.poller import poll_once
from lakewarden.events.refresh import refresh_table
from lakewarden.process import Ticker
from lakewarden.runtime import Runtime
from lakewarden.states import OPEN_TASK_STATES, TaskState
from lakewarden.tasks.repo import transition
from services.api.app import serve_in_thread

POLL_INTERVAL_S = 2.0  # the bench's poller; peers poll every 60 s (modelled in the notes)
PEER_POLL_S = 60.0
CLIENT_THREADS = 8
# B7's batch pass: commits per table between two batches, and the most events in one batch
BATCH_COMMITS = 10
BATCH_MAX = 1000
# Managed rows are never deleted (unregistering retires them): names are new every run.
RUN = uuid.uuid4().hex[:6]


def _quantile(values: list[float], q: float) -> float:
    """Nearest-rank quantile (p99 of a few dozen samples is their maximum, honestly)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


def _runtime(rt: Runtime, **settings: Any) -> Runtime:
    """A runtime of its own on the same database (its own catalog object, like another
    process), with `settings` changed."""
    return dataclasses.replace(rt, settings=rt.settings.model_copy(update=settings), process_id="")


def _register(rt: Runtime, ref: TableRef, policy: dict[str, Any]) -> int:
    """Manage `ref` as POST /api/v1/tables does (straight in the database: no rate limit),
    its existing commits ingested as the baseline."""
    with transaction(rt.engine) as session:
        table_id = tables.add_table(session, rt.settings.catalog_name, ref, policy).id
    refresh_table(rt, rt.settings.catalog_name, ref, source="register")
    return table_id


def _cancel_open_tasks(rt: Runtime, table_id: int) -> None:
    """Free the (table, compaction) slot so the next commit creates a task again."""
    with transaction(rt.engine) as session:
        open_ids = session.execute(
            text("SELECT id FROM tasks WHERE table_id = :t AND state = ANY(:s)"),
            {"t": table_id, "s": [str(s) for s in OPEN_TASK_STATES]},
        ).scalars()
        for task_id in list(open_ids):
            transition(session, task_id, TaskState.CANCELLED, actor="bench", reason="bench")


def _admin_token(rt: Runtime) -> str:
    with transaction(rt.engine) as session:
        _, secret = tokens.issue(
            session,
            name="bench",
            owner="bench",
            grants=parse_grants(("admin",)),
            created_by="bench",
            expires_at=None,
        )
    return secret


# --- B5 ---------------------------------------------------------------------------------


def _time_commits(
    rt: Runtime, table: Table, table_id: int, commits: int, seed: int, jitter_s: float = 0.0
) -> tuple[list[float], list[float]]:
    """Seconds from just before each append to its task row being visible in Postgres
    (the event row and its task commit in one transaction), watched every 5 ms; and the
    seconds each append itself took. `jitter_s`: wait a random time up to this before each
    commit, so commits do not fall into step with a poller's period."""
    latencies, appends = [], []
    rng = random.Random(seed)
    with rt.engine.connect() as conn:
        for i in range(commits):
            _cancel_open_tasks(rt, table_id)
            time.sleep(rng.uniform(0, jitter_s))
            start = time.perf_counter()
            table.append(data.batch(seed + i, i * 10, 10))
            appends.append(time.perf_counter() - start)
            snapshot = table.current_snapshot()
            assert snapshot is not None
            while not _task_for(conn, table_id, snapshot.snapshot_id):
                if time.perf_counter() - start > 120:
                    raise TimeoutError(f"no task for snapshot {snapshot.snapshot_id} in 120 s")
                time.sleep(0.005)
            latencies.append(time.perf_counter() - start)
    return latencies, appends


def _task_for(conn: Connection, table_id: int, snapshot_id: int) -> bool:
    found = conn.execute(
        text("SELECT 1 FROM tasks WHERE table_id = :t AND (trigger->>'snapshot_id')::bigint = :s"),
        {"t": table_id, "s": snapshot_id},
    ).first()
    conn.rollback()  # a fresh snapshot of the database on the next look
    return found is not None


def _b5_table(rt: Runtime, writer: Runtime, name: str) -> tuple[Table, int]:
    """A table with 3 small files, managed with a policy under which every further
    commit calls for compaction (reducible files >= 2)."""
    ref = TableRef("bench_b5", f"{name}_{RUN}")
    table = data.create(writer.catalog, ref.dotted, data.Shape(3, 1, 10))
    policy = {"compaction": {"min_small_files": 2, "min_input_files": 2}}
    return table, _register(rt, ref, policy)


def b5(ctx: Context) -> Figure:
    with measuring(
        "B5",
        "commit -> task latency (pyiceberg append to task row), trigger path",
        f"the poll path at a {POLL_INTERVAL_S:g} s interval (peers: {PEER_POLL_S:g} s)",
        "trigger-path p99 <= 1 s",
    ) as fig:
        n = ctx.sizes.commits
        api, writer = _runtime(ctx.rt), _runtime(ctx.rt)  # the API process, and a writer
        trigger: list[float] = []
        poll: list[float] = []
        appends: list[float] = []
        p99s, ratios = [], []
        for r in range(ctx.repeats):
            stop = threading.Event()
            listener = CommitListener(api, stop)
            listener.start()
            try:
                if not listener.connected.wait(30):
                    raise RuntimeError("the commit listener did not connect")
                table, table_id = _b5_table(api, writer, f"trigger_{r}")
                t, a = _time_commits(api, table, table_id, n, seed=100 * r)
            finally:
                stop.set()
                listener.join(5)
            stop = threading.Event()
            table, table_id = _b5_table(api, writer, f"poll_{r}")
            Ticker("poller", POLL_INTERVAL_S, lambda: poll_once(api), stop).start()
            try:
                p, _ = _time_commits(
                    api, table, table_id, n, seed=100 * r + 50, jitter_s=POLL_INTERVAL_S
                )
            finally:
                stop.set()
            trigger += t
            appends += a
            poll += p
            p99s.append(_quantile(t, 0.99))
            ratios.append(statistics.median(p) / statistics.median(t))
        # Its tables' last open tasks are no other figure's to run: B12's scheduler ran one
        # before its own warm-up job, B14's worker planned them with its own.
        with ctx.rt.engine.begin() as conn:
            conn.execute(text("DELETE FROM managed_tables WHERE namespace = 'bench_b5'"))
        fig.ratio = Stat.of(p99s)
        fig.ratio_label = "trigger-path p99 commit -> task latency, seconds (per repeat)"
        fig.goal_met = fig.ratio.median <= 1.0
        fig.values = {
            "commits_per_path": len(trigger),
            "trigger_p50_s": round(_quantile(trigger, 0.5), 3),
            "trigger_p99_s": round(_quantile(trigger, 0.99), 3),
            "append_p50_s": round(_quantile(appends, 0.5), 3),
            "poll_p50_s": round(_quantile(poll, 0.5), 3),
            "poll_p99_s": round(_quantile(poll, 0.99), 3),
            "poll_over_trigger_p50": Stat.of(ratios),
            "poll_interval_s": POLL_INTERVAL_S,
            # A commit waits U(0, interval) for the next poll, plus the ingest itself.
            "peer_poll_60s_modelled_p50_s": round(PEER_POLL_S / 2 + _quantile(trigger, 0.5), 1),
            "peer_poll_60s_modelled_p99_s": round(0.99 * PEER_POLL_S + _quantile(trigger, 0.99), 1),
        }
        fig.notes = [
            "latency runs from just before table.append (so it includes pyiceberg writing "
            "the file and committing) to the task row being visible; the event row commits "
            "in the same transaction as its task",
            "append_p50_s is pyiceberg's own write and commit, part of each latency",
            "the poll path waits a random time up to the interval before each commit (so "
            "commits do not fall into step with the poller); the trigger path does not wait",
            "the listener and poller run as threads of this process on their own runtime "
            "(create_app starts the same ones); each commit's open task is cancelled first "
            "so that every commit creates a task",
            f"the poll path was measured at {POLL_INTERVAL_S:g} s; at the {PEER_POLL_S:g} s "
            "interval peers use, a commit waits U(0, 60 s) for the next poll: the "
            "peer_poll_60s values are that model plus the measured trigger-path ingest, not "
            "a measurement",
            "quantiles are nearest-rank: with few commits the p99 is the slowest commit",
        ]
    return fig


# --- B7 ---------------------------------------------------------------------------------


def _b7_aliases(rt: Runtime, source: Table, count: int, r: int) -> list[tuple[TableRef, int]]:
    """`count` managed tables that are catalog entries of `source`'s empty first version
    (register_table: one metadata file, many names), so each can be 'committed' to by
    moving its pointer to the next version, as any JDBC-catalog commit does."""
    catalog = rt.catalog
    assert isinstance(catalog, SqlCatalog)
    first = source.metadata.metadata_log[0].metadata_file
    out = []
    for i in range(count):
        ref = TableRef("bench_b7", f"t{i}_{r}_{RUN}")
        catalog.register_table(ref.dotted, first)
        out.append((ref, _register(rt, ref, {})))
    return out


def _post_all(url: str, secret: str, jobs: list[list[dict[str, Any]]]) -> tuple[float, int, int]:
    """Each job list posted in order by its own client thread: (seconds, events the
    server recorded as new, non-202 answers)."""

    def run(bodies: list[dict[str, Any]]) -> tuple[int, int]:
        new = bad = 0
        headers = {"Authorization": f"Bearer {secret}"}
        with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
            for body in bodies:
                move = body.pop("_move", None)
                if move is not None:
                    move()  # the commit this event reports
                resp = client.post("/api/v1/events", json=body)
                if resp.status_code == 202:
                    new += resp.json()["new_events"]
                else:
                    bad += 1
        return new, bad

    start = time.perf_counter()
    with ThreadPoolExecutor(len(jobs)) as pool:
        results = list(pool.map(run, jobs))
    return time.perf_counter() - start, sum(n for n, _ in results), sum(b for _, b in results)


def _post_batches(
    url: str, secret: str, jobs: list[list[list[dict[str, Any]]]]
) -> tuple[float, int, int, int]:
    """Each job (a list of batches) posted in order by its own client thread to
    POST /api/v1/events/batch: (seconds, events recorded as new, items refused, non-202
    answers)."""

    def run(batches: list[list[dict[str, Any]]]) -> tuple[int, int, int]:
        new = failed = bad = 0
        headers = {"Authorization": f"Bearer {secret}"}
        with httpx.Client(base_url=url, headers=headers, timeout=120) as client:
            for events in batches:
                resp = client.post("/api/v1/events/batch", json={"events": events})
                if resp.status_code == 202:
                    new += resp.json()["new_events"]
                    failed += resp.json()["failed"]
                else:
                    bad += 1
        return new, failed, bad

    start = time.perf_counter()
    with ThreadPoolExecutor(len(jobs)) as pool:
        results = list(pool.map(run, jobs))
    new, failed, bad = (sum(r[i] for r in results) for i in range(3))
    return time.perf_counter() - start, new, failed, bad


def _chunks(items: list[dict[str, Any]], size: int) -> list[list[dict[str, Any]]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def _stored(rt: Runtime, table_ids: list[int]) -> int:
    with rt.engine.connect() as conn:
        return int(
            conn.execute(
                text("SELECT count(*) FROM timeline_events WHERE table_id = ANY(:ids)"),
                {"ids": table_ids},
            ).scalar_one()
        )


def _b7_single(
    api: Runtime,
    aliases: list[tuple[TableRef, int]],
    movers: Engine,
    files: list[str],
    snapshots: list[int],
    secret: str,
    seed: int,
) -> dict[str, Any]:
    """One POST /api/v1/events per commit (each after its commit), then every commit
    posted again, shuffled: what each pass measured."""
    versions = len(files)
    jobs: list[list[dict[str, Any]]] = [[] for _ in range(CLIENT_THREADS)]
    for k, (ref, _) in enumerate(aliases):
        for v in range(versions):
            jobs[k % CLIENT_THREADS].append(
                {
                    "namespace": ref.namespace,
                    "name": ref.name,
                    "_move": _mover(movers, api.settings.catalog_name, ref, files[v]),
                }
            )
    with serve_in_thread(api) as url:
        seconds, new, bad = _post_all(url, secret, jobs)
        # Every event again, shuffled over the threads: duplicates arrive together.
        dups = [
            {"namespace": ref.namespace, "name": ref.name, "snapshot_id": s}
            for ref, _ in aliases
            for s in snapshots
        ]
        random.Random(seed).shuffle(dups)
        dup_seconds, dup_new, dup_bad = _post_all(
            url, secret, [dups[i::CLIENT_THREADS] for i in range(CLIENT_THREADS)]
        )
    unique = len(aliases) * versions
    stored = _stored(api, [tid for _, tid in aliases])
    return {
        "rate": unique / seconds,
        "dup_rate": len(dups) / dup_seconds,
        "lost": unique - min(stored, unique),
        "duplicated": max(0, stored - unique) + abs(new - stored) + dup_new,
        "exact": stored == unique == new and dup_new == 0 and bad == dup_bad == 0,
        "refused": bad + dup_bad,
    }


def _b7_batch(
    api: Runtime,
    aliases: list[tuple[TableRef, int]],
    movers: Engine,
    files: list[str],
    snapshots: list[int],
    secret: str,
    seed: int,
) -> dict[str, Any]:
    """The commits in rounds: each table commits BATCH_COMMITS times (the writers' work,
    not timed), then the client threads post the round's notifications, one batch per
    thread of the tables it forwards (timed). Then every notification again, shuffled,
    in batches of BATCH_MAX: what each pass measured."""
    versions = len(files)
    catalog = api.settings.catalog_name
    seconds = 0.0
    new = failed = bad = 0
    posted = 0
    with serve_in_thread(api) as url:
        for start in range(0, versions, BATCH_COMMITS):
            round_versions = range(start, min(versions, start + BATCH_COMMITS))
            jobs: list[list[dict[str, Any]]] = [[] for _ in range(CLIENT_THREADS)]
            for k, (ref, _) in enumerate(aliases):
                for v in round_versions:
                    _mover(movers, catalog, ref, files[v])()
                    jobs[k % CLIENT_THREADS].append(
                        {
                            "namespace": ref.namespace,
                            "name": ref.name,
                            "snapshot_id": snapshots[v],
                            "metadata_location": files[v],
                        }
                    )
            s, n, f, b = _post_batches(
                url, secret, [_chunks(job, BATCH_MAX) for job in jobs if job]
            )
            seconds, new, failed, bad = seconds + s, new + n, failed + f, bad + b
            posted += sum(len(job) for job in jobs)
        dups = [
            {
                "namespace": ref.namespace,
                "name": ref.name,
                "snapshot_id": snapshots[v],
                "metadata_location": files[v],
            }
            for ref, _ in aliases
            for v in range(versions)
        ]
        random.Random(seed).shuffle(dups)
        per_thread = [dups[i::CLIENT_THREADS] for i in range(CLIENT_THREADS)]
        dup_seconds, dup_new, dup_failed, dup_bad = _post_batches(
            url, secret, [_chunks(job, BATCH_MAX) for job in per_thread if job]
        )
    unique = len(aliases) * versions
    stored = _stored(api, [tid for _, tid in aliases])
    return {
        "rate": posted / seconds,
        "dup_rate": len(dups) / dup_seconds,
        "lost": unique - min(stored, unique),
        "duplicated": max(0, stored - unique) + abs(new - stored) + dup_new,
        "exact": stored == unique == new == posted and dup_new == 0,
        "refused": failed + dup_failed + bad + dup_bad,
    }


def b7(ctx: Context) -> Figure:
    with measuring(
        "B7",
        "commit events ingested via POST /api/v1/events/batch (exactly once), events/s; "
        "POST /api/v1/events (one commit per call) beside it",
        "the same events posted again (duplicates must record nothing), and one POST per commit",
        ">= 2,000 events/s",
    ) as fig:
        # The rate limiter would throttle one token to 300 changes a minute.
        api = _runtime(ctx.rt, mutations_per_minute=10**9)
        versions = min(50, max(5, ctx.sizes.events // 20))  # commits per table
        count = math.ceil(ctx.sizes.events / versions)
        source = data.create(api.catalog, f"bench_b7.source_{RUN}", data.Shape(versions, 1, 10))
        files = [m.metadata_file for m in source.metadata.metadata_log[1:]]
        files.append(source.metadata_location)
        files = files[:versions]  # one per append (not the last, property-only commit)
        snapshots = [s.snapshot_id for s in source.snapshots()]
        assert len(snapshots) == len(files) == versions
        secret = _admin_token(api)
        # The clients' commits use connections of their own, not the API's pool.
        movers = create_engine(api.engine.url, pool_size=CLIENT_THREADS)
        single: list[dict[str, Any]] = []
        batch: list[dict[str, Any]] = []
        for r in range(ctx.repeats):
            args = (movers, files, snapshots, secret, r)
            single.append(_b7_single(api, _b7_aliases(api, source, count, r), *args))
            batch.append(_b7_batch(api, _b7_aliases(api, source, count, 100 + r), *args))
        movers.dispose()
        exact = all(m["exact"] for m in single + batch)
        fig.ratio = Stat.of([m["rate"] for m in batch])
        fig.ratio_label = "new events ingested per second via POST /api/v1/events/batch"
        fig.goal_met = fig.ratio.median >= 2000 and exact
        fig.values = {
            "events_per_repeat": count * versions,
            "tables_per_repeat": count,
            "commits_per_table": versions,
            "client_threads": CLIENT_THREADS,
            "batch_commits_per_table": BATCH_COMMITS,
            "batch_events_per_s": Stat.of([round(m["rate"], 1) for m in batch]),
            "batch_duplicate_events_per_s": Stat.of([round(m["dup_rate"], 1) for m in batch]),
            "batch_lost": sum(m["lost"] for m in batch),
            "batch_duplicated": sum(m["duplicated"] for m in batch),
            "batch_refused": sum(m["refused"] for m in batch),
            "single_events_per_s": Stat.of([round(m["rate"], 1) for m in single]),
            "single_duplicate_posts_per_s": Stat.of([round(m["dup_rate"], 1) for m in single]),
            "single_lost": sum(m["lost"] for m in single),
            "single_duplicated": sum(m["duplicated"] for m in single),
            "single_refused": sum(m["refused"] for m in single),
            "exactly_once": exact,
        }
        fig.notes = [
            "headline: POST /api/v1/events/batch. The commits come in rounds: every table "
            f"commits {BATCH_COMMITS} times (pointer moves, not timed: the writers' work), "
            f"then {CLIENT_THREADS} client threads post the round's notifications (each with "
            "its snapshot_id and metadata_location), a thread forwarding the commits of its "
            f"tables in one batch (at most {BATCH_MAX} events); timed: the posting. A batch "
            "reads each of its tables from the catalog once, however many commits it reports",
            "single: one POST /api/v1/events per commit, as before: a commit is simulated "
            "by moving the table's iceberg_tables.metadata_location to its next real "
            "metadata file (what a JDBC-catalog commit does), one UPDATE per event, inside "
            "the timed loop: each POST then reads the table from the catalog, ingests exactly "
            "one new commit and evaluates its policy",
            "duplicates: every (table, snapshot) posted again, shuffled over "
            f"{CLIENT_THREADS} threads (single: one POST each; batch: batches of up to "
            f"{BATCH_MAX}): answered from the database alone (the snapshot is recorded), "
            "without reading the catalog",
            "lost: commits with no stored event; duplicated: stored events beyond the unique "
            "commits, plus any mismatch between new_events answered and events stored, plus "
            "new events answered by the duplicate pass; refused: non-202 answers and batch "
            "items refused. exactly_once: all of them 0 in both passes",
            "mutations_per_minute is raised to 10^9 for this figure (one token posts all "
            "events; the default 300/min would throttle it)",
            "uvicorn serves in a thread of the benchmark process (one process, one GIL, as "
            "one API replica), the clients share it: a lower bound on one replica's rate",
        ]
    return fig


def _mover(engine: Engine, catalog: str, ref: TableRef, location: str) -> Any:
    def move() -> None:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "UPDATE iceberg_tables SET previous_metadata_location = metadata_location, "
                    "metadata_location = :m WHERE catalog_name = :c AND table_namespace = :n "
                    "AND table_name = :t"
                ),
                {"m": location, "c": catalog, "n": ref.namespace, "t": ref.name},
            )

    return move


# --- B8 ---------------------------------------------------------------------------------

FLEET_NS = "bench_fleet"
REQUESTS = 40  # per fleet size: half first pages, half deep pages


def b8(ctx: Context) -> Figure:
    with measuring(
        "B8",
        "GET /api/v1/tables latency (first and deep keyset pages) by fleet size",
        "the same requests on smaller fleets",
        "p99 <= 200 ms at 100k tables",
    ) as fig:
        rt = ctx.rt
        secret = _admin_token(rt)
        per_size: dict[str, Any] = {}
        p99s: list[float] = []  # per repeat, at the size measured last (the largest)
        try:
            with (
                serve_in_thread(rt) as url,
                httpx.Client(
                    base_url=url, headers={"Authorization": f"Bearer {secret}"}, timeout=60
                ) as client,
            ):
                have = 0
                for size in sorted(ctx.sizes.fleet):
                    with rt.engine.begin() as conn:
                        # Rows only: a listing reads managed_tables, not the catalog.
                        conn.execute(
                            text(
                                "INSERT INTO managed_tables (catalog, namespace, name, policy) "
                                "SELECT :c, :ns, 't' || g, '{}'::jsonb "
                                "FROM generate_series(CAST(:a AS int), CAST(:b AS int)) g"
                            ),
                            {
                                "c": rt.settings.catalog_name,
                                "ns": FLEET_NS,
                                "a": have + 1,
                                "b": size,
                            },
                        )
                        conn.execute(text("ANALYZE managed_tables"))
                        deep = conn.execute(
                            text(
                                "SELECT id FROM managed_tables WHERE namespace = :ns "
                                "ORDER BY id DESC OFFSET 100 LIMIT 1"
                            ),
                            {"ns": FLEET_NS},
                        ).scalar()
                    have = size
                    first_s, deep_s, p99s = [], [], []
                    for _ in range(ctx.repeats):
                        batch = []
                        for _ in range(REQUESTS // 2):
                            first_s.append(_get(client, {}))
                            deep_s.append(_get(client, {"cursor": deep}))
                            batch += [first_s[-1], deep_s[-1]]
                        p99s.append(_quantile(batch, 0.99))
                    both = first_s + deep_s
                    per_size[f"{size}_tables"] = {
                        "p50_ms": round(1000 * _quantile(both, 0.5), 1),
                        "p99_ms": round(1000 * _quantile(both, 0.99), 1),
                        "first_page_p50_ms": round(1000 * _quantile(first_s, 0.5), 1),
                        "deep_page_p50_ms": round(1000 * _quantile(deep_s, 0.5), 1),
                    }
        finally:
            with rt.engine.begin() as conn:
                conn.execute(
                    text("DELETE FROM managed_tables WHERE namespace = :ns"), {"ns": FLEET_NS}
                )
        largest = max(ctx.sizes.fleet)
        fig.ratio = Stat.of(p99s)
        fig.ratio_label = f"p99 GET /api/v1/tables at {largest} tables, seconds"
        fig.goal_met = fig.ratio.median <= 0.2 if largest >= 100_000 else None
        fig.values = {
            "requests_per_size": REQUESTS * ctx.repeats,
            "page_size_rows": 50,
            **per_size,
        }
        fig.notes = [
            "managed_tables rows are bulk-inserted in SQL (one INSERT ... SELECT "
            "generate_series); the requests go through the real app over HTTP as an admin",
            "deep page: the cursor 100 rows before the end of the fleet (keyset, no offset)",
            f"quantiles are nearest-rank over {REQUESTS} sequential requests per size and "
            "repeat (the headline: p99 per repeat at the largest size); the goal is judged "
            "only when the largest size is 100k",
        ]
    return fig


def _get(client: httpx.Client, params: dict[str, Any]) -> float:
    start = time.perf_counter()
    resp = client.get("/api/v1/tables", params=params)
    elapsed = time.perf_counter() - start
    resp.raise_for_status()
    return elapsed
