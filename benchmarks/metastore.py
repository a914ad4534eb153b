"""B20, a Hive catalog's commits (issue 26): commit -> task latency through the Hive
Metastore's notification log, against the JDBC catalog's trigger path (B5's measure).

A real metastore (`lakewarden.spark.local_metastore`: Hive 2.3.9 from PySpark's jars,
DbNotificationListener) on a database of its own on the bench's Postgres. Both paths time
the same thing as B5 (`_time_commits`): from just before a pyiceberg append (through
HiveCatalog, or the JDBC catalog) to the task row being visible, on a table of 3 small files
managed under a policy that makes every commit a compaction task. The hive path's follower
is `follow_due` on a Ticker every FOLLOW_TICK_S, as an API replica runs it; the trigger
path's is the CommitListener.

    python -m benchmarks --only B20
"""

from __future__ import annotations

import statistics
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pyiceberg.catalog.hive import HiveCatalog
from pyiceberg.table import Table
from sqlalchemy import text

from benchmarks import data
from benchmarks.control_plane import _b5_table, _quantile, _runtime, _time_commits
from benchmarks.harness import Context, Figure, Stat, measuring
from lakewarden import tables
from lakewarden.catalogs.catalog import TableRef
from lakewarden.db.models import Catalog as CatalogRow
from lakewarden.db.session import resolve_migration_url, transaction
from lakewarden.events.listener import CommitListener
from lakewarden.events.metastore import FOLLOW_TICK_S, follow_due
from lakewarden.events.refresh import refresh_table
from lakewarden.process import Ticker
from lakewarden.runtime import Runtime
from lakewarden.spark.local_metastore import hive_metastore

RUN = uuid.uuid4().hex[:6]
CATALOG = f"bench_hive_{RUN}"
POLICY = {"compaction": {"min_small_files": 2, "min_input_files": 2}}


@contextmanager
def _hive(ctx: Context) -> Iterator[HiveCatalog]:
    """The metastore, registered as CATALOG; a writer's HiveCatalog of it."""
    work = ctx.work_dir / f"metastore-{RUN}"
    warehouse = (work / "warehouse").as_uri()
    # As the schema's owner: the services' role may not create databases.
    owner = resolve_migration_url(ctx.rt.settings)
    with hive_metastore(owner, warehouse, work, f"lw_bench_hms_{RUN}") as ms:
        # Hive 2's column types (B5's table has a timestamptz column: Hive 3's "timestamp
        # with local time zone" is an error to Hive 2.3)
        properties = {"uri": ms.uri, "warehouse": warehouse, "hive.hive2-compatible": "true"}
        with transaction(ctx.rt.engine) as s:
            s.add(CatalogRow(name=CATALOG, type="hive", properties=properties, version=1))
        try:
            yield HiveCatalog("writer", **properties)
        finally:
            with ctx.rt.engine.begin() as conn:
                conn.execute(text("DELETE FROM catalogs WHERE name = :c"), {"c": CATALOG})
                conn.execute(text("DELETE FROM catalog_polls WHERE catalog = :c"), {"c": CATALOG})


def _hive_table(rt: Runtime, writer: HiveCatalog, name: str) -> tuple[Table, int]:
    """B5's table (3 small files, every further commit a task) in the Hive catalog."""
    ref = TableRef(f"bench_b19_{RUN}", name)
    table = data.create(writer, ref.dotted, data.Shape(3, 1, 10))
    with transaction(rt.engine) as session:
        table_id = tables.add_table(session, CATALOG, ref, POLICY).id
    refresh_table(rt, CATALOG, ref, source="register")
    return table, table_id


def b20(ctx: Context) -> Figure:
    with measuring(
        "B20",
        "commit -> task latency through a Hive Metastore's notification log (pyiceberg "
        "append through HiveCatalog to task row)",
        "the JDBC catalog's trigger path (NOTIFY + LISTEN, B5's measure)",
        "notification-log p99 <= 2 s",
    ) as fig:
        n = ctx.sizes.commits
        api, writer = _runtime(ctx.rt), _runtime(ctx.rt)  # the API process, and a writer
        hive: list[float] = []
        trigger: list[float] = []
        hive_appends: list[float] = []
        trigger_appends: list[float] = []
        p99s, ratios = [], []
        with _hive(ctx) as hive_writer:
            for r in range(ctx.repeats):
                stop = threading.Event()
                follow_due(api)  # the cursor starts at the log's newest event
                Ticker("metastore", FOLLOW_TICK_S, lambda: follow_due(api), stop).start()
                try:
                    table, table_id = _hive_table(api, hive_writer, f"hive_{r}")
                    h, ha = _time_commits(api, table, table_id, n, seed=100 * r)
                finally:
                    stop.set()
                stop = threading.Event()
                listener = CommitListener(api, stop)
                listener.start()
                try:
                    if not listener.connected.wait(30):
                        raise RuntimeError("the commit listener did not connect")
                    table, table_id = _b5_table(api, writer, f"b19_trigger_{r}_{RUN}")
                    t, ta = _time_commits(api, table, table_id, n, seed=100 * r + 50)
                finally:
                    stop.set()
                    listener.join(5)
                hive += h
                hive_appends += ha
                trigger += t
                trigger_appends += ta
                p99s.append(_quantile(h, 0.99))
                ratios.append(statistics.median(h) / statistics.median(t))
        fig.ratio = Stat.of(p99s)
        fig.ratio_label = "notification-log p99 commit -> task latency, seconds (per repeat)"
        fig.goal_met = fig.ratio.median <= 2.0
        values: dict[str, Any] = {
            "commits_per_path": len(hive),
            "hive_p50_s": round(_quantile(hive, 0.5), 3),
            "hive_p99_s": round(_quantile(hive, 0.99), 3),
            "hive_append_p50_s": round(_quantile(hive_appends, 0.5), 3),
            "trigger_p50_s": round(_quantile(trigger, 0.5), 3),
            "trigger_p99_s": round(_quantile(trigger, 0.99), 3),
            "trigger_append_p50_s": round(_quantile(trigger_appends, 0.5), 3),
            "hive_over_trigger_p50": Stat.of(ratios),
            "follow_tick_s": FOLLOW_TICK_S,
        }
        fig.values = values
        fig.notes = [
            "latency runs from just before table.append (so it includes pyiceberg writing "
            "the file and committing: through the metastore's lock and alter_table on the "
            "hive path) to the task row being visible; *_append_p50_s is that write alone",
            f"the hive path waits for the next follow (every {FOLLOW_TICK_S:g} s: U(0, "
            f"{FOLLOW_TICK_S:g} s)), then reads the log and loads the one table; the "
            "trigger path is woken by NOTIFY",
            "the metastore is Hive 2.3.9's from PySpark's jars on the bench's Postgres; "
            "each commit's open task is cancelled first so that every commit creates a task",
            "quantiles are nearest-rank: with few commits the p99 is the slowest commit",
        ]
    return fig
