"""A Hudi table's timeline and file-system view as lakewarden reads them
(lakewarden.formats.hudi), on real tables Spark's Hudi datasource wrote (`hudi_tables`),
checked against hudi-rs, an independent reader, and the files on disk."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from conftest import HudiTables
from hudi import HudiTable

from lakewarden.formats.hudi.facts import read_facts
from lakewarden.formats.hudi.timeline import HudiTimeline, NotAHudiTable, UnsupportedTableVersion


def _hudi_rs_completed(path: str) -> list[str]:
    timeline = HudiTable(path).get_timeline()
    instants = [
        *timeline.get_completed_commits(),
        *timeline.get_completed_deltacommits(),
        *timeline.get_completed_replacecommits(),
    ]
    return sorted(i.timestamp for i in instants)


def test_completed_instants_are_commits_in_completion_order(hudi_tables: HudiTables) -> None:
    for path, actions in ((hudi_tables.mor, "deltacommit"), (hudi_tables.cow, "commit")):
        page = HudiTimeline(path).since(None, 100)
        ids = [c.id for c in page.commits]
        assert sorted(ids) == _hudi_rs_completed(path) and len(ids) == 3
        seqs = [c.seq or 0 for c in page.commits]
        assert seqs == sorted(seqs) and all(seqs)
        assert {c.operation for c in page.commits} == {actions}
        assert [c.parent for c in page.commits] == [None, *ids[:-1]]
        assert not page.cursor_off_history
    mor = HudiTimeline(hudi_tables.mor).since(None, 100).commits
    assert [c.summary["records-written"] for c in mor] == ["300", "30", "30"]
    assert [c.summary["operation-type"] for c in mor] == ["INSERT", "UPSERT", "UPSERT"]
    assert int(mor[1].summary["log-files-written"]) > 0  # upserts of MOR land in log files
    cow = HudiTimeline(hudi_tables.cow).since(None, 100).commits
    assert cow[-1].summary["records-deleted"] == "10"


def test_since_pages_from_a_cursor(hudi_tables: HudiTables) -> None:
    timeline = HudiTimeline(hudi_tables.cow)
    first = timeline.since(None, 2).commits
    rest = timeline.since(first[-1].id, 100).commits
    assert [c.id for c in [*first, *rest]] == _hudi_rs_completed(hudi_tables.cow)
    assert rest[0].parent == first[-1].id
    assert timeline.since(rest[-1].id, 100).commits == []
    gone = timeline.since("20000101000000000", 100)  # archived or restored away
    assert gone.cursor_off_history and len(gone.commits) == 3
    assert timeline.head_token() == timeline.completed()[-1].file_name


def test_a_scheduled_compaction_is_pending_with_its_plan(hudi_tables: HudiTables) -> None:
    """hudi-rs shows no pending instants; the timeline's files do, and the plan (Avro)
    names each file group's log files."""
    timeline = HudiTimeline(hudi_tables.mor)
    [pending] = timeline.pending()
    assert pending.action == "compaction" and pending.state == "requested"
    assert pending.requested not in _hudi_rs_completed(hudi_tables.mor)
    plan = timeline.read_instant(pending)
    logs = [p for op in plan["operations"] for p in op["deltaFilePaths"]]
    assert logs and all(".log." in p for p in logs)
    assert timeline.head_token() == timeline.completed()[-1].file_name  # not the plan


def test_facts_count_file_groups_and_log_files(hudi_tables: HudiTables) -> None:
    facts = read_facts(hudi_tables.mor)
    on_disk = [
        p
        for p in Path(hudi_tables.mor).rglob("*")
        if ".hoodie" not in p.parts and p.suffix != ".crc"  # Hadoop's local checksums
    ]
    logs = [p for p in on_disk if ".log." in p.name]
    bases = [p for p in on_disk if p.suffix == ".parquet"]
    assert sorted(facts.partitions) == ["r0", "r1", "r2"]
    assert facts.log_files == len(logs) and facts.log_bytes == sum(p.stat().st_size for p in logs)
    assert sum(p.base_files for p in facts.partitions.values()) == len(bases)
    assert facts.file_groups == len(bases)  # one base file per group, none rewritten yet
    assert max(facts.log_files_per_slice) == 2  # the two upserts, per touched group
    assert facts.pending == {"compaction": 1} and facts.timeline_length == 3
    assert facts.table_type == "MERGE_ON_READ" and facts.table_version == 9
    cow = read_facts(hudi_tables.cow)
    assert cow.log_files == 0 and list(cow.partitions) == [""]


def test_hudi_rs_reads_what_the_writer_wrote(hudi_tables: HudiTables) -> None:
    """The independent reader merges the MOR table's log files into its rows: the tables
    are what the steps wrote (the ground the other tests stand on)."""
    assert hudi_rows(hudi_tables.mor) == hudi_tables.mor_rows
    assert hudi_rows(hudi_tables.cow) == hudi_tables.cow_rows


def hudi_rows(path: str) -> dict[int, int]:
    table = pa.Table.from_batches(HudiTable(path).read())
    return dict(zip(table.column("id").to_pylist(), table.column("v").to_pylist(), strict=True))


def test_a_path_that_is_not_a_hudi_table_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(NotAHudiTable, match=f"{tmp_path} is not a Hudi table"):
        HudiTimeline(str(tmp_path))
    (tmp_path / ".hoodie").mkdir()
    (tmp_path / ".hoodie" / "hoodie.properties").write_text("hoodie.table.version=5\n")
    with pytest.raises(UnsupportedTableVersion, match="table version 5 is not supported"):
        HudiTimeline(str(tmp_path))
