"""B17: B1 on S3, where small files really cost. The same queries as B1 (a selective one and
a full scan, in Spark SQL and in pyiceberg) on a table in an S3 bucket, before and after
lakewarden's compaction: the requests each makes (GET, HEAD, LIST), the bytes it reads,
and its time with 20 ms added to every request.

The bucket is S3Proxy's (benchmarks/s3_server.py, on a directory); every client reaches it
through the meter (benchmarks/s3_meter.py), an HTTP proxy that counts each request and,
for the timed runs, holds it `LATENCY_S` before forwarding it: the round trip to a real
object store that a server on loopback lacks. The catalog is a JDBC one in the benchmark's
database with the bucket as its warehouse, its keys given by reference as an operator
would; the table is written straight to S3Proxy (not counted), read through the meter.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from pyiceberg.catalog import Catalog

from benchmarks import data
from benchmarks.harness import Context, Figure, Stat, measuring, timed
from benchmarks.rewrite import POLICY, REF, pyiceberg_scan, spark_queries
from benchmarks.s3_meter import S3Meter, metering
from benchmarks.s3_server import free_port, serve_s3
from lakewarden.catalog import CatalogEntry, build_catalog
from lakewarden.kinds import compaction
from lakewarden.secret_refs import RefRules

LATENCY_S = 0.020
CATALOG = "bench_s3"
ACCESS_VAR, URL_VAR = "LW_SECRET_BENCH_S3_ACCESS", "LW_SECRET_BENCH_S3_URL"
SECRET_FILE = "bench-s3"


def b17(ctx: Context) -> Figure:
    with (
        measuring(
            "B17",
            "B1 on S3: a query's requests, bytes and time with 20 ms per request, before vs "
            "after compaction",
            "the same table before (its small-file snapshot)",
            "report",
        ) as fig,
        serve_s3(ctx.work_dir / "s3", free_port()) as server,
        metering(server.endpoint) as meter,
    ):
        fig.values = _measure(ctx, server, meter, fig)
        fig.values["s3proxy_start_s"] = server.started_in_s
    return fig


def _measure(ctx: Context, server: Any, meter: S3Meter, fig: Figure) -> dict[str, Any]:
    secrets = ctx.rt.settings.secrets_path
    secrets.mkdir(parents=True, exist_ok=True)
    (secrets / SECRET_FILE).write_text(server.secret_key)
    os.environ[ACCESS_VAR], os.environ[URL_VAR] = server.access_key, ctx.rt.db_url
    entry = CatalogEntry(
        CATALOG,
        "jdbc",
        {
            "uri": {"env": URL_VAR},
            "warehouse": f"{server.bucket('bench')}/wh",
            "s3.endpoint": meter.endpoint,
            "s3.region": "us-east-1",
            "s3.access-key-id": {"env": ACCESS_VAR},
            "s3.secret-access-key": {"file": SECRET_FILE},
        },
        refs=RefRules.of(ctx.rt.settings),
    )
    direct = replace(entry, properties={**entry.properties, "s3.endpoint": server.endpoint})
    reader, writer = build_catalog(entry), build_catalog(direct)
    # Files of B9's peer table (300 in 10 appends at full size): the full B1 table (3,000)
    # times 20 ms per request would take an hour; the smoke run's is tiny.
    s = ctx.sizes
    shape = data.Shape(s.peer_appends, s.peer_files_per_append, s.peer_rows_per_file)
    table = data.create(writer, REF.dotted, shape)
    small = table.current_snapshot().snapshot_id  # type: ignore[union-attr]
    files_before = sum(1 for _ in table.scan().plan_files())

    from lakewarden.spark.session import use_catalog

    use_catalog(ctx.spark, entry)
    outcome = compaction.plan(POLICY, reader.load_table(REF.dotted), datetime.now(UTC))
    if outcome.plan is None:
        raise RuntimeError(f"lakewarden planned nothing: {outcome.reason}")
    meter.reset()
    seconds, _ = timed(lambda: compaction.run(ctx.spark, CATALOG, REF, outcome.plan or {}))
    compaction_counts = meter.reset().as_dict()
    compacted = reader.load_table(REF.dotted)
    after = compacted.current_snapshot().snapshot_id  # type: ignore[union-attr]
    files_after = sum(1 for _ in compacted.scan().plan_files())

    snapshots = {"before": small, "after": after}
    runs = {
        f"{engine}_{query}": {
            when: _query(ctx, meter, _runner(ctx, reader, engine, query, snap))
            for when, snap in snapshots.items()
        }
        for engine in ("spark", "pyiceberg")
        for query in ("selective", "full_scan")
    }
    speedups = {
        name: r["before"]["seconds_20ms"].median / r["after"]["seconds_20ms"].median
        for name, r in runs.items()
    }
    worst = min(speedups, key=lambda k: speedups[k])
    fig.ratio = Stat.of([speedups[worst]])
    fig.ratio_label = f"before / after time at 20 ms per request (the least of 4: {worst})"
    fig.notes.append(
        "requests counted and 20 ms added per request by an HTTP proxy in front of S3Proxy "
        "(benchmarks/s3_meter.py); LIST is a GET of a bucket"
    )
    return {
        "files_before": files_before,
        "files_after": files_after,
        "rows": shape.rows,
        "compaction_s": round(seconds, 2),
        "compaction_requests": compaction_counts,
        "speedup_20ms": speedups,
        **runs,
    }


def _runner(
    ctx: Context, reader: Catalog, engine: str, query: str, snapshot: int
) -> Callable[[], Any]:
    if engine == "spark":
        sql = spark_queries(ctx, snapshot, CATALOG)[query]
        return lambda: ctx.spark.sql(sql).collect()
    return lambda: pyiceberg_scan(ctx, snapshot, query == "selective", reader)


def _query(ctx: Context, meter: S3Meter, run: Callable[[], Any]) -> dict[str, Any]:
    """One query's requests and bytes (one run), and its time without and with latency."""
    meter.latency_s = 0.0
    meter.reset()
    run()
    counts = meter.reset().as_dict()
    plain = [timed(run)[0] for _ in range(ctx.repeats)]
    meter.latency_s = LATENCY_S
    try:
        slow = [timed(run)[0] for _ in range(ctx.repeats)]
    finally:
        meter.latency_s = 0.0
    meter.reset()
    return {**counts, "seconds": Stat.of(plain), "seconds_20ms": Stat.of(slow)}
