"""B4's arms side by side (issue 30): the compaction task (default policy, validation on)
against raw pyarrow, each task timed with its groups rewritten by Spark ("spark": the Arrow
path off) and by pyarrow where they qualify ("arrow": the default,
lakewarden.spark.arrow_rewrite), alternated in one process, on B4's table and on the
300-file one. Prints each pair and the medians.

    LAKEWARDEN_BENCH_DATABASE_URL=... LAKEWARDEN_DATA_DIR=... HC_N=3 \\
        python -m benchmarks.compaction_arms 300 b4
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from pathlib import Path
from typing import Any
from unittest import mock

from benchmarks import data, rewrite
from benchmarks.__main__ import _context
from benchmarks.harness import Context, Stat, timed
from lakewarden.catalogs.catalog import TableRef
from lakewarden.spark import arrow_rewrite

ARMS = ("spark", "arrow")


def _arm(arm: str) -> contextlib.AbstractContextManager[Any]:
    if arm == "arrow":
        return contextlib.nullcontext()
    return mock.patch.object(arrow_rewrite, "layout", lambda jvm, table: "the Spark arm")


def case(ctx: Context, ref: TableRef, small: int, paths: list[str], size: int, n: int) -> None:
    ratios: dict[str, list[float]] = {arm: [] for arm in ARMS}
    for arm in ARMS:  # unmeasured: the JIT, both paths
        with _arm(arm):
            rewrite.validated(ctx, ref)
        rewrite.rollback(ctx, ref, small)
    target = rewrite.POLICY.target_file_size_bytes
    with tempfile.TemporaryDirectory(dir=ctx.work_dir) as out:
        for i in range(n):
            for arm in ARMS if i % 2 == 0 else ARMS[::-1]:
                a, _ = timed(lambda: rewrite._pyarrow_rewrite(paths, Path(out), size, target))
                with _arm(arm):
                    s, m = timed(lambda: rewrite.validated(ctx, ref))
                rewrite.rollback(ctx, ref, small)
                v = m.get("validation") or {}
                ratios[arm].append(a / s)
                print(
                    f"{ref.dotted} {arm} pyarrow {a:.2f}s task {s:.2f}s ratio {a / s:.3f} "
                    f"phases {m.get('seconds')} validation {v.get('status')} "
                    f"files_after {m['added_data_files']} engine {m.get('engine')} "
                    f"load {os.getloadavg()[0]:.1f}",
                    flush=True,
                )
    for arm, values in ratios.items():
        st = Stat.of(values)
        print(f"SUMMARY {ref.dotted} {arm} {st.median:.3f} ±{st.spread:.0%} n={st.n}", flush=True)


def main(which: list[str]) -> None:
    ctx = _context(False)
    n = int(os.environ.get("HC_N", "3"))
    try:
        if "300" in which:
            case(ctx, rewrite.FILES_300, *rewrite._table_300(ctx), n)
        if "b4" in which:
            s = ctx.sizes
            shape = data.Shape(s.appends, s.files_per_append, s.rows_per_file)
            table = data.create(ctx.rt.catalog, rewrite.REF.dotted, shape)
            snap = table.current_snapshot()
            assert snap is not None
            files = [t.file for t in table.scan().plan_files()]
            paths = [f.file_path.removeprefix("file://") for f in files]
            size = sum(f.file_size_in_bytes for f in files)
            case(ctx, rewrite.REF, snap.snapshot_id, paths, size, n)
    finally:
        ctx.stop()


if __name__ == "__main__":
    main(sys.argv[1:] or ["300", "b4"])
