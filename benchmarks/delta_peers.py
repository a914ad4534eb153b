"""B38: lakewarden's Delta compaction task against delta-rs' own `optimize.compact()`
(issue 30, goal 2 for Delta: <= 1.5x the peer's wall time, rows and checksums equal, data
files no more than the peer's).

One table of `delta_rows` rows in `max(delta_files, 16)` small files (B27's writer,
delta-rs; at least `min_small_files`, so the default policy finds work), copied once per
run. lakewarden's side is what its compaction task does with the default policy
(`CompactionPolicy()`, validation on), on a warm Delta-family session: the plan from the
log (`formats.delta.facts.read_facts`, `kinds.delta.compaction_and_purge`: no JVM), the
job's `OPTIMIZE` in a marked session at the policy's sizes (`formats.delta.jobs`), and its
validation (`jobs.delta.validate`: rows and checksum by delta-rs at the version before
and the commit); not the control plane's bookkeeping (claim, dispatch, records: B12). The
peer compacts its own copy to the same target size. The two alternate in one process, so
drifting load hits both alike: a child process (`python -m benchmarks.delta_peers SPEC`),
the benchmark's own Spark session being Iceberg's and a process holding one SparkContext.
Every copy is read back by delta-rs: rows and checksum equal to the template's.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.delta_zorder import _add_actions, _digest, _write
from benchmarks.harness import Context, Figure, Stat, measuring, timed

MIN_FILES = 16  # above CompactionPolicy's min_small_files (12): the default policy acts
GOAL = 1.5


def b38(ctx: Context) -> Figure:
    with measuring(
        "B38",
        "a Delta compaction: lakewarden's task (plan from the log, OPTIMIZE on a warm "
        "Delta-family session, validation by delta-rs; default policy) on one small-file "
        "table: wall time, data files, rows, checksum",
        "deltalake (delta-rs) optimize.compact() to the same target size on an identical "
        "copy, in the same run",
        f"lakewarden <= {GOAL}x delta-rs' time, rows and checksums equal, data files <= delta-rs'",
    ) as fig:
        sizes = ctx.sizes
        files = max(sizes.delta_files, MIN_FILES)
        work = Path(tempfile.mkdtemp(prefix="b38-", dir=ctx.work_dir))
        try:
            _measure(fig, work, sizes.delta_rows, files, ctx.repeats)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return fig


def _measure(fig: Figure, work: Path, rows: int, files: int, repeats: int) -> None:
    template = work / "template"
    fig.values["write_s"], _ = timed(lambda: _write(template, rows, files))
    names = ["warm", *(f"{side}_{i}" for i in range(repeats) for side in ("lw", "rs"))]
    for name in names:
        shutil.copytree(template, work / name)
    spec = {"work": str(work), "repeats": repeats, "data_dir": str(work / "spark")}
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.delta_peers", json.dumps(spec)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    got = json.loads(out.strip().splitlines()[-1])
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
            "optimize_s": Stat.of(got["optimize_s"]),
            "validation_s": Stat.of(got["validation_s"]),
            "first_run_s": got["first_s"],
            "validation": got["validation"],
            "data_files": lw_files,
        },
        delta_rs={"version": got["deltalake"], "compact_s": Stat.of(got["rs_s"])},
        delta_rs_data_files=rs_files,
        rows_and_checksums_equal=True,
    )
    fig.ratio = ratio
    fig.ratio_label = "lakewarden task / delta-rs optimize.compact() time"
    fig.goal_met = ratio.median <= GOAL and lw_files <= rs_files
    fig.notes.append(
        f"{repeats} alternated pairs in one process after one untimed lakewarden run (the "
        "JVM's first OPTIMIZE loads Delta's classes: first_run_s); validation is delta-rs "
        "reading every row twice, in Python"
    )


def _child(spec: dict[str, Any]) -> dict[str, Any]:
    """Both sides, alternated, in one Delta-family process."""
    from importlib.metadata import version

    from deltalake import DeltaTable

    from lakewarden.formats.delta import jobs
    from lakewarden.formats.delta.facts import read_facts
    from lakewarden.formats.delta.timeline import DeltaTimeline
    from lakewarden.jobs.delta import validate
    from lakewarden.kinds.delta import compaction_and_purge
    from lakewarden.policy.model import CompactionPolicy
    from lakewarden.settings import Settings
    from lakewarden.spark.session import build_session

    spark = build_session(
        Settings(data_dir=Path(spec["data_dir"])),
        "postgresql://bench@127.0.0.1:1/none",
        "b38",
        family="delta",
    )
    policy = CompactionPolicy()
    work = Path(spec["work"])

    def plan(path: str) -> dict[str, Any]:
        """As the worker plans: the partitions due, the sizes."""
        timeline = DeltaTimeline(path)
        facts = read_facts(
            timeline,
            target_file_size=policy.target_file_size_bytes,
            small_file_ratio=policy.small_file_ratio,
        )
        verdict, packed, _ = compaction_and_purge(policy, facts)
        if not verdict.needed or packed is None:
            raise AssertionError(f"the default policy finds no compaction: {verdict.reason}")
        parts = [facts.partition_values[k] for k in packed] if facts.partition_columns else None
        conf = {
            jobs.MAX_FILE_SIZE: str(facts.target_file_size),
            jobs.MIN_FILE_SIZE: str(facts.small_file_threshold),
        }
        return {"partitions": parts, "conf": conf}

    def lakewarden(name: str, task: int) -> dict[str, Any]:
        path = str(work / name)
        plan_s, planned = timed(partial(plan, path))
        session = jobs.marked_session(spark, task, 1, planned["conf"])
        optimize_s, _ = timed(partial(jobs.optimize, session, path, planned["partitions"]))
        committed = DeltaTimeline(path).find_job_commits(task)
        if committed is None:
            raise AssertionError(f"{name}: OPTIMIZE committed nothing")
        validation_s, checked = timed(partial(validate, path, int(committed.id)))
        if checked["status"] != "passed":
            raise AssertionError(f"{name}: validation {checked}")
        total = plan_s + optimize_s + validation_s
        return {"s": total, "plan_s": plan_s, "optimize_s": optimize_s, "v_s": validation_s}

    first = lakewarden("warm", 1)
    out: dict[str, Any] = {k: [] for k in ("lw_s", "plan_s", "optimize_s", "validation_s")}
    out["rs_s"] = []
    for i in range(spec["repeats"]):
        done = lakewarden(f"lw_{i}", 2 + i)
        out["lw_s"].append(done["s"])
        out["plan_s"].append(done["plan_s"])
        out["optimize_s"].append(done["optimize_s"])
        out["validation_s"].append(done["v_s"])
        table = DeltaTable(str(work / f"rs_{i}"))
        seconds, _ = timed(
            partial(table.optimize.compact, target_size=policy.target_file_size_bytes)
        )
        out["rs_s"].append(seconds)
    spark.stop()
    out.update(
        first_s=first["s"],
        target=policy.target_file_size_bytes,
        validation="passed",
        deltalake=version("deltalake"),
    )
    return out


if __name__ == "__main__":
    print(json.dumps(_child(json.loads(sys.argv[1]))))
