"""B39 (Hudi) and B40 (Delta), issue 32 §5: a compaction plan after one partition changed,
read from the instants or log versions after the last plan's cursor, against a full
listing of the table; the same plan both ways.

Both tables are metadata only, as B36's: what planning reads, never the data.
- Hudi: a merge-on-read table of table version 6 (timeline layout 1, JSON instants, as
  Hudi 0.14-0.15 and Hudi 1.x with `hoodie.write.table.version=6` write it): `groups` file
  groups over `partitions` hive-style partitions, empty base files written by
  `hudi_commits` delta commits, the partitions' `.hoodie_partition_metadata`; then one
  delta commit of two log files on each of `changed` file groups of one partition.
  hudi-rs lists the files (no metadata table): the full plan is its file-system view of
  the whole table, the incremental one lists the one partition the new delta commit names.
- Delta: a log of `commits` commit files (`files` add actions with stats, over
  `partitions` partitions) and a checkpoint at the last (delta-rs' `create_checkpoint`);
  then one commit adding `changed` small files to one partition. The full plan is delta-rs'
  table and add actions; the incremental one reads the one new commit file.

Timed alternately (`harness.ratios`): the facts read and the compaction verdict, each way.
Each incremental run starts from the cache as the plan before the change left it. Both
plans must be equal, and the incremental read must have been incremental.

    python -m benchmarks --only B39,B40          # full size
    python -m benchmarks --smoke --only B39,B40
"""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from benchmarks.harness import Context, Figure, measuring, ratios
from lakewarden.formats.delta import incremental as delta_incremental
from lakewarden.formats.delta.facts import read_facts as delta_facts
from lakewarden.formats.delta.timeline import DeltaTimeline
from lakewarden.formats.hudi import incremental as hudi_incremental
from lakewarden.formats.hudi.facts import read_facts as hudi_facts
from lakewarden.formats.hudi.timeline import HudiTimeline
from lakewarden.kinds import hudi_compaction
from lakewarden.kinds.delta import compaction_and_purge
from lakewarden.policy.model import CompactionPolicy

GOAL = 20.0  # incremental at least this many times faster than the full listing
POLICY = CompactionPolicy(min_input_files=2)
CHANGED = 7  # the partition changed


@dataclass(frozen=True)
class LogSizes:
    hudi_groups: int
    hudi_commits: int
    delta_files: int
    delta_commits: int
    partitions: int
    changed: int


SIZES = {
    "smoke": LogSizes(
        hudi_groups=2_000,
        hudi_commits=4,
        delta_files=2_000,
        delta_commits=4,
        partitions=20,
        changed=20,
    ),
    "full": LogSizes(
        hudi_groups=200_000,
        hudi_commits=100,
        delta_files=1_000_000,
        delta_commits=100,
        partitions=1_000,
        changed=20,
    ),
}

# --- a metadata-only Hudi table --------------------------------------------------------

CHANGE_INSTANT = "20260102000000000"
_AVRO = json.dumps(
    {
        "type": "record",
        "name": "bench_record",
        "namespace": "hoodie.bench",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "day", "type": "int"},
            {"name": "v", "type": ["null", "long"], "default": None},
        ],
    }
)


def _hudi_commit(root: Path, instant: str, stats: dict[str, list[dict[str, Any]]]) -> None:
    meta = {
        "partitionToWriteStats": stats,
        "compacted": False,
        "extraMetadata": {"schema": _AVRO},
        "operationType": "UPSERT",
    }
    for suffix in (".deltacommit.requested", ".deltacommit.inflight"):
        (root / ".hoodie" / f"{instant}{suffix}").write_text("")
    (root / ".hoodie" / f"{instant}.deltacommit").write_text(json.dumps(meta))


def _instant(n: int) -> str:
    """The n-th base commit's instant time (one a second from 2026-01-01)."""
    return (datetime(2026, 1, 1) + timedelta(seconds=n)).strftime("%Y%m%d%H%M%S") + "000"


def build_hudi(root: Path, groups: int, partitions: int, commits: int) -> None:
    """The merge-on-read table of `groups` file groups (empty base files) under `root`,
    written by `commits` delta commits."""
    (root / ".hoodie").mkdir(parents=True)
    props = {
        "hoodie.table.name": root.name,
        "hoodie.table.type": "MERGE_ON_READ",
        "hoodie.table.version": "6",
        "hoodie.timeline.layout.version": "1",
        "hoodie.table.partition.fields": "day",
        "hoodie.table.recordkey.fields": "id",
        "hoodie.table.precombine.field": "id",
        "hoodie.datasource.write.hive_style_partitioning": "true",
        "hoodie.table.base.file.format": "PARQUET",
        "hoodie.table.keygenerator.class": "org.apache.hudi.keygen.SimpleKeyGenerator",
        "hoodie.populate.meta.fields": "true",
    }
    text = "".join(f"{k}={v}\n" for k, v in props.items())
    (root / ".hoodie" / "hoodie.properties").write_text(text)
    for p in range(partitions):
        folder = root / f"day={p}"
        folder.mkdir()
        depth = f"commitTime={_instant(0)}\npartitionDepth=1\n"
        (folder / ".hoodie_partition_metadata").write_text(depth)
    per = groups // commits
    for c in range(commits):
        instant = _instant(c)
        stats: dict[str, list[dict[str, Any]]] = {}
        for g in range(c * per, (c + 1) * per):
            part = f"day={g % partitions}"
            fid = f"{uuid.UUID(int=g)}-0"
            name = f"{fid}_0-1-0_{instant}.parquet"
            (root / part / name).touch()
            stats.setdefault(part, []).append(
                {"fileId": fid, "path": f"{part}/{name}", "prevCommit": "null", "numInserts": 1}
            )
        _hudi_commit(root, instant, stats)


def change_hudi(root: Path, groups: int) -> None:
    """One delta commit of two log files on each of `groups` file groups of day=CHANGED."""
    part = f"day={CHANGED}"
    names = sorted(p.name for p in (root / part).glob("*.parquet"))[:groups]
    stats = []
    for k, name in enumerate(names):
        fid, base = name.split("_")[0], name.rsplit("_", 1)[1].split(".")[0]
        for version in (1, 2):
            log = f".{fid}_{base}.log.{version}_0-2-{k}"
            (root / part / log).write_bytes(b"x" * 1000)
            stats.append(
                {"fileId": fid, "path": f"{part}/{log}", "prevCommit": base, "numWrites": 1}
            )
    _hudi_commit(root, CHANGE_INSTANT, {part: stats})


# --- a metadata-only Delta table -------------------------------------------------------


def build_delta(root: Path, files: int, commits: int, partitions: int) -> None:
    """The Delta log of `files` add actions (files at 128 MiB, never small) under `root`,
    with a checkpoint at its last version."""
    from deltalake import DeltaTable

    log = root / "_delta_log"
    log.mkdir(parents=True)
    fields = [("id", "long"), ("day", "integer")]
    schema = {
        "type": "struct",
        "fields": [{"name": n, "type": t, "nullable": True, "metadata": {}} for n, t in fields],
    }
    per = files // commits
    for c in range(commits):
        lines: list[dict[str, Any]] = []
        if c == 0:
            lines.append({"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}})
            lines.append(
                {
                    "metaData": {
                        "id": str(uuid.uuid4()),
                        "format": {"provider": "parquet", "options": {}},
                        "schemaString": json.dumps(schema),
                        "partitionColumns": ["day"],
                        "configuration": {},
                        "createdTime": 1,
                    }
                }
            )
        lines.append({"commitInfo": {"timestamp": 1_700_000_000_000 + c, "operation": "WRITE"}})
        for k in range(c * per, (c + 1) * per):
            lines.append(
                _add(f"day={k % partitions}/part-{k:08d}.parquet", k % partitions, 1 << 27, k)
            )
        (log / f"{c:020d}.json").write_text("".join(json.dumps(x) + "\n" for x in lines))
    DeltaTable(str(root)).create_checkpoint()


def _add(path: str, day: int, size: int, k: int) -> dict[str, Any]:
    stats = {
        "numRecords": 1000,
        "minValues": {"id": k * 1000},
        "maxValues": {"id": k * 1000 + 999},
        "nullCount": {"id": 0},
    }
    return {
        "add": {
            "path": path,
            "partitionValues": {"day": str(day)},
            "size": size,
            "modificationTime": 1_700_000_000_000,
            "dataChange": True,
            "stats": json.dumps(stats),
        }
    }


def change_delta(root: Path, files: int) -> None:
    """One commit of `files` small files in day=CHANGED."""
    log = root / "_delta_log"
    version = max(int(p.stem) for p in log.glob("*.json")) + 1
    lines = [{"commitInfo": {"timestamp": 1_800_000_000_000, "operation": "WRITE"}}]
    lines += [
        _add(f"day={CHANGED}/new-{i}.parquet", CHANGED, 1000, 10**9 + i) for i in range(files)
    ]
    (log / f"{version:020d}.json").write_text("".join(json.dumps(x) + "\n" for x in lines))


# --- the figures ----------------------------------------------------------------------------


def b39(ctx: Context) -> Figure:
    sizes = SIZES[ctx.sizes.name]
    with measuring(
        "B39",
        f"Hudi compaction plan time on a merge-on-read table of {sizes.hudi_groups:,} file "
        "groups with one partition changed: incremental (the instants after the cursor, "
        "their partitions listed)",
        "the same planner over hudi-rs' file-system view of the whole table",
        f">= {GOAL:g}x faster, the same plan",
    ) as fig:
        root = ctx.work_dir / f"b39-{uuid.uuid4().hex[:8]}" / "trips"
        started = time.perf_counter()
        build_hudi(root, sizes.hudi_groups, sizes.partitions, sizes.hudi_commits)
        built_s = time.perf_counter() - started
        path = str(root)
        cache = hudi_incremental.HudiSlicesCache(max_slices=sizes.hudi_groups * 2, full_every=10**9)
        hudi_facts(path, HudiTimeline(path), cache.slices)  # the last plan, before the change
        before = cache._kept[path]
        change_hudi(root, sizes.changed)
        # its writer quiet an hour: a version-6 table is compacted only after
        # OLD_WRITER_QUIET_S without a delta commit (else no plan to compare)
        an_hour_ago = time.time() - 3600
        os.utime(root / ".hoodie" / f"{CHANGE_INSTANT}.deltacommit", (an_hour_ago, an_hour_ago))
        seen: dict[str, Any] = {}

        def full() -> None:
            timeline = HudiTimeline(path)
            seen["full"] = hudi_compaction.plan(POLICY, hudi_facts(path, timeline), timeline, ())

        def incremental() -> None:
            cache._kept[path] = before  # every run: the first plan after the change
            timeline = HudiTimeline(path)
            facts = hudi_facts(path, timeline, cache.slices)
            read = cache.last[path]
            assert read.how == hudi_incremental.INCREMENTAL and read.partitions == 1, read
            seen["incremental"] = hudi_compaction.plan(POLICY, facts, timeline, ())

        times = ratios(ctx.repeats, incremental, full)
        same = seen["full"] == seen["incremental"]
        plan = seen["full"].plan or {}
        fig.ratio = times["speedup"]
        fig.ratio_label = "full / incremental plan time"
        fig.goal_met = same and seen["full"].plan is not None and fig.ratio.median >= GOAL
        fig.values = {
            "full_s": times["baseline_s"],
            "incremental_s": times["subject_s"],
            "same_plan": same,
            "file_groups": sizes.hudi_groups,
            "partitions": sizes.partitions,
            "partitions_listed_incrementally": 1,
            "log_files": plan.get("log_files"),
            "build_s": round(built_s, 1),
        }
        fig.notes.append(
            "metadata-only Hudi table (table version 6, JSON instants): empty base files in "
            f"{sizes.hudi_commits} delta commits; then one delta commit of 2 log files on "
            f"{sizes.changed} file groups of day={CHANGED}; hudi-rs 0.5 lists the files (no "
            "metadata table)"
        )
        if not same:
            fig.notes.append("the incremental plan differed from the full one")
    return fig


def b40(ctx: Context) -> Figure:
    sizes = SIZES[ctx.sizes.name]
    with measuring(
        "B40",
        f"Delta compaction plan time on a table of {sizes.delta_files:,} files with one "
        "partition changed: incremental (the log versions after the cursor)",
        "the same planner over delta-rs' table and add actions (a full read)",
        f">= {GOAL:g}x faster, the same plan",
    ) as fig:
        root = ctx.work_dir / f"b40-{uuid.uuid4().hex[:8]}" / "events"
        started = time.perf_counter()
        build_delta(root, sizes.delta_files, sizes.delta_commits, sizes.partitions)
        built_s = time.perf_counter() - started
        path = str(root)
        cache = delta_incremental.DeltaFilesCache(max_files=sizes.delta_files * 2, full_every=10**9)
        target, ratio = POLICY.target_file_size_bytes, POLICY.small_file_ratio

        def facts(files: Any) -> Any:
            return delta_facts(
                DeltaTimeline(path), target_file_size=target, small_file_ratio=ratio, files=files
            )

        facts(cache.files)  # the last plan, before the change
        before = cache._kept[path]
        change_delta(root, sizes.changed)
        seen: dict[str, Any] = {}

        def full() -> None:
            seen["full"] = compaction_and_purge(POLICY, facts(None))

        def incremental() -> None:
            cache._kept[path] = before  # every run: the first plan after the change
            got = facts(cache.files)
            read = cache.last[path]
            assert read.how == delta_incremental.INCREMENTAL and read.versions == 1, read
            seen["incremental"] = compaction_and_purge(POLICY, got)

        times = ratios(ctx.repeats, incremental, full)
        same = seen["full"] == seen["incremental"]
        fig.ratio = times["speedup"]
        fig.ratio_label = "full / incremental plan time"
        fig.goal_met = same and seen["full"][1] is not None and fig.ratio.median >= GOAL
        fig.values = {
            "full_s": times["baseline_s"],
            "incremental_s": times["subject_s"],
            "same_plan": same,
            "files": sizes.delta_files + sizes.changed,
            "partitions": sizes.partitions,
            "versions_read_incrementally": 1,
            "partitions_planned": len(seen["full"][1] or []),
            "build_s": round(built_s, 1),
        }
        fig.notes.append(
            f"metadata-only Delta table: {sizes.delta_commits} commit files of add actions "
            "(stats, no Parquet written) and a delta-rs checkpoint; then one commit of "
            f"{sizes.changed} small files in day={CHANGED}"
        )
        if not same:
            fig.notes.append("the incremental plan differed from the full one")
    return fig
