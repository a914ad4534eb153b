"""B42: a burst of ten times goal 1's sustained ingest rate (issue 31, "bad input and
faults"): batches arrive at 20,000 commits/s whatever the API answers (open loop, as
forwarders catching up after an outage would send them), each with an unknown table among
its items, and now and then a batch over the limit. Reported: whether items fail alone
(the unknown tables refused on their own items, the oversized batches refused whole with a
422, everything else committed exactly once, no 5xx) and whether the API stays responsive:
GET /healthz and /readyz probed every PROBE_EVERY seconds, before and during the burst.

Every table's pointer is moved first (one UPDATE: COMMITS commits already made), then the
notifications of those commits are posted in B25's batches (25 tables x 10 commits).
LAKEWARDEN_BENCH_B42_TABLES overrides the fleet's size.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
from sqlalchemy import Engine, create_engine, text

from benchmarks import data
from benchmarks.control_plane import RUN, _admin_token, _b7_aliases, _quantile, _runtime
from benchmarks.harness import Context, Figure, Stat, measuring
from benchmarks.ingest_rate import COMMITS_PER_FORWARD, SLICE, _more_files, _move_all
from lakewarden.states import OPEN_TASK_STATES
from services.api.app import serve_in_thread
from services.api.schemas import MAX_EVENT_BATCH

SUSTAINED = 2000  # goal 1's commits/s
BURST_RATE = 10 * SUSTAINED  # commits/s offered during the burst
COMMITS = 50  # commits per table in the burst (the synthetic files keep the newest 50)
OVERSIZED_EVERY = 50  # every 50th batch posted is one item over MAX_EVENT_BATCH
PROBE_EVERY = 0.1  # seconds between health probes
IDLE = 3.0  # seconds probed before the burst: the idle API's health latency


def _probe(url: str, stop: threading.Event, into: list[tuple[float, str, float, int]]) -> None:
    """GET /healthz, then /readyz, every PROBE_EVERY s until `stop`:
    (sent at, path, seconds, status); status 0 when the probe got no answer."""
    with httpx.Client(base_url=url, timeout=120) as client:
        while not stop.is_set():
            for path in ("/healthz", "/readyz"):
                sent = time.perf_counter()
                try:
                    status = client.get(path).status_code
                except httpx.HTTPError:
                    status = 0
                into.append((sent, path, time.perf_counter() - sent, status))
            stop.wait(PROBE_EVERY)


def _batches(
    refs: list[Any], files: list[str], snapshots: list[int]
) -> tuple[list[list[dict[str, Any]]], int]:
    """B25's batches (a slice of tables, COMMITS_PER_FORWARD commits each), interleaved
    so the tables' commits arrive oldest first, each with one unknown table, and every
    OVERSIZED_EVERY-th batch one item over the limit: (the batches, the oversized count)."""
    out: list[list[dict[str, Any]]] = []
    oversized = 0
    for start in range(0, len(files), COMMITS_PER_FORWARD):
        versions = range(start, min(len(files), start + COMMITS_PER_FORWARD))
        for s in range(0, len(refs), SLICE):
            events: list[dict[str, Any]] = [
                {
                    "namespace": ref.namespace,
                    "name": ref.name,
                    "snapshot_id": snapshots[v],
                    "metadata_location": files[v],
                }
                for ref in refs[s : s + SLICE]
                for v in versions
            ]
            events.insert(len(events) // 2, {"namespace": refs[0].namespace, "name": "no_such"})
            out.append(events)
            if len(out) % OVERSIZED_EVERY == 1:  # the first batch, then every 50th
                oversized += 1
                out.append((events * (MAX_EVENT_BATCH // len(events) + 1))[: MAX_EVENT_BATCH + 1])
    return out, oversized


def _stored(engine: Engine, ids: list[int], snapshots: list[int]) -> tuple[int, int, int]:
    """(events of the burst's commits stored, distinct (table, snapshot) among them, tables
    with two open tasks of one kind)."""
    with engine.connect() as conn:
        stored, distinct = conn.execute(
            text(
                "SELECT count(*), count(DISTINCT (table_id, snapshot_id)) FROM timeline_events "
                "WHERE table_id = ANY(:ids) AND snapshot_id = ANY(:snaps)"
            ),
            {"ids": ids, "snaps": snapshots},
        ).one()
        doubled = conn.execute(
            text(
                "SELECT count(*) FROM (SELECT 1 FROM tasks WHERE table_id = ANY(:ids) "
                "AND state = ANY(:open) GROUP BY table_id, kind HAVING count(*) > 1) x"
            ),
            {"ids": ids, "open": [str(s) for s in OPEN_TASK_STATES]},
        ).scalar_one()
    return int(stored), int(distinct), int(doubled)


def _repeat(ctx: Context, r: int) -> dict[str, Any]:
    api = _runtime(ctx.rt, mutations_per_minute=10**9)
    smoke = ctx.sizes.name == "smoke"
    tables = int(os.environ.get("LAKEWARDEN_BENCH_B42_TABLES", 40 if smoke else 1000))
    source = data.create(api.catalog, f"bench_b7.b42_{r}_{RUN}", data.Shape(2, 1, 10))
    files, snapshots = _more_files(source.metadata_location, COMMITS)
    aliases = _b7_aliases(api, source, tables, 420 + r)
    refs = [ref for ref, _ in aliases]
    ids = [tid for _, tid in aliases]
    movers = create_engine(api.engine.url)
    _move_all(movers, api.settings.catalog_name, refs, files[-1])  # the commits, made
    movers.dispose()
    batches, oversized = _batches(refs, files, snapshots)
    interval = SLICE * COMMITS_PER_FORWARD / BURST_RATE
    secret = _admin_token(api)
    answers: list[tuple[int, float, dict[str, Any] | None]] = []
    probes: list[tuple[float, str, float, int]] = []
    shed: list[int] = []  # a batch's 503s (retried)
    stop = threading.Event()
    limits = httpx.Limits(max_connections=len(batches) + 8, max_keepalive_connections=32)
    headers = {"Authorization": f"Bearer {secret}"}
    with (
        serve_in_thread(api) as url,
        httpx.Client(base_url=url, headers=headers, timeout=600, limits=limits) as client,
        ThreadPoolExecutor(len(batches)) as pool,
    ):
        prober = threading.Thread(target=_probe, args=(url, stop, probes), daemon=True)
        prober.start()
        time.sleep(IDLE)
        start = time.perf_counter()

        def post(k: int) -> None:
            """Batch k, sent when due and again after Retry-After while it is answered 503
            (no turn to ingest it: a forwarder's retry)."""
            due = start + k * interval
            try:
                while True:
                    resp = client.post("/api/v1/events/batch", json={"events": batches[k]})
                    if resp.status_code != 503 or "Retry-After" not in resp.headers:
                        break
                    shed.append(k)
                    time.sleep(float(resp.headers["Retry-After"]))
                body = resp.json() if resp.status_code == 202 else None
                answers.append((resp.status_code, time.perf_counter() - due, body))
            except httpx.HTTPError:
                answers.append((0, time.perf_counter() - due, None))

        for k in range(len(batches)):  # open loop: each batch sent when due
            time.sleep(max(0.0, start + k * interval - time.perf_counter()))
            pool.submit(post, k)
        sent = time.perf_counter() - start
        pool.shutdown(wait=True)
        drained = time.perf_counter() - start
        stop.set()
        prober.join(150)
    stored, distinct, doubled = _stored(api.engine, ids, snapshots)
    accepted = [b for s, _, b in answers if b is not None]
    during = [p for p in probes if start <= p[0] <= start + drained]
    idle = [p for p in probes if p[0] < start]

    def lat(rows: list[tuple[float, str, float, int]], path: str, q: float) -> float:
        return round(_quantile([x for _, p, x, _ in rows if p == path], q), 4)

    return {
        "tables": tables,
        "commits": tables * COMMITS,
        "batches": len(batches),
        "offered_per_s": tables * COMMITS / sent,
        "drained_s": drained,
        "rate": distinct / drained,
        "lost": tables * COMMITS - distinct,
        "duplicated": (stored - distinct) + doubled,
        "statuses": {str(s): sum(1 for x, _, _ in answers if x == s) for s, _, _ in answers},
        "oversized": oversized,
        "shed": len(shed),
        "items_failed": sum(b["failed"] for b in accepted),
        "unknown_items": len(batches) - oversized,
        "batch_p99": _quantile([w for _, w, _ in answers], 0.99),
        "health_idle_p99": lat(idle, "/healthz", 0.99),
        "health_p50": lat(during, "/healthz", 0.5),
        "health_p99": lat(during, "/healthz", 0.99),
        "health_max": lat(during, "/healthz", 1.0),
        "ready_idle_p99": lat(idle, "/readyz", 0.99),
        "ready_p50": lat(during, "/readyz", 0.5),
        "ready_p99": lat(during, "/readyz", 0.99),
        "probe_failures": sum(1 for p in during if p[3] != 200),
        "probes": sum(1 for p in during if p[1] == "/healthz"),
    }


def b42(ctx: Context) -> Figure:
    with measuring(
        "B42",
        f"a burst of 10x the sustained ingest rate ({BURST_RATE:,} commits/s offered, open "
        "loop) over 1,000 tables with bad items and oversized batches: GET /healthz p99 "
        "during the burst",
        "the same probes on the idle API just before the burst",
        "items fail alone (an unknown table on its item, an oversized batch a 422), the "
        "rest exactly once, no 5xx; /healthz p99 <= 1 s during the burst",
    ) as fig:
        runs = [_repeat(ctx, r) for r in range(ctx.repeats)]
        fig.ratio = Stat.of([m["health_p99"] for m in runs])
        fig.ratio_label = "GET /healthz p99 (s) during the burst"
        alone = all(
            m["statuses"].get("422", 0) == m["oversized"]
            and m["statuses"].get("202", 0) == m["batches"] - m["oversized"]
            and m["items_failed"] == m["unknown_items"]
            for m in runs
        )
        fig.goal_met = (
            alone
            and all(m["lost"] == m["duplicated"] == m["probe_failures"] == 0 for m in runs)
            and max(m["health_p99"] for m in runs) <= 1.0
        )
        m = runs[0]
        fig.values = {
            "tables": m["tables"],
            "commits_per_repeat": m["commits"],
            "batches_per_repeat": m["batches"],
            "offered_commits_per_s": Stat.of([round(x["offered_per_s"]) for x in runs]),
            "drained_s": Stat.of([round(x["drained_s"], 1) for x in runs]),
            "ingested_commits_per_s": Stat.of([round(x["rate"]) for x in runs]),
            "batch_statuses": [x["statuses"] for x in runs],
            "oversized_batches": sum(x["oversized"] for x in runs),
            "answers_503_retried": sum(x["shed"] for x in runs),
            "items_failed": sum(x["items_failed"] for x in runs),
            "unknown_table_items": sum(x["unknown_items"] for x in runs),
            "lost": sum(x["lost"] for x in runs),
            "duplicated": sum(x["duplicated"] for x in runs),
            "batch_answer_p99_s": Stat.of([round(x["batch_p99"], 2) for x in runs]),
            "healthz_idle_p99_s": Stat.of([x["health_idle_p99"] for x in runs]),
            "healthz_p50_s": Stat.of([x["health_p50"] for x in runs]),
            "healthz_p99_s": Stat.of([x["health_p99"] for x in runs]),
            "healthz_max_s": Stat.of([x["health_max"] for x in runs]),
            "readyz_idle_p99_s": Stat.of([x["ready_idle_p99"] for x in runs]),
            "readyz_p50_s": Stat.of([x["ready_p50"] for x in runs]),
            "readyz_p99_s": Stat.of([x["ready_p99"] for x in runs]),
            "probes_during_burst": sum(x["probes"] for x in runs),
            "probe_failures": sum(x["probe_failures"] for x in runs),
        }
        fig.notes = [
            f"{COMMITS} commits a table already made (pointers moved first), then their "
            f"notifications posted in batches of {SLICE} tables x {COMMITS_PER_FORWARD} "
            f"commits, one due every {SLICE * COMMITS_PER_FORWARD / BURST_RATE * 1000:.1f} "
            "ms whatever the answers (a thread per batch); each batch has one unknown table "
            f"among its items; every {OVERSIZED_EVERY}th batch is {MAX_EVENT_BATCH + 1} items",
            "drained_s: from the first batch sent to the last answered; ingested: the "
            "burst's distinct commits stored over that time; a batch answered 503 (no "
            "turn to ingest it) is sent again after its Retry-After, as a forwarder would; "
            "batch_answer_p99_s is from when it was due to its final answer",
            f"probes: GET /healthz then /readyz every {PROBE_EVERY} s on a connection of "
            f"their own, from {IDLE} s before the burst (idle) to the last answer (during)",
            "uvicorn serves in a thread of the benchmark process, beside the senders; "
            "LAKEWARDEN_BENCH_B42_TABLES sets the fleet's size",
        ]
    return fig
