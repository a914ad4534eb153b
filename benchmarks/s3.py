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
from sqlalchemy import delete

from benchmarks import data
from benchmarks.harness import Context, Figure, Stat, measuring, timed
from benchmarks.rewrite import POLICY, REF, pyiceberg_scan, spark_queries
from benchmarks.s3_meter import S3Meter, metering
from benchmarks.s3_server import free_port, serve_s3
from lakewarden.catalogs.catalog import CatalogEntry, build_catalog
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


KINDS_CATALOG = "bench_s3_kinds"


def b18(ctx: Context) -> Figure:
    """Every kind on S3 against the same on local disk: B14's four small tables and
    policies (compaction, Z-order, TTL, clean), made in the default catalog (a local
    warehouse) and in a JDBC catalog whose warehouse is an S3Proxy bucket, planned by a
    worker, each kind's run timed on the warm session (no latency added: S3Proxy on
    loopback, so the figure is the S3 client path's own cost, not a network's)."""
    with (
        measuring(
            "B18",
            "each kind's job (compaction, Z-order, TTL, clean; B14's tables) on an S3 "
            "warehouse (S3Proxy on loopback) vs a local one: the kind's run on the warm session",
            "the same jobs on the same tables in a local warehouse",
            "report; every job passes on both",
        ) as fig,
        serve_s3(ctx.work_dir / "s3-kinds", free_port()) as server,
    ):
        from benchmarks.cluster import _clear, make_round, plan_round
        from lakewarden.db.models import Catalog as CatalogRow
        from lakewarden.db.session import transaction
        from lakewarden.spark.session import use_catalog

        secrets = ctx.rt.settings.secrets_path
        secrets.mkdir(parents=True, exist_ok=True)
        (secrets / SECRET_FILE).write_text(server.secret_key)
        os.environ[ACCESS_VAR], os.environ[URL_VAR] = server.access_key, ctx.rt.db_url
        properties = {
            "uri": {"env": URL_VAR},
            "warehouse": f"{server.bucket('kinds')}/wh",
            "s3.endpoint": server.endpoint,
            "s3.region": "us-east-1",
            "s3.access-key-id": {"env": ACCESS_VAR},
            "s3.secret-access-key": {"file": SECRET_FILE},
        }
        with transaction(ctx.rt.engine) as s:
            s.merge(CatalogRow(name=KINDS_CATALOG, type="jdbc", properties=properties, version=1))
        ctx.rt.catalogs.forget()
        entry = ctx.rt.catalogs.entry(KINDS_CATALOG)
        use_catalog(ctx.spark, entry)
        s3_client = build_catalog(entry)
        seconds: dict[str, dict[str, list[float]]] = {"local": {}, "s3": {}}
        try:
            for n in range(ctx.repeats + 1):  # the first round warms both paths: left out
                rounds = {
                    "local": make_round(ctx.rt, ctx, f"b18l{n}"),
                    "s3": make_round(ctx.rt, ctx, f"b18s{n}", s3_client, KINDS_CATALOG),
                }
                for where, tasks in rounds.items():
                    plan_round(ctx.rt, tasks)
                    for kind, task_id in tasks.items():
                        took = _run_planned(ctx, task_id)
                        if n:
                            seconds[where].setdefault(kind, []).append(took)
        finally:
            _clear(ctx.rt)
            with transaction(ctx.rt.engine) as s:
                s.execute(delete(CatalogRow).where(CatalogRow.name == KINDS_CATALOG))
        per_round = [
            sum(seconds["s3"][k][i] for k in seconds["s3"])
            / sum(seconds["local"][k][i] for k in seconds["local"])
            for i in range(ctx.repeats)
        ]
        fig.ratio = Stat.of(per_round)
        fig.ratio_label = "S3 / local time per round of jobs"
        fig.values = {
            "s3_s": {k: Stat.of(v) for k, v in seconds["s3"].items()},
            "local_s": {k: Stat.of(v) for k, v in seconds["local"].items()},
            "s3_over_local": {
                k: Stat.of(seconds["s3"][k]).median / Stat.of(seconds["local"][k]).median
                for k in seconds["s3"]
            },
            "s3proxy_start_s": server.started_in_s,
        }
        fig.goal_met = True  # every job ran (a failure raises, recorded as the error)
    return fig


def _run_planned(ctx: Context, task_id: int) -> float:
    """Seconds the planned task's kind took to run its plan on the warm session (the job
    a scheduler would dispatch, without its bookkeeping)."""
    from lakewarden.catalogs.catalog import TableRef
    from lakewarden.db.models import ManagedTable, Task
    from lakewarden.db.session import transaction
    from lakewarden.kinds import REGISTRY

    with transaction(ctx.rt.engine) as s:
        task = s.get(Task, task_id)
        row = s.get(ManagedTable, task.table_id) if task else None
        if task is None or row is None or not task.plan:
            raise RuntimeError(f"task {task_id} has no plan")
        kind, plan, catalog = task.kind, dict(task.plan), row.catalog
        ref = TableRef(row.namespace, row.name)
    took, _ = timed(lambda: REGISTRY[kind].run(ctx.spark, catalog, ref, plan))
    return took
