"""B22: what compaction buys the seeds' reader. Trino (`lakewarden.spark.local_trino`, one
server on this machine) queries B1's small-file table through lakewarden's own JDBC catalog,
at its small-file snapshot and at the snapshot lakewarden's compaction job committed
(`FOR VERSION AS OF`: the same table, the same catalog, only the files differ). B1's two
queries: a selective one (the heaviest user key in one country) and a full scan (grouped by
category). Each pair is timed alternately, after one warm-up of each; the ratio is before
time / after time. Both snapshots must answer alike.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

from benchmarks import data
from benchmarks.harness import Context, Figure, measuring, ratios
from benchmarks.rewrite import SELECTIVE_USER, compact
from lakewarden.catalogs.catalog import TableRef
from lakewarden.spark.local_trino import Trino, local_trino

REF = TableRef("bench", "trino_clicks")
CATALOG = "lake"  # Trino's name for lakewarden's catalog
PASSWORD_ENV = "LW_BENCH_PG_PASSWORD"  # the server's environment: never in a query


def _queries(snapshot_id: int) -> dict[str, str]:
    at = f'{CATALOG}."{REF.namespace}"."{REF.name}" FOR VERSION AS OF {snapshot_id}'
    return {
        "selective": f"SELECT count(*), sum(amount) FROM {at} "
        f"WHERE user_id = {SELECTIVE_USER} AND country = 'de'",
        "full_scan": f"SELECT category, count(*), sum(amount) FROM {at} GROUP BY category "
        "ORDER BY category",
    }


def _add_catalog(trino: Trino, ctx: Context) -> None:
    url = make_url(ctx.rt.db_url)
    trino.add_iceberg_catalog(
        CATALOG,
        {
            "iceberg.catalog.type": "jdbc",
            "iceberg.jdbc-catalog.driver-class": "org.postgresql.Driver",
            "iceberg.jdbc-catalog.connection-url": (
                f"jdbc:postgresql://{url.host}:{url.port}/{url.database}"
            ),
            "iceberg.jdbc-catalog.connection-user": str(url.username),
            "iceberg.jdbc-catalog.connection-password": f"${{ENV:{PASSWORD_ENV}}}",
            "iceberg.jdbc-catalog.catalog-name": ctx.rt.settings.catalog_name,
            "iceberg.jdbc-catalog.default-warehouse-dir": str(ctx.rt.settings.warehouse_uri),
        },
    )


def _alike(first: list[list[Any]], then: list[list[Any]]) -> bool:
    """The same rows, a double's sum equal to 1e-12 of itself: its last bits vary with the
    order the files are read in (3.27e9 summed over 3,000 files or over 3 differs by 1e-4)."""
    return len(first) == len(then) and all(
        len(a) == len(b)
        and all(
            math.isclose(x, y, rel_tol=1e-12) if isinstance(x, float) else x == y
            for x, y in zip(a, b, strict=True)
        )
        for a, b in zip(first, then, strict=True)
    )


def b22(ctx: Context) -> Figure:
    with measuring(
        "B22",
        "Trino's query time on a small-file table, before vs after lakewarden's compaction "
        "(selective and full scan, through the same JDBC catalog)",
        "the same table before (its small-file snapshot)",
        "report; the same answers before and after",
    ) as fig:
        shape = data.Shape(ctx.sizes.appends, ctx.sizes.files_per_append, ctx.sizes.rows_per_file)
        table = data.create(ctx.rt.catalog, REF.dotted, shape)
        small = table.current_snapshot()
        assert small is not None
        files_before = sum(1 for _ in table.scan().plan_files())
        metrics = compact(ctx, REF)
        compacted = ctx.rt.catalog.load_table(REF.dotted).current_snapshot()
        assert compacted is not None and compacted.snapshot_id != small.snapshot_id
        password = make_url(ctx.rt.db_url).password or ""
        with local_trino(
            Path(ctx.work_dir) / "b22-trino", secrets={PASSWORD_ENV: str(password)}
        ) as trino:
            _add_catalog(trino, ctx)
            before, after = _queries(small.snapshot_id), _queries(compacted.snapshot_id)
            found: dict[str, Any] = {}
            for query in ("selective", "full_scan"):
                first, then = trino.query(before[query]), trino.query(after[query])  # warm-up
                if not _alike(first, then):
                    raise AssertionError(
                        f"{query}: {first[:3]}… before, {then[:3]}… after compaction"
                    )
                found[query] = ratios(
                    ctx.repeats,
                    lambda q=after[query]: trino.query(q),  # type: ignore[misc]
                    lambda q=before[query]: trino.query(q),  # type: ignore[misc]
                )
            start_s = trino.start_s
        fig.ratio = min((found[q]["speedup"] for q in found), key=lambda st: st.median)
        fig.ratio_label = "before time / after time (the lesser of the 2 queries)"
        fig.values = {
            "files_before": files_before,
            "files_after": metrics.get("added_data_files"),
            "rows": shape.rows,
            "trino_start_s": start_s,
            **found,
        }
        fig.notes.append(
            "Trino 476, one node (1 GB heap) on this machine; selective: user_id = heaviest "
            "key AND country = 'de'; full scan: group by category"
        )
    return fig


# B43: what the stats kind's sketches change for Trino. Two identical table pairs (a fact
# table and a dimension, the same rows written to both), one pair given statistics by
# lakewarden's stats job (Iceberg's compute_table_stats, Puffin NDV sketches), the other not.
FACT_ROWS = 2_000_000
DIM_KEYS = 200_000


def _join(fact: str, dim: str) -> str:
    at = f'{CATALOG}."{REF.namespace}"'
    return (
        f"SELECT d.grp, count(*), sum(f.amount) FROM {at}.{fact} f JOIN {at}.{dim} d "
        f"ON f.k = d.k WHERE d.grp < 5 GROUP BY d.grp ORDER BY d.grp"
    )


def _join_tables(ctx: Context) -> dict[str, Any]:
    """The pairs, written from the same arrow tables; the stats job run on one pair."""
    import random

    import pyarrow as pa

    from lakewarden.kinds import stats
    from lakewarden.policy.model import StatsPolicy

    rng = random.Random(43)
    keys = range(DIM_KEYS)
    dim = pa.table(
        {"k": pa.array(keys, pa.int64()), "grp": pa.array([k % 100 for k in keys], pa.int32())}
    )
    fact = pa.table(
        {
            "k": pa.array([rng.randrange(DIM_KEYS) for _ in range(FACT_ROWS)], pa.int64()),
            "amount": pa.array([rng.random() for _ in range(FACT_ROWS)], pa.float64()),
        }
    )
    catalog = ctx.rt.catalog
    catalog.create_namespace_if_not_exists(REF.namespace)
    for name, rows in [("b43_dim", dim), ("b43_fact", fact)]:
        for suffix in ("", "_plain"):
            ident = f"{REF.namespace}.{name}{suffix}"
            if catalog.table_exists(ident):
                catalog.purge_table(ident)
            catalog.create_table(ident, schema=rows.schema).append(rows)
        ref = TableRef(REF.namespace, name)
        outcome = stats.plan(StatsPolicy(enabled=True), catalog.load_table(ref.dotted), _now())
        assert outcome.plan is not None, outcome.reason
        stats.run(ctx.spark, ctx.rt.settings.catalog_name, ref, outcome.plan)
    return {"fact_rows": FACT_ROWS, "dim_keys": DIM_KEYS}


def _now() -> Any:
    from datetime import UTC, datetime

    return datetime.now(UTC)


def b43(ctx: Context) -> Figure:
    from lakewarden.spark.local_trino import estimated_rows

    with measuring(
        "B43",
        "Trino's join of a fact and a dimension table with the stats kind's statistics vs "
        "without (wall time; the join's estimated vs actual rows)",
        "the same rows in tables without statistics",
        "report",
    ) as fig:
        sizes = _join_tables(ctx)
        password = make_url(ctx.rt.db_url).password or ""
        with local_trino(
            Path(ctx.work_dir) / "b43-trino", secrets={PASSWORD_ENV: str(password)}
        ) as trino:
            _add_catalog(trino, ctx)
            informed, plain = _join("b43_fact", "b43_dim"), _join("b43_fact_plain", "b43_dim_plain")
            first, then = trino.query(informed), trino.query(plain)  # warm-up, and alike
            if not _alike(first, then):
                raise AssertionError(f"{first[:3]}… with statistics, {then[:3]}… without")
            actual = sum(r[1] for r in first)
            estimates = {
                side: estimated_rows(trino.query(f"EXPLAIN {q}")[0][0], "InnerJoin")
                for side, q in (("with", informed), ("without", plain))
            }
            ndv = {r[0]: r[2] for r in trino.query(f'SHOW STATS FOR {CATALOG}."bench".b43_fact')}[
                "k"
            ]
            # ~1 s a query: 5 pairs at the least, as one slow query moves a median of 3.
            repeats = max(ctx.repeats, 5)
            found = ratios(repeats, lambda: trino.query(informed), lambda: trino.query(plain))
        fig.ratio = found["speedup"]
        fig.ratio_label = "time without statistics / time with"
        fig.values = {
            **sizes,
            "join_rows_actual": actual,
            "join_rows_estimated_with": estimates["with"],
            "join_rows_estimated_without": estimates["without"],  # None: Trino shows `?`
            "fact_k_ndv_shown": ndv,
            **found,
        }
        fig.notes.append(
            "Trino 476, one node (1 GB heap); the join: fact.k = dim.k, dim.grp < 5, "
            "grouped by grp; statistics by lakewarden's stats job on one of two identical pairs"
        )
    return fig
