"""`make bench` / `python -m benchmarks`: every performance figure, one table of ratios.

    python -m benchmarks                  # full sizes (docs/performance.md), ~20 min on 2 cores
    python -m benchmarks --smoke          # tiny sizes: checks the harness, not the speed
                                          # (every figure but NOT_IN_SMOKE's)
    python -m benchmarks --only B1,B4     # some figures
    python -m benchmarks --out FILE.json  # where the JSON goes (default bench-results.json)

The benchmark gets its own embedded Postgres and warehouse under
`<LAKEWARDEN_DATA_DIR>/bench` (nothing of a user's is touched), unless
LAKEWARDEN_BENCH_DATABASE_URL names a database to use.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path

from benchmarks.harness import FULL, SMOKE, Context, Figure, machine, write_json

# id -> (module, function); a function returns one figure, or several from shared data.
FIGURES: dict[str, tuple[str, str]] = {
    "B1": ("benchmarks.rewrite", "b1_b4"),
    "B2": ("benchmarks.layout", "b2"),
    "B3": ("benchmarks.layout", "b3"),
    "B4": ("benchmarks.rewrite", "b1_b4"),
    "B5": ("benchmarks.control_plane", "b5"),
    "B6": ("benchmarks.rewrite", "b6"),
    "B7": ("benchmarks.control_plane", "b7"),
    "B8": ("benchmarks.control_plane", "b8"),
    "B9": ("benchmarks.peers", "b9"),
    "B10": ("benchmarks.fleet", "b10"),
    "B11": ("benchmarks.rest_polling", "b11"),
    "B12": ("benchmarks.dispatch", "b12"),
    "B13": ("benchmarks.applications", "b13"),
    "B14": ("benchmarks.cluster", "b14"),
    "B15": ("benchmarks.dashboard", "b15"),
    "B16": ("benchmarks.validation", "b16"),
    "B17": ("benchmarks.s3", "b17"),
    "B18": ("benchmarks.s3", "b18"),
    "B19": ("benchmarks.hdfs", "b19"),
    "B20": ("benchmarks.metastore", "b20"),
    "B21": ("benchmarks.yarn", "b21"),
    "B22": ("benchmarks.trino", "b22"),
    "B23": ("benchmarks.hudi_peers", "b23"),
    "B24": ("benchmarks.validation", "b24"),
    "B25": ("benchmarks.ingest_rate", "b25"),
    "B26": ("benchmarks.history", "b26"),
    "B27": ("benchmarks.delta_zorder", "b27"),
    "B29": ("benchmarks.history", "b29"),
    "B30": ("benchmarks.rest_polling", "b30"),
    "B35": ("benchmarks.capacity", "b35"),
    "B36": ("benchmarks.incremental", "b36"),
    "B37": ("benchmarks.elastic", "b37"),
    "B38": ("benchmarks.delta_peers", "b38"),
    "B39": ("benchmarks.incremental_logs", "b39"),
    "B40": ("benchmarks.incremental_logs", "b40"),
    "B41": ("benchmarks.evaluation_history", "b41"),
    "B42": ("benchmarks.ingest_burst", "b42"),
    "B43": ("benchmarks.trino", "b43"),
    "B44": ("benchmarks.warm_hosts", "b44_b45"),
    "B45": ("benchmarks.warm_hosts", "b44_b45"),
    "B46": ("benchmarks.digest_speed", "b46"),
}
# Left out of `--smoke` (the suite's check) unless named with --only: a figure whose smallest
# run costs minutes, and whose path a test of its own covers (B21: YARN's daemons and a
# session on YARN, ~2 min on 2 busy cores, tests/integration/test_yarn_spark.py; B22: Trino's
# start alone 10-25 s, tests/integration/test_trino_reads.py; B27: a Delta-family JVM of its
# own, ~1 min, whose OPTIMIZE and ZORDER tests/integration/test_delta_kinds.py runs; B37: two
# scheduler processes warmed one after the other and two drains, minutes on 2 busy cores,
# whose growth and shrink on real applications tests/integration/test_elastic_capacity.py
# checks; `--smoke --only B37` drains 12; B23 a Hudi-family JVM and a Flink JVM per standalone
# compaction, minutes, whose compaction of a version-6 table tests/integration/
# test_live_writer.py runs beside a Flink writer; B43 a Trino as B22, whose join plan the same
# Trino test file checks; B44/B45 a JVM per own application and a warm host per family,
# minutes, whose host tests/integration/test_family_hosts.py runs).
NOT_IN_SMOKE = {"B21", "B22", "B23", "B27", "B37", "B43", "B44", "B45"}


def _context(smoke: bool) -> Context:
    from lakewarden.db.migrate import migrate
    from lakewarden.runtime import make_runtime
    from lakewarden.settings import Settings

    base = Settings()
    work = base.data_dir / "bench"
    overrides: dict[str, object] = {"data_dir": work, "warehouse": None}
    url = os.environ.get("LAKEWARDEN_BENCH_DATABASE_URL")
    # a server of its own, beside (never inside) the user's embedded one
    overrides.update(database_url=url, embedded_pg_port=base.embedded_pg_port + 10)
    settings = base.model_copy(update=overrides)
    rt = make_runtime("bench", settings)
    migrate(rt)
    work.mkdir(parents=True, exist_ok=True)
    return Context(SMOKE if smoke else FULL, rt, work)


def run(ids: list[str], smoke: bool, out: Path) -> list[Figure]:
    ctx = _context(smoke)
    started = machine()
    figures: dict[str, Figure] = {}
    try:
        for fid in ids:
            if fid in figures:
                continue  # measured with another figure's data
            module, name = FIGURES[fid]
            fn: Callable[[Context], Figure | list[Figure]] = getattr(
                importlib.import_module(module), name
            )
            print(f"measuring {fid} ({module}.{name})...", file=sys.stderr, flush=True)
            result = fn(ctx)
            for fig in result if isinstance(result, list) else [result]:
                figures[fig.id] = fig
            write_json(out, ctx.sizes, started, [figures[i] for i in ids if i in figures])
    finally:
        ctx.stop()
    ordered = [figures[i] for i in ids if i in figures]
    write_json(out, ctx.sizes, started, ordered)
    return ordered


def table(figures: list[Figure], about: dict[str, object]) -> str:
    """The figures as a Markdown table (what docs/performance.md holds)."""
    rows = [
        "| id | measure | compared with | ratio (median, spread) | goal | met |",
        "|---|---|---|---|---|---|",
    ]
    for f in figures:
        if f.error:
            ratio, met = f"error: {f.error[:80]}", "-"
        elif f.ratio is None:
            ratio, met = "-", "-"
        else:
            ratio = f"{f.ratio.median:.3g} ({f.ratio_label}; ±{f.ratio.spread:.0%}, n={f.ratio.n})"
            met = {True: "yes", False: "**no**", None: "report"}[f.goal_met]
        rows.append(f"| {f.id} | {f.measure} | {f.compared_with} | {ratio} | {f.goal} | {met} |")
    rows.append("")
    rows.append(f"Machine: {about['cores']} cores, load average {about['load_avg']} at start.")
    return "\n".join(rows)


def chosen(only: str, smoke: bool) -> list[str]:
    """The figures `--only` names, else every one (less NOT_IN_SMOKE's with --smoke)."""
    ids = [i.strip().upper() for i in only.split(",") if i.strip()]
    return ids or [i for i in FIGURES if not (smoke and i in NOT_IN_SMOKE)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (the suite's check)")
    parser.add_argument("--only", default="", help="e.g. B1,B4 (default: every figure)")
    parser.add_argument("--out", type=Path, default=Path("bench-results.json"))
    args = parser.parse_args(argv)
    ids = chosen(args.only, args.smoke)
    unknown = [i for i in ids if i not in FIGURES]
    if unknown:
        parser.error(f"unknown figure(s) {', '.join(unknown)}; choose from {', '.join(FIGURES)}")
    logging.basicConfig(level=logging.WARNING)
    about = machine()
    figures = run(ids, args.smoke, args.out)
    print(table(figures, about))
    print(f"\nJSON: {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
