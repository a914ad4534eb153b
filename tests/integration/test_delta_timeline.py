"""A Delta table's log as the seam's commits (lakewarden.formats.delta.timeline) and its
facts (formats.delta.facts), on real tables delta-rs wrote, checked against delta-rs'
own history and the files on disk."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from delta_tables import parquet_on_disk, rows, write_orders, write_unreadable
from deltalake import DeltaTable, write_deltalake

from lakewarden.formats.delta.facts import read_facts
from lakewarden.formats.delta.timeline import DeltaTimeline, NotADeltaTable, UnsupportedProtocol

MiB = 1 << 20


def test_each_version_is_one_commit_in_order(tmp_path: Path) -> None:
    path = tmp_path / "orders"
    table = write_orders(path)
    timeline = DeltaTimeline(str(path))
    page = timeline.since(None, 10)
    assert not page.cursor_off_history
    commits = list(page.commits)
    history = sorted(table.history(), key=lambda h: h["version"])  # delta-rs' own reading
    assert [c.id for c in commits] == ["0", "1", "2"] == [str(h["version"]) for h in history]
    assert [c.seq for c in commits] == [0, 1, 2]
    assert [c.parent for c in commits] == [None, "0", "1"]
    assert [c.operation for c in commits] == [h["operation"] for h in history]
    assert [c.at_ms for c in commits] == [h["timestamp"] for h in history]
    for c, h in zip(commits, history, strict=True):
        metrics = h["operationMetrics"]
        assert c.summary["files-added"] == str(metrics["num_added_files"])
        assert c.summary["files-removed"] == str(metrics["num_removed_files"])
        assert c.summary["metric.num_added_files"] == str(metrics["num_added_files"])
    append = commits[1].summary
    assert append["user-metadata"] == "nightly load" and append["lakewarden.task-id"] == "41"
    assert append["param.mode"] == "Append" and int(append["bytes-added"]) > 0
    delete = commits[2].summary
    assert delete["operation"] == "DELETE" and delete["metric.num_deleted_rows"] == "5"
    assert timeline.head_token() == f"{2:020d}.json" and timeline.head_id() == "2"
    found = timeline.find_job_commits(41)
    assert found is not None and found.id == "1"
    assert found.summary == append  # the whole commit, though only commitInfo was searched
    assert timeline.find_job_commits(42) is None
    # planned at version 0: its commit is after; planned at 1: none after it
    assert getattr(timeline.find_job_commits(41, after=0), "id", None) == "1"
    assert timeline.find_job_commits(41, after=1) is None
    # planned at 7 but the head is 2: the table was written anew at its path, all is looked at
    assert getattr(timeline.find_job_commits(41, after=7), "id", None) == "1"


def test_since_pages_from_the_cursor_and_a_cursor_past_the_head_is_off_history(
    tmp_path: Path,
) -> None:
    path = tmp_path / "orders"
    write_orders(path)
    timeline = DeltaTimeline(str(path))
    assert [c.id for c in timeline.since("0", 1).commits] == ["1"]
    assert [c.id for c in timeline.since("2", 10).commits] == []
    gone = timeline.since("7", 10)  # the table was dropped and written again at its path
    assert gone.cursor_off_history and [c.id for c in gone.commits] == ["0", "1", "2"]


def test_a_path_without_a_log_or_with_an_unreadable_protocol_is_refused(tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    with pytest.raises(NotADeltaTable, match="plain is not a Delta table"):
        DeltaTimeline(str(tmp_path / "plain"))
    with pytest.raises(NotADeltaTable):
        DeltaTimeline(str(tmp_path / "missing"))
    write_unreadable(tmp_path / "future")
    timeline = DeltaTimeline(str(tmp_path / "future"))  # a poll only lists the log
    with pytest.raises(UnsupportedProtocol, match="futureFeature"):
        timeline.open_table()


def test_facts_match_the_files_on_disk(tmp_path: Path) -> None:
    """Vacuumed, the disk holds exactly the live files: health counts, sizes and records
    them as the disk (and the Parquet footers) do; small files are judged against the
    table's own `delta.targetFileSize` when it declares one."""
    path = tmp_path / "orders"
    write_orders(path)
    table = DeltaTable(str(path))
    table.alter.set_table_properties({"delta.targetFileSize": "4096"})
    write_deltalake(str(path), rows(range(100, 1100), "d3"), mode="append")
    table = DeltaTable(str(path))
    table.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    disk = parquet_on_disk(path)
    facts = read_facts(DeltaTimeline(str(path)), target_file_size=128 * MiB, small_file_ratio=0.75)
    table = DeltaTable(str(path))  # delta-rs' vacuum commits VACUUM START and END
    assert facts.version == table.version() == 6
    assert facts.files == len(disk) and sorted(facts.file_sizes) == sorted(disk.values())
    records = {k: pq.ParquetFile(path / k).metadata.num_rows for k in disk}
    assert sum(p.records for p in facts.partitions.values()) == sum(records.values()) == 1035
    assert set(facts.partitions) == {"day=d1", "day=d2", "day=d3"}
    for name, part in facts.partitions.items():
        mine = {k: v for k, v in disk.items() if k.startswith(name + "/")}
        assert part.files == len(mine) and part.bytes == sum(mine.values())
    assert facts.target_file_size == 4096 and facts.small_file_threshold == 3072
    assert facts.small_files == sum(1 for v in disk.values() if v < 3072)
    assert facts.partitions["day=d3"].small_files == 0  # 1000 rows: one file over 3 KB
    assert facts.deletion_vector_files == 0 and facts.deleted_rows == 0  # delta-rs writes none
    assert facts.checkpoint_version == 2 and facts.versions_since_checkpoint == 4
    age = facts.checkpoint_age_s(int(time.time() * 1000))
    assert age is not None and 0 <= age < 600
    assert facts.commit_files == 7 and facts.oldest_version_in_log == 0


def test_a_table_never_checkpointed_has_no_checkpoint_age(tmp_path: Path) -> None:
    path = tmp_path / "t"
    write_deltalake(str(path), rows(range(3), "d1"))
    facts = read_facts(DeltaTimeline(str(path)), target_file_size=128 * MiB, small_file_ratio=0.75)
    assert facts.checkpoint_version is None and facts.checkpoint_age_s(0) is None
    assert facts.versions_since_checkpoint == 1 and facts.small_files == 1
    assert facts.target_file_size == 128 * MiB  # no delta.targetFileSize: the policy's
    shutil.rmtree(path / "_delta_log")
    with pytest.raises(NotADeltaTable):
        read_facts(DeltaTimeline(str(path)), target_file_size=1, small_file_ratio=1)
