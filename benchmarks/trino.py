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
