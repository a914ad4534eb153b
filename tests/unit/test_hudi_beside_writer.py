"""A rewrite's validation beside a live writer (`formats.hudi.validation`): record by
record, the records no other writer's commit wrote meanwhile must be there, unchanged and
once; those a writer rewrote are the writer's."""

from __future__ import annotations

from pathlib import Path

from lakewarden.formats.hudi.validation import Digest, KeyedRows, compare_beside_writer


def _rows(rows: dict[str, tuple[str, int]], duplicates: int = 0) -> KeyedRows:
    return KeyedRows({("r0", k): v for k, v in rows.items()}, duplicates, Digest(len(rows), 0))


BEFORE = _rows({"1": ("c1", 10), "2": ("c1", 20), "3": ("c2", 30)})


def _bad(found: dict[str, object]) -> dict[str, object]:
    return {k: found[k] for k in ("lost", "changed", "appeared", "duplicates") if found[k]}


def test_records_the_writer_rewrote_or_added_are_its_own() -> None:
    after = _rows({"1": ("c1", 10), "2": ("w9", 21), "3": ("c2", 30), "4": ("w9", 40)})
    found = compare_beside_writer(BEFORE, after, ["w9"], deletes=False)
    assert _bad(found) == {}
    assert found["records_compared"] == 2 and found["records_rewritten_by_writers"] == 1


def test_a_record_lost_changed_made_up_or_read_twice_fails() -> None:
    after = _rows({"1": ("c1", 11), "4": ("c3", 40)}, duplicates=1)
    found = compare_beside_writer(BEFORE, after, ["w9"], deletes=False)
    assert _bad(found) == {"lost": 2, "changed": 1, "appeared": 1, "duplicates": 1}


def test_a_key_gone_is_the_writers_when_it_deleted() -> None:
    after = _rows({"1": ("c1", 10)})
    assert _bad(compare_beside_writer(BEFORE, after, ["w9"], deletes=True)) == {}


def test_lakewardens_writes_keep_a_writers_table_at_its_version(tmp_path: Path) -> None:
    """Hudi 1.2's datasource write upgrades a version-6 table (a Flink writer's, Hudi 0.14)
    to 9 unless told (seen 2026-11-26: a TTL-like upsert took it from 6 to 9), and the
    writer could no longer write it: every write lakewarden makes keeps the table's own
    version, auto-upgrade off."""
    from lakewarden.formats.hudi.jobs import _write_options, keep_version

    meta = tmp_path / ".hoodie"
    meta.mkdir()
    (meta / "hoodie.properties").write_text(
        "hoodie.table.name=t\nhoodie.table.version=6\nhoodie.table.type=MERGE_ON_READ\n"
        "hoodie.table.recordkey.fields=id\nhoodie.table.partition.fields=region\n"
    )
    options = _write_options(str(tmp_path), "delete", "task-1", metadata=False)
    assert options["hoodie.write.table.version"] == "6"
    assert options["hoodie.write.auto.upgrade"] == "false"
    assert keep_version(9) == {
        "hoodie.write.table.version": "9",
        "hoodie.write.auto.upgrade": "false",
    }


def test_a_version_6_table_is_compacted_only_once_its_writer_is_quiet(tmp_path: Path) -> None:
    """A Hudi 0.14 Flink writer appended to the file slice lakewarden's compaction replaced
    (the 240 s soak lost 33 updates): on a version-6 table lakewarden plans no compaction
    until the writer's last delta commit is OLD_WRITER_QUIET_S old; a version-9 table is
    compacted beside its writer (its writer checks the plan)."""
    from lakewarden.formats.hudi.facts import HudiFacts, PartitionFacts
    from lakewarden.formats.hudi.timeline import HudiTimeline
    from lakewarden.kinds import hudi_compaction
    from lakewarden.policy.model import CompactionPolicy

    def table(version: int) -> tuple[HudiFacts, HudiTimeline, float]:
        base = tmp_path / f"v{version}"
        meta = base / ".hoodie"
        folder = meta / "timeline" if version >= 8 else meta
        folder.mkdir(parents=True)
        (meta / "hoodie.properties").write_text(
            f"hoodie.table.name=t\nhoodie.table.version={version}\n"
            "hoodie.table.type=MERGE_ON_READ\nhoodie.table.recordkey.fields=id\n"
        )
        name = "20261126120000000.deltacommit"
        if version >= 8:
            name = "20261126120000000_20261126120001000.deltacommit"
        (folder / name).write_text("{}")
        written = (folder / name).stat().st_mtime
        facts = HudiFacts(
            str(base),
            "MERGE_ON_READ",
            version,
            "20261126120000000",
            1,
            {},
            {"": PartitionFacts(file_groups=1, log_files=3)},
            [1],
            [3],
        )
        return facts, HudiTimeline(str(base)), written

    policy = CompactionPolicy(min_input_files=2, min_small_files=2)
    facts, timeline, written = table(6)
    quiet = hudi_compaction.OLD_WRITER_QUIET_S
    live = hudi_compaction.verdict(policy, facts, timeline, set(), now=written + 60)
    # Due, so its task opens (later commits find it open), but its planning waits.
    assert live.needed and "only after 900s without one" in live.reason, live.reason
    assert live.wait_s is not None and abs(live.wait_s - (quiet - 60)) < 1, live.wait_s
    later = hudi_compaction.verdict(policy, facts, timeline, set(), now=written + quiet + 1)
    assert later.needed and later.wait_s is None, later.reason
    # The planner (its delta commit written just now): no plan, planned again later.
    waiting = hudi_compaction.plan(policy, facts, timeline, set())
    assert waiting.plan is None and waiting.retry_in_s is not None, waiting
    assert quiet - 60 < waiting.retry_in_s <= quiet, waiting.retry_in_s
    facts9, timeline9, written9 = table(9)
    beside = hudi_compaction.verdict(policy, facts9, timeline9, set(), now=written9 + 60)
    assert beside.needed, beside.reason
