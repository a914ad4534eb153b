"""B25: sustained ingest over a fleet (issue 31's goal 1): commits/s through
POST /api/v1/events/batch over 1,000 tables, exactly once, and commit -> task latency.

Each of FORWARDERS client threads forwards the commits of its share of the tables, as a
catalog or engine forwarding its commit stream does: a slice of its tables commits
COMMITS_PER_FORWARD times (pointer moves to the next real metadata file, one UPDATE for the
slice: what JDBC-catalog commits do), then the slice's notifications go in one batch. The
latency of a commit is from its pointer move to the 202 of the batch reporting it (its event
and its task, or the decision why none, are committed then). The run's length is its rounds
(each table commits COMMITS_PER_FORWARD times a round): LAKEWARDEN_BENCH_B25_ROUNDS,
LAKEWARDEN_BENCH_B25_TABLES, LAKEWARDEN_BENCH_B25_SLICE (tables per batch) and
LAKEWARDEN_BENCH_B25_FORWARDERS override the sizes.

The source table's real metadata files give its first rounds; the rest are written as a
writer with snapshot expiry would write them (`_more_files`: one snapshot more each, the
newest KEEP_SNAPSHOTS kept), so a run can last as long as wanted (the issue's 10 minutes)
without its metadata files growing without bound.
"""

from __future__ import annotations

import gc
import json
import os
import threading
import time
import uuid
from array import array
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
from sqlalchemy import Engine, create_engine, text

from benchmarks import data
from benchmarks.control_plane import RUN, _admin_token, _b7_aliases, _quantile, _runtime
from benchmarks.harness import Context, Figure, Stat, measuring
from lakewarden.catalogs.catalog import TableRef
from lakewarden.events.listener import CommitListener
from lakewarden.runtime import Runtime
from lakewarden.states import OPEN_TASK_STATES
from services.api.app import freeze_startup_heap, serve_in_thread

FORWARDERS = int(os.environ.get("LAKEWARDEN_BENCH_B25_FORWARDERS", 4))
COMMITS_PER_FORWARD = 10  # a table's commits coalesced into one batch (B7's 10)
# Tables per batch: 25 is 250 events a batch. A commit's latency is its batch's length, so
# p99 <= 1 s wants short batches; at 100 (1,000 events, the endpoint's most) p99 was 6 s
# and the rate lower (docs/performance.md, B25).
SLICE = int(os.environ.get("LAKEWARDEN_BENCH_B25_SLICE", 25))
REAL_VERSIONS = 20  # metadata files written by real appends; the rest by _more_files
KEEP_SNAPSHOTS = 50  # the snapshots a synthetic metadata file keeps (expiry's)
# The JDBC listener's road measured too (LAKEWARDEN_BENCH_B25_LISTENER=0: the batch alone).
ROADS_LISTENER = os.environ.get("LAKEWARDEN_BENCH_B25_LISTENER", "1") != "0"
# The batch road (LAKEWARDEN_BENCH_B25_BATCH=0: the listener's alone, e.g. a 10-minute run).
ROADS_BATCH = os.environ.get("LAKEWARDEN_BENCH_B25_BATCH", "1") != "0"
# The listener road's writers commit as fast as they can (0: its most, and its latency with
# a backlog), or at this many commits/s in all (its latency at that rate: the goal's 2,000).
LISTENER_RATE = float(os.environ.get("LAKEWARDEN_BENCH_B25_LISTENER_RATE", 0))


def _sizes(ctx: Context) -> tuple[int, int]:
    """(tables, rounds): 1,000 tables and 2 rounds at full size, 40 and 1 in the smoke."""
    smoke = ctx.sizes.name == "smoke"
    tables = int(os.environ.get("LAKEWARDEN_BENCH_B25_TABLES", 40 if smoke else 1000))
    rounds = int(os.environ.get("LAKEWARDEN_BENCH_B25_ROUNDS", 1 if smoke else 2))
    return tables, rounds


def _more_files(last: str, count: int) -> tuple[list[str], list[int]]:
    """`count` metadata files after the one at `last` (a file:// URI), each committing one
    more snapshot on top of the one before (the last real snapshot's manifest list: the
    data is the same, the commit is new) and keeping the newest KEEP_SNAPSHOTS, as a
    writer whose snapshots are expired writes them. (their locations, their snapshot ids)"""
    path = last.removeprefix("file://")
    with open(path) as f:
        meta = json.load(f)
    folder = os.path.dirname(path)
    top = meta["snapshots"][-1]
    base = int(os.path.basename(path).split("-")[0])
    locations: list[str] = []
    ids: list[int] = []
    previous = last
    for n in range(1, count + 1):
        now = int(time.time() * 1000)
        snap_id = uuid.uuid4().int & ((1 << 62) - 1)
        seq = meta["last-sequence-number"] + 1
        snap = {
            **top,
            "snapshot-id": snap_id,
            "parent-snapshot-id": meta["current-snapshot-id"],
            "sequence-number": seq,
            "timestamp-ms": now,
        }
        meta["snapshots"] = [*meta["snapshots"], snap][-KEEP_SNAPSHOTS:]
        meta["snapshot-log"] = [
            *meta["snapshot-log"],
            {"snapshot-id": snap_id, "timestamp-ms": now},
        ][-KEEP_SNAPSHOTS:]
        meta["metadata-log"] = [
            *meta["metadata-log"],
            {"metadata-file": previous, "timestamp-ms": meta["last-updated-ms"]},
        ][-KEEP_SNAPSHOTS:]
        meta.update(
            {
                "current-snapshot-id": snap_id,
                "last-sequence-number": seq,
                "last-updated-ms": now,
                "refs": {"main": {"snapshot-id": snap_id, "type": "branch"}},
            }
        )
        name = f"{base + n:05d}-{uuid.uuid4()}.metadata.json"
        with open(os.path.join(folder, name), "w") as out:
            json.dump(meta, out)
        previous = f"file://{os.path.join(folder, name)}"
        locations.append(previous)
        ids.append(snap_id)
    return locations, ids


def _move_all(engine: Engine, catalog: str, refs: list[TableRef], location: str) -> None:
    """Commit to every table of `refs`: its pointer moved to `location`, in one statement."""
    with engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE iceberg_tables SET previous_metadata_location = metadata_location, "
                "metadata_location = :m FROM unnest(CAST(:n AS text[]), CAST(:t AS text[])) "
                "AS u(n, t) WHERE catalog_name = :c AND table_namespace = u.n "
                "AND table_name = u.t"
            ),
            {
                "m": location,
                "c": catalog,
                "n": [r.namespace for r in refs],
                "t": [r.name for r in refs],
            },
        )


def _forward(
    url: str,
    secret: str,
    movers: Engine,
    catalog: str,
    refs: list[TableRef],
    files: list[str],
    snapshots: list[int],
) -> dict[str, Any]:
    """One forwarder's work: every round, each slice of its tables commits
    COMMITS_PER_FORWARD times, then one batch reports them."""
    # What the run keeps is kept out of the garbage collector's reach (an array of floats, a
    # tuple of floats untracked once it survives a collection), so a 10-minute run's
    # millions of samples do not lengthen the process's full collections (the API's too).
    latencies = array("d")
    batches: list[tuple[float, int, tuple[float, ...]]] = []  # (answered at, new, latencies)
    # Where a batch's time goes: its commits' pointer moves (the coalescing window: the first
    # commit waits for the slice's other moves) and its POST (the gate, the ingest, HTTP).
    stages: list[tuple[float, float]] = []  # (first move -> POST sent, POST sent -> 202)
    new = failed = bad = posted = 0
    headers = {"Authorization": f"Bearer {secret}"}
    with httpx.Client(base_url=url, headers=headers, timeout=300) as client:
        for start in range(0, len(files), COMMITS_PER_FORWARD):
            versions = range(start, min(len(files), start + COMMITS_PER_FORWARD))
            for s in range(0, len(refs), SLICE):
                chunk = refs[s : s + SLICE]
                moved: list[float] = []
                for v in versions:
                    _move_all(movers, catalog, chunk, files[v])
                    moved.append(time.perf_counter())
                events = [
                    {
                        "namespace": ref.namespace,
                        "name": ref.name,
                        "snapshot_id": snapshots[v],
                        "metadata_location": files[v],
                    }
                    for ref in chunk
                    for v in versions
                ]
                sent = time.perf_counter()
                resp = client.post("/api/v1/events/batch", json={"events": events})
                done = time.perf_counter()
                stages.append((sent - moved[0], done - sent))
                posted += len(events)
                if resp.status_code != 202:
                    bad += 1
                    continue
                new += resp.json()["new_events"]
                failed += resp.json()["failed"]
                waited = tuple(done - at for _ in chunk for at in moved)
                latencies.extend(waited)
                batches.append((done, resp.json()["new_events"], waited))
    return {
        "latencies": latencies,
        "batches": batches,
        "stages": stages,
        "new": new,
        "failed": failed,
        "bad": bad,
        "posted": posted,
    }


def _by_minute(
    batches: list[tuple[float, int, tuple[float, ...]]],
    start: float,
    samples: list[tuple[float, ...]],
) -> list[dict[str, Any]]:
    """The run minute by minute (the last one partial): new commits/s, commit -> task p99,
    the 1-minute load average at its end and the CPU ms a commit cost (this process, which
    holds the API and the forwarders, and Postgres), so a rate that falls as history grows
    shows apart from one that falls as the machine gets busier."""
    minutes: dict[int, list[tuple[int, tuple[float, ...]]]] = {}
    for at, new, batch_waited in batches:
        minutes.setdefault(int((at - start) // 60), []).append((new, batch_waited))
    out = []
    for m in sorted(minutes):
        length = min(60.0, max(at for at, _, _ in batches) - start - 60 * m)
        waited = [w for _, ws in minutes[m] for w in ws]
        commits = sum(n for n, _ in minutes[m])
        inside = [x for x in samples if 60 * m <= x[0] - start <= 60 * (m + 1)]
        row: dict[str, Any] = {
            "minute": m + 1,
            "commits_per_s": round(commits / length, 1),
            "p99_s": round(_quantile(waited, 0.99), 3),
        }
        if len(inside) >= 2 and commits:
            first, last = inside[0], inside[-1]
            share = commits * (last[0] - first[0]) / length  # the commits between the samples
            row["load"] = round(last[1], 1)
            row["cpu_ms_per_commit"] = {
                "api_and_forwarders": round((last[2] - first[2]) * 1000 / share, 3),
                "postgres": round((last[3] - first[3]) * 1000 / share, 3),
            }
        out.append(row)
    return out


def _stages(stages: list[tuple[float, float]]) -> dict[str, float]:
    """p50/p99 (s) of a batch's two stages: its commits' moves (the first commit's wait
    before the batch is sent) and its POST (to the 202)."""
    moves = [m for m, _ in stages]
    posts = [p for _, p in stages]
    return {
        "moves_p50_s": round(_quantile(moves, 0.5), 3),
        "moves_p99_s": round(_quantile(moves, 0.99), 3),
        "post_p50_s": round(_quantile(posts, 0.5), 3),
        "post_p99_s": round(_quantile(posts, 0.99), 3),
    }


class _Pauses:
    """The garbage collector's full (generation 2) collections while in use: how many, the
    longest and their total (s). A full collection stops every thread of the process (the
    API, the listener, the forwarders): a candidate for the latency's tail."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self._began = 0.0

    def _note(self, phase: str, info: dict[str, int]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self._began = time.perf_counter()
        else:
            self.times.append(time.perf_counter() - self._began)

    def __enter__(self) -> _Pauses:
        gc.callbacks.append(self._note)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._note)

    def summary(self) -> dict[str, float]:
        return {
            "full_collections": len(self.times),
            "longest_s": round(max(self.times, default=0.0), 3),
            "total_s": round(sum(self.times), 3),
        }


def _postgres_cpu(engine: Engine) -> float:
    """CPU seconds used so far by the Postgres backends serving this database (read from
    /proc: the benchmark's server runs on this machine)."""
    with engine.connect() as conn:
        pids = conn.execute(
            text("SELECT pid FROM pg_stat_activity WHERE datname = current_database()")
        ).scalars()
        total = 0
        for pid in pids:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                total += int(fields[11]) + int(fields[12])  # utime, stime
            except (OSError, IndexError, ValueError):
                continue
    return total / os.sysconf("SC_CLK_TCK")


def _sample_load(engine: Engine, stop: threading.Event, into: list[tuple[float, ...]]) -> None:
    """Every 10 s until `stop`: (when, the 1-minute load average, this process's CPU
    seconds, its database's backends' CPU seconds). On a shared machine the rate follows
    the load; the CPU a commit costs does not, and grows if something grows with history."""
    while not stop.wait(10):
        into.append(
            (time.perf_counter(), os.getloadavg()[0], time.process_time(), _postgres_cpu(engine))
        )


def _counts(engine: Engine, table_ids: list[int]) -> tuple[int, int, int]:
    """(events stored, distinct (table, snapshot) among them, tables with two open tasks
    of one kind) of the tables."""
    with engine.connect() as conn:
        events, distinct = conn.execute(
            text(
                "SELECT count(*), count(DISTINCT (table_id, snapshot_id)) FROM timeline_events "
                "WHERE table_id = ANY(:ids)"
            ),
            {"ids": table_ids},
        ).one()
        doubled = conn.execute(
            text(
                "SELECT count(*) FROM (SELECT 1 FROM tasks WHERE table_id = ANY(:ids) "
                "AND state = ANY(:open) "
                "GROUP BY table_id, kind HAVING count(*) > 1) x"
            ),
            {"ids": table_ids, "open": [str(s) for s in OPEN_TASK_STATES]},
        ).scalar_one()
    return int(events), int(distinct), int(doubled)


def _listened(
    api: Runtime, aliases: list[tuple[TableRef, int]], files: list[str], snapshots: list[int]
) -> dict[str, Any]:
    """The JDBC listener's road: the same commits as `_forward`'s (FORWARDERS writers, each
    a slice of its tables COMMITS_PER_FORWARD times), nobody posting them: the catalog's
    trigger NOTIFYs each, the commit listener (`events.listener`, in this process as in the
    API's) ingests them. Done when every commit has its event; a commit's latency is from
    its pointer move's commit to its event's `received_at` (the ingesting transaction's
    start: short of its commit by that transaction's length, ~0.1-0.5 s a batch here)."""
    ids = [tid for _, tid in aliases]
    baseline = _counts(api.engine, ids)[0]
    movers = create_engine(api.engine.url, pool_size=FORWARDERS)
    catalog = api.settings.catalog_name
    shares = [[ref for ref, _ in aliases[k::FORWARDERS]] for k in range(FORWARDERS)]
    # When each commit's pointer moved (epoch s), by "name snapshot": str keys and float
    # values keep the dict out of the garbage collector's reach (tuple keys would not).
    moved: dict[str, float] = {}

    def commit(share: list[TableRef]) -> None:
        due = time.perf_counter()  # paced: when this writer's next commits are due
        for start in range(0, len(files), COMMITS_PER_FORWARD):
            versions = range(start, min(len(files), start + COMMITS_PER_FORWARD))
            for s in range(0, len(share), SLICE):
                chunk = share[s : s + SLICE]
                for v in versions:
                    if LISTENER_RATE:
                        due += len(chunk) * FORWARDERS / LISTENER_RATE
                        time.sleep(max(0.0, due - time.perf_counter()))
                    _move_all(movers, catalog, chunk, files[v])
                    at = time.time()
                    moved.update({f"{ref.name} {snapshots[v]}": at for ref in chunk})

    stop = threading.Event()
    listener = CommitListener(api, stop)
    listener.start()
    if not listener.connected.wait(600):
        raise RuntimeError("the commit listener did not connect")
    unique = len(aliases) * len(files)
    start = time.perf_counter()
    with _Pauses() as pauses:
        with ThreadPoolExecutor(FORWARDERS) as pool:
            list(pool.map(commit, shares))
        committed = time.perf_counter() - start  # the rest is the listener's backlog
        deadline = time.monotonic() + 600
        while _counts(api.engine, ids)[0] < baseline + unique and time.monotonic() < deadline:
            time.sleep(0.1)
    seconds = time.perf_counter() - start
    stop.set()
    listener.join(30)
    movers.dispose()
    stored, distinct, doubled = _counts(api.engine, ids)
    with api.engine.connect() as conn:
        received = conn.execute(
            text(
                "SELECT m.name, e.snapshot_id, e.received_at FROM timeline_events e "
                "JOIN managed_tables m ON m.id = e.table_id WHERE e.table_id = ANY(:ids)"
            ),
            {"ids": ids},
        ).all()
    latencies = [
        at.timestamp() - moved[f"{name} {snap}"]
        for name, snap, at in received
        if f"{name} {snap}" in moved
    ]
    return {
        "rate": unique / seconds,
        "seconds": seconds,
        "lost": max(0, unique - (distinct - baseline)),
        "duplicated": (stored - distinct) + doubled,
        "p50": _quantile(latencies, 0.5),
        "p99": _quantile(latencies, 0.99),
        "gc": pauses.summary(),
        "committed_s": committed,
    }


def _repeat(ctx: Context, r: int) -> dict[str, Any]:
    api = _runtime(ctx.rt, mutations_per_minute=10**9)
    tables, rounds = _sizes(ctx)
    versions = rounds * COMMITS_PER_FORWARD
    real = min(versions, REAL_VERSIONS)
    source = data.create(api.catalog, f"bench_b7.b25_{r}_{RUN}", data.Shape(real, 1, 10))
    files = [m.metadata_file for m in source.metadata.metadata_log[1:]]
    files.append(source.metadata_location)
    files = files[:real]
    snapshots = [s.snapshot_id for s in source.snapshots()]
    more, more_ids = _more_files(source.metadata_location, versions - real)
    files += more
    snapshots += more_ids
    if not ROADS_BATCH:
        freeze_startup_heap()  # as the API server's process, where the listener runs
        heard = _listened(api, _b7_aliases(api, source, tables, 300 + r), files, snapshots)
        return {"listener": heard, "commits": tables * versions}
    aliases = _b7_aliases(api, source, tables, 200 + r)
    ids = [tid for _, tid in aliases]
    baseline = _counts(api.engine, ids)[0]
    secret = _admin_token(api)
    movers = create_engine(api.engine.url, pool_size=FORWARDERS)
    shares = [[ref for ref, _ in aliases[k::FORWARDERS]] for k in range(FORWARDERS)]
    catalog = api.settings.catalog_name
    loads: list[tuple[float, ...]] = []
    stop = threading.Event()
    sampler = threading.Thread(target=_sample_load, args=(api.engine, stop, loads), daemon=True)
    # The heap frozen once the API starts, as the API server's (`services.api.app.main`):
    # the full collections then scan only what came since (the listener's road, after,
    # runs frozen too, as the listener in the API's process does).
    with serve_in_thread(api, freeze_heap=True) as url, _Pauses() as pauses:
        start = time.perf_counter()
        sampler.start()
        with ThreadPoolExecutor(FORWARDERS) as pool:
            results = list(
                pool.map(
                    lambda share: _forward(url, secret, movers, catalog, share, files, snapshots),
                    shares,
                )
            )
        seconds = time.perf_counter() - start
    stop.set()
    movers.dispose()
    stored, distinct, doubled = _counts(api.engine, ids)
    unique = tables * versions
    new = sum(x["new"] for x in results)
    latencies = [lat for x in results for lat in x["latencies"]]
    out = {
        "rate": unique / seconds,
        "seconds": seconds,
        "lost": max(0, unique - (distinct - baseline)),
        "duplicated": (stored - distinct) + abs(new - (stored - baseline)) + doubled,
        "refused": sum(x["failed"] + x["bad"] for x in results),
        "p50": _quantile(latencies, 0.5),
        "p99": _quantile(latencies, 0.99),
        "commits": unique,
        "minutes": _by_minute([b for x in results for b in x["batches"]], start, loads),
        "stages": _stages([st for x in results for st in x["stages"]]),
        "gc": pauses.summary(),
    }
    if ROADS_LISTENER:
        # Tables of their own, committed to from the same first state.
        listened = _listened(api, _b7_aliases(api, source, tables, 300 + r), files, snapshots)
        out["listener"] = listened
    return out


def _listener_only(fig: Figure, tables: int, rounds: int, heard: list[dict[str, Any]]) -> Figure:
    """The figure of a run of the listener's road alone (LAKEWARDEN_BENCH_B25_BATCH=0)."""
    fig.ratio = Stat.of([m["rate"] for m in heard])
    fig.ratio_label = "new commits ingested per second through the JDBC listener"
    fig.goal_met = all(
        m["rate"] >= 2000 and m["p99"] <= 1.0 and m["lost"] == m["duplicated"] == 0 for m in heard
    )
    fig.values = {
        "tables": tables,
        "rounds": rounds,
        "road": "listener only",
        "listener_offered_commits_per_s": LISTENER_RATE or "as fast as written",
        "listener_commits_per_s": Stat.of([round(m["rate"], 1) for m in heard]),
        "listener_seconds_per_repeat": Stat.of([round(m["seconds"], 1) for m in heard]),
        "listener_commits_took_s": round(heard[0]["committed_s"], 1),
        "lost": sum(m["lost"] for m in heard),
        "duplicated": sum(m["duplicated"] for m in heard),
        "listener_commit_to_event_p50_s": Stat.of([round(m["p50"], 3) for m in heard]),
        "listener_commit_to_event_p99_s": Stat.of([round(m["p99"], 3) for m in heard]),
        "listener_gc": heard[0]["gc"],
    }
    return fig


def b25(ctx: Context) -> Figure:
    with measuring(
        "B25",
        "sustained ingest over a fleet: new commits/s via POST /api/v1/events/batch over "
        "1,000 tables, exactly once, with commit -> task latency",
        "B7's figure before set-based ingest (53/s, docs/performance.md)",
        ">= 2,000 commits/s, 0 lost, 0 duplicated, commit -> task p99 <= 1 s",
    ) as fig:
        tables, rounds = _sizes(ctx)
        runs = [_repeat(ctx, r) for r in range(ctx.repeats)]
        if not ROADS_BATCH:
            return _listener_only(fig, tables, rounds, [m["listener"] for m in runs])
        fig.ratio = Stat.of([m["rate"] for m in runs])
        fig.ratio_label = "new commits ingested per second over the fleet"
        lost = sum(m["lost"] for m in runs)
        duplicated = sum(m["duplicated"] for m in runs)
        p99 = max(m["p99"] for m in runs)
        heard = [m["listener"] for m in runs if "listener" in m]
        if heard:
            lost += sum(m["lost"] for m in heard)
            duplicated += sum(m["duplicated"] for m in heard)
        fig.goal_met = (
            fig.ratio.median >= 2000
            and lost == duplicated == 0
            and p99 <= 1.0
            and all(m["rate"] >= 2000 and m["p99"] <= 1.0 for m in heard)
            and bool(heard)
        )
        fig.values = {
            "tables": tables,
            "rounds": rounds,
            "commits_per_repeat": runs[0]["commits"],
            "seconds_per_repeat": Stat.of([round(m["seconds"], 1) for m in runs]),
            "forwarders": FORWARDERS,
            "commits_per_table_per_batch": COMMITS_PER_FORWARD,
            "events_per_batch": SLICE * COMMITS_PER_FORWARD,
            "commits_per_s": Stat.of([round(m["rate"], 1) for m in runs]),
            "vs_b7_before": round(fig.ratio.median / 53.2, 1),
            "lost": lost,
            "duplicated": duplicated,
            "refused": sum(m["refused"] for m in runs),
            "commit_to_task_p50_s": Stat.of([round(m["p50"], 3) for m in runs]),
            "commit_to_task_p99_s": Stat.of([round(m["p99"], 3) for m in runs]),
        }
        fig.values["batch_stages"] = runs[0]["stages"]
        fig.values["batch_gc"] = runs[0]["gc"]
        if runs[0]["seconds"] >= 120:  # a sustained run: its first minutes against its last
            fig.values["by_minute"] = runs[0]["minutes"]
        if heard:
            fig.values.update(
                {
                    "listener_commits_per_s": Stat.of([round(m["rate"], 1) for m in heard]),
                    "listener_seconds_per_repeat": Stat.of([round(m["seconds"], 1) for m in heard]),
                    "listener_commit_to_event_p50_s": Stat.of([round(m["p50"], 3) for m in heard]),
                    "listener_commit_to_event_p99_s": Stat.of([round(m["p99"], 3) for m in heard]),
                    "listener_gc": heard[0]["gc"],
                    "listener_commits_took_s": round(heard[0]["committed_s"], 1),
                    "listener_offered_commits_per_s": LISTENER_RATE or "as fast as written",
                }
            )
        fig.notes = [
            f"{FORWARDERS} forwarder threads each report the commits of a quarter of the "
            f"tables: a slice of {SLICE} tables commits {COMMITS_PER_FORWARD} times (pointer "
            "moves to the next real metadata file, one UPDATE per commit for the slice: the "
            "writers' work, inside the timed loop), then one batch reports them "
            f"({SLICE * COMMITS_PER_FORWARD} events). Each table is read from the catalog "
            "once a batch",
            "latency: from a commit's pointer move to the 202 of the batch that reports it "
            "(its event, its task or the reason none was opened, committed then)",
            "lost: commits with no event; duplicated: events beyond one per (table, "
            "snapshot), answered new_events unequal to events stored, tables with two open "
            "tasks of a kind",
            "length: LAKEWARDEN_BENCH_B25_ROUNDS rounds (each table commits "
            f"{COMMITS_PER_FORWARD} times a round; the tables share one source table's "
            "metadata files, so a round needs 10 more of them) and LAKEWARDEN_BENCH_B25_TABLES",
            "vs_b7_before: the median over B7's batch figure measured before set-based "
            "ingest (53.2/s, 20 tables); the same B25 run on that code is in "
            "docs/performance.md",
            "uvicorn serves in a thread of the benchmark process, beside the forwarders",
            "listener_*: the same commits on tables of their own, nobody posting them: the "
            "catalog trigger's NOTIFY and the commit listener (in the benchmark process) "
            "ingest them; latency from a pointer move's commit to its event's received_at "
            "(the ingesting transaction's start). LAKEWARDEN_BENCH_B25_LISTENER=0 skips it; "
            "LAKEWARDEN_BENCH_B25_LISTENER_RATE paces its writers (commits/s in all)",
        ]
    return fig
