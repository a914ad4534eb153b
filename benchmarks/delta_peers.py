"""B38: lakewarden's Delta compaction task against delta-rs' own `optimize.compact()`
(issue 30, goal 2 for Delta: <= 1.5x the peer's wall time, rows and checksums equal, data
files no more than the peer's).

One table of `delta_rows` rows in `max(delta_files, 16)` small files (B27's writer,
delta-rs; at least `min_small_files`, so the default policy finds work), copied once per
run. lakewarden's side is what its compaction task does with the default policy
(`CompactionPolicy()`, validation on), without a JVM: the plan from the log
(`formats.delta.facts.read_facts`, `kinds.delta.compaction_and_purge`) and the job's
native rewrite (`formats.delta.native_rewrite.compact`: pyarrow's copy, DuckDB's check of
the written files against the inputs before the commit, delta-rs' commit); not the control
plane's bookkeeping (claim, dispatch, records: B44 end to end). The peer compacts its own
copy to the same target size. The two alternate in one process, so drifting load hits
both alike. Every copy is read back by delta-rs: rows and checksum equal to the template's.
(Until 2026-11-27 the task ran Spark's OPTIMIZE here: 1,074x at smoke size.)
"""

from __future__ import annotations

import shutil
import tempfile
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.delta_zorder import _add_actions, _digest, _write
from benchmarks.harness import Context, Figure, Stat, measuring, timed

MIN_FILES = 16  # above CompactionPolicy's min_small_files (12): the default policy acts
GOAL = 1.5
REPEATS = 5


def b38(ctx: Context) -> Figure:
    with measuring(
        "B38",
        "a Delta compaction: lakewarden's task (plan from the log, the native rewrite: "
        "pyarrow's copy, DuckDB's check before the commit, delta-rs' commit; default "
        "policy; no JVM) on one small-file table: wall time, data files, rows, checksum",
        "deltalake (delta-rs) optimize.compact() to the same target size on an identical "
        "copy, in the same run",
        f"lakewarden <= {GOAL}x delta-rs' time, rows and checksums equal, data files <= delta-rs'",
    ) as fig:
        sizes = ctx.sizes
        files = max(sizes.delta_files, MIN_FILES)
        work = Path(tempfile.mkdtemp(prefix="b38-", dir=ctx.work_dir))
        try:
            # no JVM: five pairs cost seconds, and one pair of milliseconds is noise
            _measure(fig, work, sizes.delta_rows, files, max(ctx.repeats, REPEATS))
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return fig


def _measure(fig: Figure, work: Path, rows: int, files: int, repeats: int) -> None:
    template = work / "template"
    fig.values["write_s"], _ = timed(lambda: _write(template, rows, files))
    names = ["warm", *(f"{side}_{i}" for i in range(repeats) for side in ("lw", "rs"))]
    for name in names:
        shutil.copytree(template, work / name)
    got = _alternate(work, repeats)
    expected = _digest(template)
    for name in names:
        found = _digest(work / name)
        if found != expected:
            raise AssertionError(f"{name}: rows/checksum {found} != the template's {expected}")
    lw_files = len(_add_actions(work / "lw_0"))
    rs_files = len(_add_actions(work / "rs_0"))
    ratio = Stat.of([a / b for a, b in zip(got["lw_s"], got["rs_s"], strict=True)])
    fig.values.update(
        rows=rows,
        files_before=files,
        bytes=sum(r["size_bytes"] for r in _add_actions(template)),
        target_file_size=got["target"],
        lakewarden={
            "task_s": Stat.of(got["lw_s"]),
            "plan_s": Stat.of(got["plan_s"]),
            "rewrite_s": Stat.of(got["rewrite_s"]),
            "engine_seconds": got["engine_seconds"],
            "first_run_s": got["first_s"],
            "validation": got["validation"],
            "data_files": lw_files,
        },
        rewrite_over_delta_rs=Stat.of(
            [a / b for a, b in zip(got["rewrite_s"], got["rs_s"], strict=True)]
        ),
        delta_rs={
            "version": got["deltalake"],
            "compact_s": Stat.of(got["rs_s"]),
            "open_s": Stat.of(got["rs_open_s"]),
        },
        # the peer as a user runs it: the table opened (its log read), then compacted
        task_over_delta_rs_open_and_compact=Stat.of(
            [
                a / (b + c)
                for a, b, c in zip(got["lw_s"], got["rs_s"], got["rs_open_s"], strict=True)
            ]
        ),
        delta_rs_data_files=rs_files,
        rows_and_checksums_equal=True,
    )
    fig.ratio = ratio
    fig.ratio_label = "lakewarden task (plan + native rewrite) / delta-rs optimize.compact() time"
    fig.goal_met = ratio.median <= GOAL and lw_files <= rs_files
    fig.notes.append(
        f"{repeats} alternated pairs in one process after one untimed lakewarden run "
        "(first_run_s: imports); validation is DuckDB reading the inputs and the written "
        "files, before the commit"
    )


def _alternate(work: Path, repeats: int) -> dict[str, Any]:
    """Both sides, alternated, in this process (no JVM on either)."""
    from importlib.metadata import version

    from deltalake import DeltaTable

    from lakewarden.formats.base import ATTEMPT_KEY, TASK_KEY
    from lakewarden.formats.delta.facts import read_facts
    from lakewarden.formats.delta.native_rewrite import compact
    from lakewarden.formats.delta.timeline import DeltaTimeline
    from lakewarden.kinds.delta import compaction_and_purge
    from lakewarden.policy.model import CompactionPolicy

    policy = CompactionPolicy()

    def plan(path: str) -> dict[str, Any]:
        """As the worker plans: the partitions due, the sizes."""
        facts = read_facts(
            DeltaTimeline(path),
            target_file_size=policy.target_file_size_bytes,
            small_file_ratio=policy.small_file_ratio,
        )
        verdict, packed, purged = compaction_and_purge(policy, facts)
        if not verdict.needed or packed is None:
            raise AssertionError(f"the default policy finds no compaction: {verdict.reason}")
        parts = [facts.partition_values[k] for k in packed] if facts.partition_columns else None
        return {
            "format": "delta",
            "path": path,
            "partitions": parts,
            "target_file_size_bytes": facts.target_file_size,
            "min_file_size_bytes": facts.small_file_threshold,
            "optimize": True,
            "purge_partitions": purged,
        }

    def lakewarden(name: str, task: int) -> dict[str, Any]:
        path = str(work / name)
        plan_s, planned = timed(partial(plan, path))
        mark = {TASK_KEY: str(task), ATTEMPT_KEY: "1"}
        rewrite_s, metrics = timed(partial(compact, path, planned, mark, lambda: None))
        if metrics["engine"]["engine"] != "arrow" or metrics["committed_version"] is None:
            raise AssertionError(f"{name}: not rewritten natively: {metrics}")
        if metrics["validation"]["status"] != "passed":
            raise AssertionError(f"{name}: validation {metrics['validation']}")
        return {"s": plan_s + rewrite_s, "plan_s": plan_s, "rewrite_s": rewrite_s, **metrics}

    first = lakewarden("warm", 1)
    out: dict[str, Any] = {k: [] for k in ("lw_s", "plan_s", "rewrite_s", "rs_s", "rs_open_s")}
    engine: list[dict[str, float]] = []
    for i in range(repeats):
        done = lakewarden(f"lw_{i}", 2 + i)
        out["lw_s"].append(done["s"])
        out["plan_s"].append(done["plan_s"])
        out["rewrite_s"].append(done["rewrite_s"])
        engine.append(done["engine"]["seconds"])
        opened, table = timed(partial(DeltaTable, str(work / f"rs_{i}")))
        seconds, _ = timed(
            partial(table.optimize.compact, target_size=policy.target_file_size_bytes)
        )
        out["rs_s"].append(seconds)
        out["rs_open_s"].append(opened)  # the task's time includes its reads of the log
    out.update(
        first_s=first["s"],
        engine_seconds={k: Stat.of([e.get(k, 0.0) for e in engine]) for k in engine[0]},
        target=policy.target_file_size_bytes,
        validation="passed",
        deltalake=version("deltalake"),
    )
    return out
