"""B16: what post-rewrite validation (`lakewarden.spark.validation`) adds to a compaction.

One small-file table partitioned by day(ts) is compacted by lakewarden's job path (the
compaction kind's `plan` and `run` on the warm session, as B4) inside the two contexts
`execute.run_job` enters for the runner: the task's commit tags (`committing_as`: how
validation finds the job's commits) and the table's validation policy (`validating`:
`validation.enabled` on or off). The arms alternate, first one then the other, each
repeat from the same small-file snapshot (a rollback, as B4). The scheduler's bookkeeping
around a job is left out: B6 and B12 measure that.

Then the same at a wider table (more columns to checksum), fewer repeats.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from dataclasses import dataclass
from functools import partial
from typing import Any
from unittest import mock

from benchmarks import data
from benchmarks.harness import Context, Figure, Stat, jvm_cpu_seconds, measuring, timed
from benchmarks.rewrite import compact, rollback
from lakewarden.catalogs.catalog import TableRef
from lakewarden.policy.model import ValidationPolicy
from lakewarden.spark import actions, binpack, validation
from lakewarden.spark.commits import committing_as
from lakewarden.spark.validation import validating

REF = TableRef("bench", "validated")
WIDE = TableRef("bench", "validated_wide")


@dataclass(frozen=True)
class ValidationSizes:
    appends: int  # each one small file per day partition
    rows_per_append: int
    days: int  # partitions: an append's rows spread over this many days
    repeats: int  # pairs (validation on, off) on the base table
    extra_columns: int  # the wide table's, beyond the base's 7
    wide_repeats: int
    warm_up: bool  # an unmeasured pair first (the JIT, Spark's caches)


SIZES = {
    # ~1.5 M rows in 600 files of 2,500 rows, 30 partitions
    "full": ValidationSizes(20, 75_000, 30, 7, 21, 3, True),
    "smoke": ValidationSizes(2, 600, 2, 1, 3, 1, False),
}
_task_ids = itertools.count(1)


def _compaction(
    ctx: Context,
    ref: TableRef,
    enabled: bool,
    observed: bool = True,
    driver: bool = True,
    as_written: bool = True,
) -> tuple[float, dict[str, Any]]:
    """One timed compaction job with validation on or off; its metrics["validation"].
    `observed=False`: the validated job as it ran before issue 30's bin-pack runner
    (Iceberg's action, then validation reading the inputs again), for side-by-side runs.
    `driver=False`: small outputs read by a Spark job as before, not summed in the driver.
    `as_written=False`: an Arrow rewrite's outputs read by DuckDB after the commit, as
    before they were summed once closed (binpack.HASH_OUTPUTS)."""
    with (
        contextlib.nullcontext()
        if as_written
        else mock.patch.object(binpack, "HASH_OUTPUTS", False),
        committing_as(next(_task_ids), 1),
        validating(ValidationPolicy(enabled=enabled)),
        contextlib.nullcontext()
        if observed
        else mock.patch.object(actions, "_binpack", lambda *a, **k: None),
        contextlib.nullcontext()
        if driver
        else mock.patch.object(validation, "_driver_outputs", lambda *a, **k: {}),
    ):
        seconds, metrics = timed(lambda: compact(ctx, ref))
    check = metrics.get("validation") or {}
    expected = "passed" if enabled else "skipped"
    if check.get("status") != expected:
        raise RuntimeError(f"validation {check.get('status')}, expected {expected}: {check}")
    if enabled and check.get("inputs") != ("observed" if observed else "read"):
        raise RuntimeError(f"validation's inputs were {check.get('inputs')}: {check}")
    return seconds, metrics


def _pairs(ctx: Context, ref: TableRef, repeats: int, warm_up: bool) -> dict[str, Any]:
    """`repeats` pairs from the table's current (small-file) snapshot, the arms' order
    swapped every pair so drifting load and caches favour neither."""
    table = ctx.rt.catalog.load_table(ref.dotted)
    snap = table.current_snapshot()
    assert snap is not None
    small = snap.snapshot_id
    files = len(list(table.scan().plan_files()))
    _ = ctx.spark  # the session starts before the first timed job, not in it
    for enabled in (True, False) if warm_up else ():
        _compaction(ctx, ref, enabled)
        rollback(ctx, ref, small)
    on: list[float] = []
    off: list[float] = []
    checks: list[dict[str, Any]] = []
    added_files = 0
    left_out = 0
    for i in range(repeats):
        pair: dict[bool, tuple[float, dict[str, Any]]] = {}
        for enabled in (True, False) if i % 2 == 0 else (False, True):
            pair[enabled] = _compaction(ctx, ref, enabled)
            rollback(ctx, ref, small)
        # A file group whose commit lost Iceberg's retries is given up (failures_of): that
        # arm did less work, and the pair is not comparable.
        if any(m["rewritten_data_files"] < files for _, m in pair.values()):
            left_out += 1
            continue
        on.append(pair[True][0])
        off.append(pair[False][0])
        checks.append(pair[True][1]["validation"])
        added_files = pair[True][1]["added_data_files"]
    if not checks:
        raise RuntimeError(f"every pair of {repeats} left some files unrewritten")
    cost = [c["cost_seconds"] for c in checks]
    return {
        "input_files": files,
        "files_after": added_files,
        "rows": checks[-1]["rows"],
        "columns": len(checks[-1]["columns"]),
        "partitions_checked": checks[-1]["partitions_checked"],
        "with_validation_s": Stat.of(on),
        "without_validation_s": Stat.of(off),
        "ratio": Stat.of([a / b for a, b in zip(on, off, strict=True)]),
        # what validation added to the job, beside what it measured of itself
        "added_s": Stat.of([a - b for a, b in zip(on, off, strict=True)]),
        "validation_cost_s": Stat.of(cost),
        # per side: validation reads the touched partitions at both snapshots
        "rows_validated_per_s": Stat.of([c["rows"] / c["cost_seconds"] for c in checks]),
        "cost_share_of_compaction": Stat.of([c / t for c, t in zip(cost, on, strict=True)]),
        "pairs_with_without_cost_s": [list(p) for p in zip(on, off, cost, strict=True)],
        "pairs_left_out_unrewritten_groups": left_out,
    }


def b16(ctx: Context) -> Figure:
    sizes = SIZES[ctx.sizes.name]
    shape = data.Shape(sizes.appends, 1, sizes.rows_per_append)
    with measuring(
        "B16",
        f"a compaction job with post-rewrite validation on (row count + xxhash64 checksum "
        f"per touched partition): {shape.rows:,} rows in {sizes.appends * sizes.days} small files, "
        f"{sizes.days} day partitions, 7 columns; arms alternated",
        "the same compaction with validation.enabled: false, same input (a rollback)",
        "report",
    ) as fig:
        create = partial(
            data.create, ctx.rt.catalog, shape=shape, spec=data.BY_DAY, days=sizes.days
        )
        create(REF.dotted)
        base = _pairs(ctx, REF, sizes.repeats, sizes.warm_up)
        fig.ratio = base.pop("ratio")
        fig.ratio_label = "with / without validation, compaction wall time (per pair)"
        fig.values = base
        columns = 7 + sizes.extra_columns
        create(WIDE.dotted, extra_columns=sizes.extra_columns)
        fig.values[f"wide_{columns}_columns"] = _pairs(ctx, WIDE, sizes.wide_repeats, False)
        for ref in (REF, WIDE):  # the bench's warehouse keeps no figure's data
            ctx.rt.catalog.purge_table(ref.dotted)
        fig.notes.append(
            "validation_cost_s is metrics.validation.cost_seconds (one Spark job reading the "
            "touched partitions at the snapshot before and after); rows_validated_per_s "
            "counts the rows of one side, each read twice"
        )
    return fig


PHASE_TABLES = {  # B24's tables: B16's (day partitions) and B9's (issue 30's 300 files)
    "b16": TableRef("bench", "phases_b16"),
    "b9": TableRef("bench", "phases_b9"),
}


def _phases(ctx: Context, ref: TableRef, repeats: int) -> dict[str, Any]:
    """`repeats` pairs of one compaction job with validation on and one off, alternated,
    from the same small-file snapshot; the phases of the validated one (its metrics'
    `seconds`: staging branch, rewrite, validation's metadata and scans, publish, drop)."""
    table = ctx.rt.catalog.load_table(ref.dotted)
    snap = table.current_snapshot()
    assert snap is not None
    small = snap.snapshot_id
    _ = ctx.spark
    on: list[float] = []
    off: list[float] = []
    read: list[float] = []
    cpu: dict[str, list[float]] = {"on": [], "off": [], "read": [], "after": []}
    phases: dict[str, list[float]] = {}
    read_phases: dict[str, list[float]] = {}
    outputs: list[str] = []  # where the "on" arm's outputs were summed: driver or spark
    # validated (inputs observed, small outputs summed in the driver, an Arrow rewrite's as
    # written), unvalidated, inputs read, and validated with the outputs read after the
    # commit ("after": small ones by Spark, not the driver; an Arrow rewrite's by DuckDB)
    arms = ("on", "off", "read", "after")
    spark_read: list[float] = []
    for i in range(repeats):
        for arm in arms[i % 4 :] + arms[: i % 4]:
            enabled = arm != "off"
            # the Spark JVM's and this driver's (the Arrow path works in the driver's threads)
            used = jvm_cpu_seconds(ctx.spark) + time.process_time()
            seconds, metrics = _compaction(
                ctx,
                ref,
                enabled,
                observed=arm != "read",
                driver=arm != "after",
                as_written=arm != "after",
            )
            cpu.setdefault(arm, []).append(jvm_cpu_seconds(ctx.spark) + time.process_time() - used)
            rollback(ctx, ref, small)
            if arm == "off":
                off.append(seconds)
                continue
            if arm == "after":
                spark_read.append(seconds)
                continue
            if arm == "on":
                outputs.append(metrics["validation"]["outputs"])
            if arm == "read":
                read.append(seconds)
                for key, value in metrics["seconds"].items():
                    read_phases.setdefault(key, []).append(value)
                continue
            on.append(seconds)
            split = {
                **metrics["seconds"],
                **{f"validate_{k}": v for k, v in metrics["validation"]["seconds"].items()},
            }
            split["job_outside_phases"] = seconds - sum(metrics["seconds"].values())
            for key, value in split.items():
                phases.setdefault(key, []).append(value)
    return {
        "with_validation_s": Stat.of(on),
        "without_validation_s": Stat.of(off),
        "with_over_without": Stat.of([a / b for a, b in zip(on, off, strict=True)]),
        # the Spark JVM's and the Python driver's CPU seconds per job: steadier than wall
        # time on a loaded machine
        "cpu_with_s": Stat.of(cpu["on"]),
        "cpu_without_s": Stat.of(cpu["off"]),
        "cpu_with_over_without": Stat.of(
            [a / b for a, b in zip(cpu["on"], cpu["off"], strict=True)]
        ),
        # the validated job as before issue 30's runner: Iceberg's action, inputs read again
        "inputs_read_s": Stat.of(read),
        "inputs_read_over_without": Stat.of([a / b for a, b in zip(read, off, strict=True)]),
        "cpu_inputs_read_s": Stat.of(cpu["read"]),
        "cpu_inputs_read_over_without": Stat.of(
            [a / b for a, b in zip(cpu["read"], cpu["off"], strict=True)]
        ),
        "observed_over_inputs_read": Stat.of([a / b for a, b in zip(on, read, strict=True)]),
        "cpu_observed_over_inputs_read": Stat.of(
            [a / b for a, b in zip(cpu["on"], cpu["read"], strict=True)]
        ),
        # the validated job with its outputs read after the commit as before (by Spark, not
        # summed in the driver; an Arrow rewrite's by DuckDB, not summed as written)
        "outputs_read_after_s": Stat.of(spark_read),
        "outputs_read_after_over_without": Stat.of(
            [a / b for a, b in zip(spark_read, off, strict=True)]
        ),
        "outputs_read_after_added_s": Stat.of(
            [a - b for a, b in zip(spark_read, off, strict=True)]
        ),
        "added_s": Stat.of([a - b for a, b in zip(on, off, strict=True)]),
        "cpu_outputs_read_after_s": Stat.of(cpu["after"]),
        "on_over_outputs_read_after": Stat.of([a / b for a, b in zip(on, spark_read, strict=True)]),
        "outputs_summed_by": outputs,
        "inputs_read_phases_s": {k: Stat.of(v) for k, v in read_phases.items()},
        "phases_s": {k: Stat.of(v) for k, v in phases.items()},
        "overhead_over_rewrite": Stat.of(
            [t / r for t, r in zip(on, phases["rewrite"], strict=True)]
        ),
    }


def b24(ctx: Context) -> Figure:
    """Where a validated compaction's time goes (the write-audit-publish path: staging
    branch, rewrite, validation, publish), on B16's table and on B9's (issue 30's ~100 MB
    in 300 unpartitioned files; B4's 1 GB table is past validation.max_rows' default)."""
    sizes = SIZES[ctx.sizes.name]
    b16_shape = data.Shape(sizes.appends, 1, sizes.rows_per_append)
    b9_shape = data.Shape(
        ctx.sizes.peer_appends, ctx.sizes.peer_files_per_append, ctx.sizes.peer_rows_per_file
    )
    with measuring(
        "B24",
        "a validated compaction job's phases (staging branch, rewrite, validation's metadata "
        "and scans, publish, drop) on B16's table and B9's; with and without validation "
        "alternated",
        "the rewrite phase of the same job (Iceberg's action committing to the staging branch)",
        "report",
    ) as fig:
        data.create(
            ctx.rt.catalog,
            PHASE_TABLES["b16"].dotted,
            b16_shape,
            spec=data.BY_DAY,
            days=sizes.days,
        )
        data.create(ctx.rt.catalog, PHASE_TABLES["b9"].dotted, b9_shape)
        found = {name: _phases(ctx, ref, ctx.repeats) for name, ref in PHASE_TABLES.items()}
        fig.ratio = found["b16"]["overhead_over_rewrite"]
        fig.ratio_label = "validated job wall time / its rewrite phase (B16's table)"
        fig.values = found
        for ref in PHASE_TABLES.values():
            ctx.rt.catalog.purge_table(ref.dotted)
    return fig
