"""B23: lakewarden's Hudi compaction against Hudi's own standalone compactor (issue 28
"Measure and report", issue 30 goal 2 for Hudi: wall time ratio, rows and checksums equal).

One merge-on-read table at table version 6 (the version Hudi's Flink writers write, and the
newest Hudi standalone compactor the reachable Maven Central serves reads: the Flink
bundle's `HoodieFlinkCompactor`, 0.14.0; Spark's `HoodieCompactor` is in hudi-utilities,
404 there): `rows` rows inserted, then `rounds` upserts of a fifth of them each, every one
a log file per file group (the backlog), written by Hudi 1.2's Spark datasource at
`hoodie.write.table.version=6`; copied once per run. lakewarden's side is what its
compaction task's job does (`lakewarden.jobs.hudi`, on a warm Hudi-family session): the
table's version kept, the plan (`run_compaction(op => 'schedule')`) and its execution
(`formats.hudi.precommit`: executed, checked, then committed), and the check's digests (hudi-rs:
rows and checksum); not the control plane's bookkeeping (B12). The peer is
`HoodieFlinkCompactor --schedule` (plan and execute) in a JVM of its own on its copy, as it
is run: a standalone tool, its start included. The two alternate in one process (a child,
`python -m benchmarks.hudi_peers SPEC`: the benchmark's own Spark session is Iceberg's).
Every copy is read back by hudi-rs: rows and checksum equal to the template's, no log file
left in a latest slice.
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

from benchmarks.harness import Context, Figure, Stat, measuring, timed

GOAL = 1.5
ROUNDS = 4


def b23(ctx: Context) -> Figure:
    with measuring(
        "B23",
        "a Hudi merge-on-read compaction (table version 6, a log file per file group from "
        f"each of {ROUNDS} upserts): lakewarden's task's job (plan, execute, validation by "
        "hudi-rs) on a warm Hudi-family session: wall time, rows, checksum",
        "Hudi's standalone HoodieFlinkCompactor --schedule (hudi-flink1.17-bundle 0.14.0) on "
        "an identical copy, in the same run",
        f"lakewarden <= {GOAL}x the standalone compactor's time, rows and checksums equal",
    ) as fig:
        rows = 20_000 if ctx.sizes.name == "smoke" else 400_000
        work = Path(tempfile.mkdtemp(prefix="b23-", dir=ctx.work_dir))
        try:
            _measure(fig, work, rows, ctx.repeats)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return fig


def _measure(fig: Figure, work: Path, rows: int, repeats: int) -> None:
    spec = {"work": str(work), "rows": rows, "repeats": repeats, "data_dir": str(work / "spark")}
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.hudi_peers", json.dumps(spec)],
        check=False,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise AssertionError(f"B23's child failed: {done.stderr[-3000:]}")
    got = json.loads(done.stdout.strip().splitlines()[-1])
    ratio = Stat.of([a / b for a, b in zip(got["lw_s"], got["peer_s"], strict=True)])
    fig.values.update(
        rows=rows,
        rounds=ROUNDS,
        write_s=got["write_s"],
        log_files_before=got["log_files"],
        bytes=got["bytes"],
        lakewarden={
            "task_s": Stat.of(got["lw_s"]),
            "compact_s": Stat.of(got["compact_s"]),
            "validation_s": Stat.of(got["validation_s"]),
            "first_run_s": got["first_s"],
        },
        # The flow before (committed, then validated by whole-table digests), alternated.
        validated_after_commit={
            "task_s": Stat.of(got["after_s"]),
            "validation_s": Stat.of(got["after_validation_s"]),
        },
        validation_before_over_after_commit=Stat.of(
            [a / b for a, b in zip(got["validation_s"], got["after_validation_s"], strict=True)]
        ),
        hudi_flink_compactor={"version": "0.14.0", "run_s": Stat.of(got["peer_s"])},
        rows_and_checksums_equal=True,
    )
    fig.ratio = ratio
    fig.ratio_label = "lakewarden task / HoodieFlinkCompactor time"
    fig.goal_met = ratio.median <= GOAL
    fig.notes.append(
        f"{repeats} alternated pairs in one process after one untimed lakewarden run (its "
        "JVM's first compaction loads Hudi's classes: first_run_s); the standalone "
        "compactor starts its JVM and a local Flink each run, as it is used"
    )


def _write(spark: Any, path: str, rows: int) -> None:
    """The template: `rows` rows, then ROUNDS upserts of a fifth each, table version 6."""
    options = {
        "hoodie.table.name": "t",
        "hoodie.datasource.write.table.type": "MERGE_ON_READ",
        "hoodie.datasource.write.recordkey.field": "id",
        "hoodie.datasource.write.precombine.field": "ts",
        "hoodie.datasource.write.partitionpath.field": "region",
        "hoodie.metadata.enable": "false",
        "hoodie.embed.timeline.server": "false",
        "hoodie.compact.inline": "false",
        "hoodie.clean.automatic": "false",
        "hoodie.write.table.version": "6",
        "hoodie.write.auto.upgrade": "false",
        "hoodie.upsert.shuffle.parallelism": "2",
        "hoodie.insert.shuffle.parallelism": "2",
    }
    for round_ in range(ROUNDS + 1):
        start, size = (0, rows) if round_ == 0 else ((round_ * rows // 5) % rows, rows // 5)
        df = spark.range(start, start + size, 1, 2).selectExpr(
            f"id % {rows} AS id",
            "CONCAT('r', CAST(id % 4 AS STRING)) AS region",
            f"CAST({round_} AS BIGINT) AS v",
            "md5(CAST(id AS STRING)) AS payload",
            f"CAST({round_} AS BIGINT) AS ts",
        )
        operation = "insert" if round_ == 0 else "upsert"
        df.write.format("hudi").options(
            **options, **{"hoodie.datasource.write.operation": operation}
        ).mode("append").save(path)


def _child(spec: dict[str, Any]) -> dict[str, Any]:
    """The template, then both sides alternated, in one Hudi-family process."""
    from hudi import HudiTable

    from lakewarden.formats.hudi import jobs, precommit
    from lakewarden.formats.hudi.timeline import HudiTimeline
    from lakewarden.formats.hudi.validation import digest
    from lakewarden.settings import Settings
    from lakewarden.spark import local_flink
    from lakewarden.spark.session import build_session

    settings = Settings(data_dir=Path(spec["data_dir"]))
    spark = build_session(settings, "postgresql://bench@127.0.0.1:1/none", "b23", family="hudi")
    work, repeats = Path(spec["work"]), int(spec["repeats"])
    template = work / "template"
    write_s, _ = timed(partial(_write, spark, str(template), int(spec["rows"])))
    slices = HudiTable(str(template)).get_file_slices()
    log_files = sum(len(s.log_file_sizes or []) for s in slices)
    size = sum(f.stat().st_size for f in template.rglob("*") if f.is_file())
    sides = ("lw", "after", "peer")
    names = ["warm", *(f"{side}_{i}" for i in range(repeats) for side in sides)]
    for name in names:
        shutil.copytree(template, work / name)
    expected = digest(str(template))

    def lakewarden(name: str) -> dict[str, float]:
        path = str(work / name)
        session = spark.newSession()
        jobs.with_concurrency(session, path)
        jobs.with_metadata(session, False)
        jobs.with_table_version(session, path)
        # As the task's job does (`jobs.hudi._checked`): the plan, the slices it
        # replaces read, the execution without its commit, the files it wrote read, the
        # commit.
        plan_s, instant = timed(partial(jobs.schedule_compaction, session, path))
        assert instant is not None, name
        before_s, before = timed(
            lambda: precommit.input_digests(path, precommit.plan_slices(path, instant))
        )
        execution = precommit.Execution(session, path, instant)
        try:
            run_s, written = timed(execution.run)
            after_s, (after, missing) = timed(partial(precommit.written_digests, path, written))
            found = precommit.compare(before, after)
            if missing or found["partitions_differing"]:
                raise AssertionError(f"{name}: {found}, missing {missing}")
            commit_s, _ = timed(execution.commit)
        finally:
            execution.close()
        compact_s = plan_s + run_s + commit_s
        return {
            "s": compact_s + before_s + after_s,
            "compact_s": compact_s,
            "v_s": before_s + after_s,
        }

    def validated_after(name: str) -> dict[str, float]:
        """The flow before issue 30's goal 5 (2026-11-27): the procedure commits, then the
        whole table is digested before and after; side by side for the check's cost."""
        path = str(work / name)
        session = spark.newSession()
        jobs.with_concurrency(session, path)
        jobs.with_metadata(session, False)
        jobs.with_table_version(session, path)
        before_s, before = timed(partial(digest, path))
        compact_s, run = timed(partial(jobs.compact, session, path))
        after_s, after = timed(partial(digest, path))
        if not run.completed or before != after:
            raise AssertionError(f"{name}: {run}, digest {before} -> {after}")
        return {"s": before_s + compact_s + after_s, "v_s": before_s + after_s}

    def peer(name: str) -> float:
        command = local_flink.java_command(
            settings, local_flink.COMPACTOR, ["--path", str(work / name), "--schedule"]
        )
        seconds, done = timed(
            partial(subprocess.run, command, capture_output=True, text=True, check=False)
        )
        if done.returncode != 0:
            raise AssertionError(f"{name}: HoodieFlinkCompactor: {done.stderr[-2000:]}")
        return float(seconds)

    first = lakewarden("warm")
    keys = ("lw_s", "compact_s", "validation_s", "after_s", "after_validation_s", "peer_s")
    out: dict[str, Any] = {k: [] for k in keys}
    for i in range(repeats):
        done = lakewarden(f"lw_{i}")
        out["lw_s"].append(done["s"])
        out["compact_s"].append(done["compact_s"])
        out["validation_s"].append(done["v_s"])
        before = validated_after(f"after_{i}")
        out["after_s"].append(before["s"])
        out["after_validation_s"].append(before["v_s"])
        out["peer_s"].append(peer(f"peer_{i}"))
    spark.stop()
    for name in names:
        path = str(work / name)
        found = digest(path)
        left = sum(len(s.log_file_sizes or []) for s in HudiTable(path).get_file_slices())
        compacted = [i for i in HudiTimeline(path).completed() if i.action == "commit"]
        if found != expected or left or not compacted:
            raise AssertionError(f"{name}: {found} (template {expected}), {left} log files left")
    out.update(first_s=first["s"], write_s=write_s, log_files=log_files, bytes=size)
    return out


if __name__ == "__main__":
    print(json.dumps(_child(json.loads(sys.argv[1]))))
