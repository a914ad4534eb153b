"""B36 (issue 32 §5): incremental planning against a full listing, on a table of
1,000,000 data files with one partition changed.

The table is metadata only: pyiceberg's fast append commits `DataFile` entries (path,
partition, size, row count) without any Parquet file behind them, `commits` manifests of
`files // commits` entries each, spread over `partitions` identity partitions; planning
reads only the manifests, never the data. Every partition holds files at the target size
(nothing to merge) until one commit appends `changed_files` small files to one partition.

Timed, alternately (`harness.ratios`): the compaction planner over a full listing
(`metadata.read_files`, every manifest: what every plan did before) and over the
incremental one (`manifest_cache`: the cache as the plan before the append left it, so the
one new manifest is read and the rest come from the cache). Each incremental run first
forgets the new manifest again, so every run reads it. Both plans must be the same dict,
and the incremental listing must have read exactly one manifest.

    python -m benchmarks --only B36            # full size (~10 min on 2 busy cores)
    python -m benchmarks --only B36 --smoke
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform
from pyiceberg.typedef import Record
from pyiceberg.types import IntegerType, LongType, NestedField

from benchmarks.harness import Context, Figure, measuring, ratios
from lakewarden.kinds.compaction import plan_from_files
from lakewarden.manifest_cache import INCREMENTAL, ManifestCache
from lakewarden.metadata import read_files
from lakewarden.policy.model import CompactionPolicy

GOAL = 20.0  # incremental at least this many times faster than the full listing
POLICY = CompactionPolicy()
LARGE = POLICY.target_file_size_bytes  # at the target size: never small
SMALL = POLICY.small_file_threshold_bytes // 10


@dataclass(frozen=True)
class IncrementalSizes:
    files: int
    commits: int  # manifests before the change
    partitions: int
    changed_files: int  # small files appended to one partition


SIZES = {
    "smoke": IncrementalSizes(files=2_000, commits=4, partitions=20, changed_files=20),
    "full": IncrementalSizes(files=1_000_000, commits=100, partitions=1_000, changed_files=20),
}
CHANGED = 7  # the partition changed


def append_entries(table: Table, files: list[tuple[str, int, int]]) -> None:
    """One fast-append commit of (path, partition value, size) entries: one manifest."""
    with table.transaction() as tx, tx.update_snapshot().fast_append() as append:
        for path, day, size in files:
            append.append_data_file(
                DataFile.from_args(
                    content=DataFileContent.DATA,
                    file_path=path,
                    file_format=FileFormat.PARQUET,
                    partition=Record(day),
                    record_count=size // 100,
                    file_size_in_bytes=size,
                    spec_id=0,
                )
            )


def build(root: Path, sizes: IncrementalSizes) -> tuple[SqlCatalog, str]:
    """The metadata-only table of `sizes.files` files in `sizes.commits` manifests, its
    catalog (SQLite) and warehouse under `root`."""
    root.mkdir(parents=True)
    catalog = SqlCatalog(
        "b36", uri=f"sqlite:///{root}/catalog.db", warehouse=(root / "warehouse").as_uri()
    )
    catalog.create_namespace("bench")
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "day", IntegerType(), required=False),
    )
    spec = PartitionSpec(
        PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="day")
    )
    name = "bench.wide"
    table = catalog.create_table(name, schema, partition_spec=spec)
    data = (root / "data").as_uri()  # never written: planning reads only metadata
    per = sizes.files // sizes.commits
    for c in range(sizes.commits):
        append_entries(
            table,
            [
                (f"{data}/day={k % sizes.partitions}/{k:08d}.parquet", k % sizes.partitions, LARGE)
                for k in range(c * per, (c + 1) * per)
            ],
        )
    return catalog, name


def b36(ctx: Context) -> Figure:
    sizes = SIZES[ctx.sizes.name]
    with measuring(
        "B36",
        f"compaction plan time on a table of {sizes.files:,} data files with one partition "
        "changed: incremental (only manifests written since the last plan read)",
        "the same planner over a full listing of every manifest",
        f">= {GOAL:g}x faster, the same plan",
    ) as fig:
        started = time.perf_counter()
        catalog, name = build(ctx.work_dir / f"b36-{uuid.uuid4().hex[:8]}", sizes)
        built_s = time.perf_counter() - started
        cache = ManifestCache(max_files=sizes.files * 2, full_every=10**9)
        cache.listing(catalog.load_table(name))  # the last plan, before the change
        table = catalog.load_table(name)
        changed = [
            (f"{table.location()}/data/day={CHANGED}/new-{i}.parquet", CHANGED, SMALL)
            for i in range(sizes.changed_files)
        ]
        append_entries(table, changed)
        table = catalog.load_table(name)
        snapshot = table.current_snapshot()
        assert snapshot is not None
        manifests = snapshot.manifests(table.io)
        new = [m for m in manifests if m.added_snapshot_id == snapshot.snapshot_id]
        seen: dict[str, Any] = {}

        def full() -> None:
            files = read_files(table)
            seen["full"] = plan_from_files(POLICY, files.snapshot_id, files.data, 0).plan

        def incremental() -> None:
            cache.drop(new)  # every run reads the new manifest, as the first plan after it
            listing = cache.listing(table)
            assert listing.how == INCREMENTAL and listing.read == len(new), listing.explain()
            files = listing.files
            seen["incremental"] = plan_from_files(POLICY, files.snapshot_id, files.data, 0).plan

        times = ratios(ctx.repeats, incremental, full)
        same = seen["full"] == seen["incremental"]
        plan = seen["full"] or {}
        fig.ratio = times["speedup"]
        fig.ratio_label = "full / incremental plan time"
        fig.goal_met = same and fig.ratio.median >= GOAL
        fig.values = {
            "full_s": times["baseline_s"],
            "incremental_s": times["subject_s"],
            "same_plan": same,
            "data_files": sizes.files + sizes.changed_files,
            "manifests": len(manifests),
            "manifests_read_incrementally": len(new),
            "partitions": sizes.partitions,
            "partitions_planned": len(plan.get("partitions", [])),
            "files_to_rewrite": plan.get("files_to_rewrite"),
            "build_s": round(built_s, 1),
        }
        fig.notes.append(
            f"metadata-only table: {sizes.commits} fast appends of DataFile entries "
            "(pyiceberg, SQLite catalog, local warehouse), no Parquet written; then one "
            f"append of {sizes.changed_files} small files to partition day={CHANGED}"
        )
        if not same:
            fig.notes.append("the incremental plan differed from the full one")
    return fig
