"""Issue 30 goal 3 on the Arrow path: a validated compaction task against the same task
unvalidated, on issue 30's 300 small files (1.92 M rows -> 1 file), with a third arm, the
validated task as before 2026-11-27's third change: the columns to checksum asked of Spark's
analyzer (`spark.table(name).schema`, twice a task: ~0.04 s of JVM CPU each), not read
from the Java table's schema. (Its second cut, no Spark job set up when every sum is
taken, is in both validated arms.) The arms rotate each repeat in one process, each task
from the small-file snapshot (a rollback), after an unmeasured round; wall time and CPU
(this driver's process, where the Arrow path works, plus the Spark JVM's). Prints each
task and the per-repeat ratios' medians.

    LAKEWARDEN_BENCH_DATABASE_URL=... LAKEWARDEN_DATA_DIR=... HC_N=10 \\
        python -m benchmarks.validation_arrow
"""

from __future__ import annotations

import contextlib
import itertools
import os
import time
from typing import Any
from unittest import mock

from benchmarks import rewrite
from benchmarks.__main__ import _context
from benchmarks.harness import Context, Stat, jvm_cpu_seconds, timed
from lakewarden.catalogs.catalog import TableRef
from lakewarden.policy.model import ValidationPolicy
from lakewarden.spark import validation
from lakewarden.spark.commits import committing_as
from lakewarden.spark.validation import validating

ARMS = ("on", "before", "off")  # validated; validated as before; not
_task_ids = itertools.count(50_000)


def _analyzed_columns(ctx: Context, ref: TableRef) -> Any:
    """`validation.chosen_columns` as before: the table's columns from Spark's analyzer."""
    from pyspark.sql.types import ArrayType, MapType, StructType

    def chosen(table: Any, policy: ValidationPolicy) -> list[str]:
        schema = ctx.spark.table(ref.spark_name(ctx.rt.settings.catalog_name)).schema
        fields = {f.name: f.dataType for f in schema.fields}
        if policy.columns:
            return list(policy.columns)
        nested = StructType | ArrayType | MapType
        return [n for n, t in fields.items() if not isinstance(t, nested)]

    return chosen


def _task(ctx: Context, ref: TableRef, arm: str) -> tuple[float, float, dict[str, Any]]:
    """One task: its wall seconds, CPU seconds and metrics."""
    before = contextlib.ExitStack()
    if arm == "before":
        before.enter_context(
            mock.patch.object(validation, "chosen_columns", _analyzed_columns(ctx, ref))
        )
    used = jvm_cpu_seconds(ctx.spark) + time.process_time()
    with (
        committing_as(next(_task_ids), 1),
        validating(ValidationPolicy(enabled=arm != "off")),
        before,
    ):
        seconds, metrics = timed(lambda: rewrite.compact(ctx, ref))
    return seconds, jvm_cpu_seconds(ctx.spark) + time.process_time() - used, metrics


def main() -> None:
    n = int(os.environ.get("HC_N", "5"))
    ctx = _context(False)
    try:
        small, _, _ = rewrite._table_300(ctx)
        ref = rewrite.FILES_300
        for arm in ARMS:  # unmeasured: the JIT, DuckDB's first load
            _task(ctx, ref, arm)
            rewrite.rollback(ctx, ref, small)
        wall: dict[str, list[float]] = {arm: [] for arm in ARMS}
        cpu: dict[str, list[float]] = {arm: [] for arm in ARMS}
        for i in range(n):
            for arm in ARMS[i % 3 :] + ARMS[: i % 3]:
                seconds, used, m = _task(ctx, ref, arm)
                rewrite.rollback(ctx, ref, small)
                wall[arm].append(seconds)
                cpu[arm].append(used)
                v = m.get("validation") or {}
                print(
                    f"{arm} {seconds:.3f}s cpu {used:.2f}s phases {m.get('seconds')} "
                    f"engine {m['engine'].get('seconds')} validation {v.get('status')} "
                    f"outputs {v.get('outputs')} {v.get('seconds')} "
                    f"load {os.getloadavg()[0]:.1f}",
                    flush=True,
                )
        for arm in ("on", "before"):
            w = Stat.of([a / b for a, b in zip(wall[arm], wall["off"], strict=True)])
            c = Stat.of([a / b for a, b in zip(cpu[arm], cpu["off"], strict=True)])
            print(
                f"SUMMARY {arm}/off wall {w.median:.3f} ±{w.spread:.0%} cpu {c.median:.3f} "
                f"±{c.spread:.0%} n={w.n}; medians {Stat.of(wall[arm]).median:.2f} s vs "
                f"{Stat.of(wall['off']).median:.2f} s",
                flush=True,
            )
    finally:
        ctx.stop()


if __name__ == "__main__":
    main()
