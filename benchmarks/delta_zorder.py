"""B27: Zuoyebang's Z-order case on Delta (issue 29). A table of `delta_rows` rows in
`delta_files` small files, written by delta-rs, whose columns x and y are random (every file
spans both ranges, so a lookup `x = a AND y = b` opens every file); a Z-order by (x, y) as
lakewarden runs it (a Delta-family Spark session: Delta's own Z-order curve, checked before
its commit, `formats.delta.staged_rewrite`); files opened by the lookups before and after
(from the add actions' min/max stats, as Delta's data skipping reads them; goal <= 0.1x) and
Spark's lookup time before and after. Then compaction: Delta's bin-pack `OPTIMIZE`
(lakewarden's) against delta-rs' own `optimize.compact()`, each on an identical copy of the
small-file table in the same run, wall time of the command alone (Spark's JVM is warm); the
rows and their checksum read back by delta-rs must be equal on every copy. And issue 30's
goal 3 for Delta's Spark path: the compaction checked before its commit
(`formats.delta.staged_rewrite`, what a compaction task runs) against the bin-pack OPTIMIZE
unchecked, and against OPTIMIZE then validated after its commit (`jobs.delta.validate`, as
before), the three alternated per repeat in the one JVM, each on a copy of its own.

The Spark side runs in a child process (`python -m benchmarks.delta_zorder SPEC`): the
benchmark's own session is Iceberg's, and a process holds one SparkContext.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import tempfile
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa

from benchmarks.harness import Context, Figure, Stat, measuring, timed

SEED = 27
RANGE = 1000  # x and y are drawn from [0, RANGE)
PROBES = 12


def _write(path: Path, rows: int, files: int) -> None:
    """`files` appends of rows // files rows each: small files of random x, y."""
    from deltalake import write_deltalake

    rng = random.Random(SEED)
    per = rows // files
    for f in range(files):
        ids = range(f * per, (f + 1) * per)
        batch = pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "x": pa.array([rng.randrange(RANGE) for _ in ids], pa.int64()),
                "y": pa.array([rng.randrange(RANGE) for _ in ids], pa.int64()),
                "v": [f"v{i % 977}" for i in ids],
            }
        )
        write_deltalake(str(path), batch, mode="append")


def _add_actions(path: Path) -> list[dict[str, Any]]:
    from deltalake import DeltaTable

    return list(pa.table(DeltaTable(str(path)).get_add_actions(flatten=True)).to_pylist())


def files_opened(path: Path, probes: list[tuple[int, int]]) -> list[int]:
    """Per lookup `x = a AND y = b`: the files whose min/max stats hold (a, b)."""
    adds = _add_actions(path)
    return [
        sum(1 for r in adds if r["min.x"] <= a <= r["max.x"] and r["min.y"] <= b <= r["max.y"])
        for a, b in probes
    ]


def _digest(path: Path) -> tuple[int, str]:
    from deltalake import DeltaTable

    from lakewarden.formats.digest import digest_rows

    found = digest_rows(pa.table(DeltaTable(str(path)).to_pyarrow_table()))
    return found.rows, str(found.checksum)


def b27(ctx: Context) -> Figure:
    with measuring(
        "B27",
        "files opened by a lookup `x = a AND y = b` after Delta's OPTIMIZE ZORDER BY (x, y) "
        "(lakewarden's Z-order on Delta), and Spark's lookup time; Delta's bin-pack OPTIMIZE "
        "(lakewarden's compaction) against delta-rs' optimize.compact()",
        "the same table before (small files, random x and y); delta-rs compacting an "
        "identical copy",
        "files after/before <= 0.1; compaction: report (rows and checksums equal)",
    ) as fig:
        sizes = ctx.sizes
        rows, files = sizes.delta_rows, sizes.delta_files
        work = Path(tempfile.mkdtemp(prefix="b27-", dir=ctx.work_dir))
        try:
            _measure(fig, work, rows, files, ctx.repeats)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return fig


def _measure(fig: Figure, work: Path, rows: int, files: int, repeats: int) -> None:
    template = work / "template"
    fig.values["write_s"], _ = timed(lambda: _write(template, rows, files))
    total = sum(r["size_bytes"] for r in _add_actions(template))
    target = max(1 << 20, total // 16)  # ~16 files after, as a daily partition of ~2 GB
    copies = {"zorder": work / "zorder"}
    warm = repeats + 1  # the Spark side's first copies: an unmeasured round
    copies.update({f"spark_{i}": work / f"spark_{i}" for i in range(warm)})
    copies.update({f"rs_{i}": work / f"rs_{i}" for i in range(repeats)})
    copies.update({f"staged_{i}": work / f"staged_{i}" for i in range(warm)})
    copies.update({f"after_{i}": work / f"after_{i}" for i in range(warm)})
    for path in copies.values():
        shutil.copytree(template, path)
    rng = random.Random(SEED + 1)
    probes = [(rng.randrange(RANGE), rng.randrange(RANGE)) for _ in range(PROBES)]
    before = files_opened(copies["zorder"], probes)

    spec = {
        "zorder": str(copies["zorder"]),
        "compact": [
            {arm: str(copies[f"{arm}_{i}"]) for arm in ("spark", "staged", "after")}
            for i in range(warm)
        ],
        "target": target,
        "probes": probes,
        "data_dir": str(work / "spark"),
    }
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.delta_zorder", json.dumps(spec)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    spark = json.loads(out.strip().splitlines()[-1])
    after = files_opened(copies["zorder"], probes)

    from deltalake import DeltaTable

    rs_s = []
    for i in range(repeats):
        table = DeltaTable(str(copies[f"rs_{i}"]))
        seconds, _ = timed(partial(table.optimize.compact, target_size=target))
        rs_s.append(seconds)
    # Every copy holds the template's rows, however laid out.
    expected = _digest(template)
    for name in ("zorder", "spark_0", "rs_0", "staged_0", "after_0"):
        got = _digest(copies[name])
        if got != expected:
            raise AssertionError(f"{name}: rows/checksum {got} != the template's {expected}")
    fig.values.update(
        rows=rows,
        files_before=files,
        bytes=total,
        target_file_size=target,
        files_after_zorder=len(_add_actions(copies["zorder"])),
        files_after_spark_compaction=len(_add_actions(copies["spark_0"])),
        files_after_rs_compaction=len(_add_actions(copies["rs_0"])),
        opened_before=before,
        opened_after=after,
        zorder_s=spark["zorder_s"],
        lookup_before_s=Stat.of(spark["lookup_before_s"]),
        lookup_after_s=Stat.of(spark["lookup_after_s"]),
        lookup_time_before_over_after=Stat.of(
            [b / a for b, a in zip(spark["lookup_before_s"], spark["lookup_after_s"], strict=True)]
        ),
        spark_compaction_s=Stat.of(spark["compact_s"]),
        delta_rs_compaction_s=Stat.of(rs_s),
        spark_over_delta_rs_compaction_time=Stat.of(
            [s / r for s, r in zip(spark["compact_s"], rs_s, strict=True)]
        ),
        rows_and_checksums_equal=True,
        files_after_checked_compaction=len(_add_actions(copies["staged_0"])),
        checked_compaction_s=Stat.of(spark["staged_s"]),
        optimize_then_validated_s=Stat.of(spark["after_s"]),
        # issue 30 goal 3 (<= 1.15): the check's cost over the unchecked rewrite
        checked_over_unchecked=Stat.of(
            [c / o for c, o in zip(spark["staged_s"], spark["compact_s"], strict=True)]
        ),
        checked_over_validated_after=Stat.of(
            [c / a for c, a in zip(spark["staged_s"], spark["after_s"], strict=True)]
        ),
    )
    fig.ratio = Stat.of([a / b for a, b in zip(after, before, strict=True)])
    fig.ratio_label = "files opened after/before"
    fig.goal_met = fig.ratio.median <= 0.1
    fig.notes.append(
        "Spark's compactions run one after another in one warm JVM, then delta-rs' (not "
        "alternated: a process holds one SparkContext)"
    )


def _child(spec: dict[str, Any]) -> dict[str, Any]:
    """The Delta-family Spark side: the lookups before and after the Z-order, and each
    copy's bin-pack, timed; lakewarden's own statements (`formats.delta.jobs`)."""
    from lakewarden.formats.delta import jobs, staged_rewrite
    from lakewarden.formats.delta.timeline import DeltaTimeline
    from lakewarden.jobs.delta import validate
    from lakewarden.settings import Settings
    from lakewarden.spark.session import build_session

    spark = build_session(
        Settings(data_dir=Path(spec["data_dir"])),
        "postgresql://bench@127.0.0.1:1/none",
        "b27",
        family="delta",
    )
    target = str(int(spec["target"]))
    session = jobs.marked_session(spark, 0, 1, {jobs.MAX_FILE_SIZE: target})
    session.conf.set(jobs.MIN_FILE_SIZE, target)
    path = spec["zorder"]

    def lookup(a: int, b: int) -> None:
        spark.sql(f"SELECT count(*) FROM delta.`{path}` WHERE x = {a} AND y = {b}").collect()

    def lookups() -> list[float]:
        return [timed(partial(lookup, a, b))[0] for a, b in spec["probes"]]

    lookups()  # warm: the log read, the code paths compiled
    before = lookups()
    # lakewarden's Z-order: Delta's curve, checked before its commit (`staged_rewrite`)
    zplan = {"zorder": ["x", "y"], "target_file_size_bytes": int(target), "partitions": None}
    zorder_s, zdone = timed(lambda: staged_rewrite.compact(session, path, zplan, lambda: None))
    if zdone.get("validation", {}).get("status") != "passed":
        raise AssertionError(f"the Z-order was not checked: {zdone}")
    lookups()
    after = lookups()
    plan = {"target_file_size_bytes": int(target), "min_file_size_bytes": int(target)}

    def validated_after(p: str) -> None:
        jobs.optimize(session, p, None)
        checked = validate(p, DeltaTimeline(p).versions()[-1])
        if checked["status"] != "passed":
            raise AssertionError(f"{p}: {checked}")

    arms = {  # by copy: unchecked, checked before its commit, validated after it
        "spark": lambda p: jobs.optimize(session, p, None),
        "staged": lambda p: staged_rewrite.compact(session, p, plan, lambda: None),
        "after": validated_after,
    }
    seconds: dict[str, list[float]] = {arm: [] for arm in arms}
    for i, copies in enumerate(spec["compact"]):
        for arm in list(arms)[i % 3 :] + list(arms)[: i % 3]:
            seconds[arm].append(timed(partial(arms[arm], copies[arm]))[0])
    seconds = {arm: took[1:] for arm, took in seconds.items()}  # the first round warms
    spark.stop()
    return {
        "lookup_before_s": before,
        "lookup_after_s": after,
        "zorder_s": zorder_s,
        "compact_s": seconds["spark"],
        "staged_s": seconds["staged"],
        "after_s": seconds["after"],
    }


if __name__ == "__main__":
    print(json.dumps(_child(json.loads(sys.argv[1]))))
