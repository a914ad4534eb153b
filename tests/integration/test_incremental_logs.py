"""Incremental planning of Hudi and Delta tables (issue 32 §5): after each step of real
writes (appends, upserts into log files, a removed partition, a compaction, deletes), the
facts and plans read from the instants or log versions after the last plan
(`formats.hudi.incremental`, `formats.delta.incremental`) are the ones a full listing
gives, and they were read incrementally where they could be."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from lakewarden.formats.delta import incremental as delta_incremental
from lakewarden.formats.delta.facts import DeltaFacts
from lakewarden.formats.delta.facts import read_facts as delta_facts
from lakewarden.formats.delta.timeline import DeltaTimeline
from lakewarden.formats.hudi import incremental as hudi_incremental
from lakewarden.formats.hudi import slices as hudi_slices
from lakewarden.formats.hudi.facts import HudiFacts
from lakewarden.formats.hudi.facts import read_facts as hudi_facts
from lakewarden.formats.hudi.timeline import HudiTimeline
from lakewarden.kinds import hudi_clustering, hudi_compaction
from lakewarden.kinds.delta import compaction_and_purge, zorder_verdict
from lakewarden.policy.model import ClusteringPolicy, CompactionPolicy, ZOrderPolicy

TARGET = 1 << 20
COMPACTION = CompactionPolicy(min_input_files=2, min_small_files=2)
ZORDER = ZOrderPolicy(enabled=True, columns=["id", "score"], max_files_per_lookup=1)


# --- Delta ---------------------------------------------------------------------------------


def _delta_read(path: str, cache: delta_incremental.DeltaFilesCache | None) -> DeltaFacts:
    files = cache.files if cache is not None else None
    return delta_facts(
        DeltaTimeline(path), target_file_size=TARGET, small_file_ratio=0.75, files=files
    )


def _delta_same(a: DeltaFacts, b: DeltaFacts) -> None:
    assert a.summary(0) == b.summary(0)
    assert a.partition_values == b.partition_values
    by_path = {k: sorted(v, key=lambda f: f.path) for k, v in a.partition_files.items()}
    assert by_path == {k: sorted(v, key=lambda f: f.path) for k, v in b.partition_files.items()}
    assert sorted(a.file_sizes) == sorted(b.file_sizes)
    assert a.other_optimizers == b.other_optimizers
    assert compaction_and_purge(COMPACTION, a) == compaction_and_purge(COMPACTION, b)
    assert zorder_verdict(ZORDER, a) == zorder_verdict(ZORDER, b)


def _delta_step(path: str, cache: delta_incremental.DeltaFilesCache, how: str) -> DeltaFacts:
    incremental = _delta_read(path, cache)
    read = cache.last[path]
    assert read.how == how, read
    full = _delta_read(path, None)
    _delta_same(incremental, full)
    return incremental


def _day(ids: range, day: str) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(list(ids), pa.int64()),
            "day": [day] * len(ids),
            "score": pa.array([i / 3 for i in ids], pa.float32()),
            "at": pa.array([i * 86_400_000_000 for i in ids], pa.timestamp("us", tz="UTC")),
        }
    )


def test_delta_plans_from_the_log_after_the_cursor_are_the_full_ones(tmp_path: Path) -> None:
    path = str(tmp_path / "events")
    write_deltalake(path, _day(range(0, 10), "d0"), partition_by=["day"])
    cache = delta_incremental.DeltaFilesCache(max_files=10_000, full_every=1_000)
    _delta_step(path, cache, delta_incremental.FULL)  # the first plan reads in full
    for n in range(1, 7):  # small files in three partitions
        write_deltalake(path, _day(range(n * 10, n * 10 + 10), f"d{n % 3}"), mode="append")
    facts = _delta_step(path, cache, delta_incremental.INCREMENTAL)
    assert cache.last[path].versions == 6 and set(facts.partitions) == {
        "day=d0",
        "day=d1",
        "day=d2",
    }
    DeltaTable(path).delete("day = 'd1'")  # a removed partition
    facts = _delta_step(path, cache, delta_incremental.INCREMENTAL)
    assert "day=d1" not in facts.partitions
    DeltaTable(path).optimize.compact()  # a compaction: removes and adds
    facts = _delta_step(path, cache, delta_incremental.INCREMENTAL)
    assert all(p.files == 1 for p in facts.partitions.values())
    DeltaTable(path).delete("id = 3")  # a row delete: a file rewritten
    DeltaTable(path).create_checkpoint()
    write_deltalake(path, _day(range(100, 105), "d2"), mode="append")
    _delta_step(path, cache, delta_incremental.INCREMENTAL)
    DeltaTable(path).alter.set_table_properties({"delta.targetFileSize": "4096"})
    read = _delta_step(path, cache, delta_incremental.FULL)  # metadata changed: in full
    assert read.target_file_size == 4096
    assert "metadata" in cache.last[path].why_full
    write_deltalake(path, _day(range(200, 203), "d4"), mode="append")  # a new partition
    _delta_step(path, cache, delta_incremental.INCREMENTAL)


def test_every_nth_delta_plan_is_checked_against_a_full_read(tmp_path: Path) -> None:
    path = str(tmp_path / "checked")
    write_deltalake(path, _day(range(0, 5), "d0"), partition_by=["day"])
    cache = delta_incremental.DeltaFilesCache(max_files=10_000, full_every=2)
    _delta_read(path, cache)
    write_deltalake(path, _day(range(5, 9), "d1"), mode="append")
    _delta_step(path, cache, delta_incremental.INCREMENTAL)
    write_deltalake(path, _day(range(9, 12), "d1"), mode="append")
    _delta_step(path, cache, delta_incremental.CHECKED)
    assert not cache.last[path].mismatch
    # a cache that went wrong (a file it never saw removed) is caught and replaced
    kept = cache._kept[path]
    part = next(iter(kept.parts.values()))
    part.rows.pop(next(iter(part.rows)))
    part.fold()
    write_deltalake(path, _day(range(12, 14), "d0"), mode="append")
    _delta_read(path, cache)
    assert cache.last[path].how == delta_incremental.INCREMENTAL
    write_deltalake(path, _day(range(14, 15), "d0"), mode="append")
    _delta_step(path, cache, delta_incremental.CHECKED)
    assert cache.last[path].mismatch  # found, and the full read planned
    write_deltalake(path, _day(range(15, 16), "d0"), mode="append")
    _delta_step(path, cache, delta_incremental.INCREMENTAL)  # from the full read on


@pytest.mark.spark
def test_delta_deletion_vectors_read_incrementally_as_in_full(
    tmp_path: Path, spark_writers: Any
) -> None:
    """Spark's DELETE writes deletion vectors: the rows each hides, from its descriptor's
    cardinality, are the ones delta-rs reads from the vectors themselves."""
    path = str(tmp_path / "dv")
    table = f"delta.`{path}`"
    spark_writers.run(
        "delta",
        [
            {
                "sql": f"CREATE TABLE {table} (id BIGINT, day STRING) USING delta "
                "PARTITIONED BY (day) TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')"
            },
            {"sql": f"INSERT INTO {table} SELECT id, CONCAT('d', id % 2) FROM range(0, 400)"},
        ],
    )
    cache = delta_incremental.DeltaFilesCache(max_files=10_000, full_every=1_000)
    _delta_step(path, cache, delta_incremental.FULL)
    spark_writers.run(
        "delta",
        [
            {"sql": f"DELETE FROM {table} WHERE id % 10 = 0"},
            {"sql": f"DELETE FROM {table} WHERE id % 10 = 1 AND day = 'd1'"},
            {"sql": f"INSERT INTO {table} SELECT id, 'd2' FROM range(400, 410)"},
        ],
    )
    facts = _delta_step(path, cache, delta_incremental.INCREMENTAL)
    assert facts.deletion_vector_files > 0 and facts.deleted_rows == 80


# --- Hudi ----------------------------------------------------------------------------------


def _hudi_read(path: str, cache: hudi_incremental.HudiSlicesCache | None) -> HudiFacts:
    return hudi_facts(path, HudiTimeline(path), cache.slices if cache is not None else None)


def _hudi_same(a: HudiFacts, b: HudiFacts) -> None:
    assert a.summary() == b.summary()
    assert sorted(a.base_file_sizes) == sorted(b.base_file_sizes)
    assert sorted(a.log_files_per_slice) == sorted(b.log_files_per_slice)
    timeline = HudiTimeline(a.base_path)
    assert hudi_compaction.plan(COMPACTION, a, timeline, ()) == hudi_compaction.plan(
        COMPACTION, b, timeline, ()
    )
    clustering = ClusteringPolicy(enabled=True, columns=["id"])
    assert hudi_clustering.verdict("clustering", clustering, a, timeline, ()) == (
        hudi_clustering.verdict("clustering", clustering, b, timeline, ())
    )


def _hudi_step(path: str, cache: hudi_incremental.HudiSlicesCache, how: str) -> HudiFacts:
    incremental = _hudi_read(path, cache)
    read = cache.last[path]
    assert read.how == how, read
    if how == hudi_incremental.INCREMENTAL and read.partitions:
        # the partitions' folders, not hudi-rs' walk of the table; hudi-rs' view where it
        # reads a metadata table (lakewarden's compaction leaves one)
        try:
            hudi_slices.check_listable(HudiTimeline(path))
            assert read.lister == "storage", read
        except hudi_slices.NotListable:
            assert read.lister == "hudi-rs", read
    _hudi_same(incremental, _hudi_read(path, None))
    return incremental


@pytest.mark.spark
def test_hudi_plans_from_the_instants_after_the_cursor_are_the_full_ones(
    tmp_path: Path, spark_writers: Any
) -> None:
    path = str(tmp_path / "hudi" / "trips")
    mor = {"path": path, "type": "MERGE_ON_READ", "partitioned": True}
    spark_writers.run("hudi", [{**mor, "op": "insert", "ids": [0, 90], "value": 0}])
    cache = hudi_incremental.HudiSlicesCache(max_slices=10_000, full_every=1_000)
    _hudi_step(path, cache, hudi_incremental.FULL)  # the first plan lists in full
    spark_writers.run(
        "hudi",
        [
            {**mor, "op": "upsert", "ids": [0, 30], "value": 1},  # log files, every region
            {**mor, "op": "upsert", "ids": [30, 31], "value": 2},  # one region (r0)
        ],
    )
    facts = _hudi_step(path, cache, hudi_incremental.INCREMENTAL)
    assert facts.log_files > 0 and cache.last[path].instants == 2
    spark_writers.run("hudi", [{**mor, "op": "upsert", "ids": [33, 34], "value": 3}])
    _hudi_step(path, cache, hudi_incremental.INCREMENTAL)
    assert cache.last[path].partitions == 1  # only the partition the upsert touched
    # a clustering replaces file groups (their files stay on storage: the lister leaves
    # them out); the next plan, of an upsert, still does
    cluster = f"run_clustering(path => '{path}', options => 'hoodie.metadata.enable=false')"
    spark_writers.run("hudi", [{"path": path, "call": cluster}])
    _hudi_step(path, cache, hudi_incremental.INCREMENTAL)
    assert cache.last[path].partitions >= 1 and cache._kept[path].replaced  # the replaced
    spark_writers.run("hudi", [{**mor, "op": "upsert", "ids": [66, 67], "value": 5}])
    _hudi_step(path, cache, hudi_incremental.INCREMENTAL)
    spark_writers.run("hudi", [{"path": path, "compact": True}])  # a compaction
    facts = _hudi_step(path, cache, hudi_incremental.INCREMENTAL)
    assert facts.log_files == 0
    spark_writers.run(
        "hudi",
        [
            {
                **mor,
                "op": "delete_partition",
                "ids": [0, 1],
                "options": {"hoodie.datasource.write.partitions.to.delete": "r1"},
            },
            {**mor, "op": "upsert", "ids": [63, 64], "value": 4},
        ],
    )
    facts = _hudi_step(path, cache, hudi_incremental.INCREMENTAL)
    assert "r1" not in facts.partitions and {"r0", "r2"} <= set(facts.partitions)
