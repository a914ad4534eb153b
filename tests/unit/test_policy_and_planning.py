"""Pure logic: policy validation, the commit-summary verdict, compaction planning."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from lakewarden.kinds.base import EventFacts
from lakewarden.kinds.compaction import event_verdict, plan_from_files
from lakewarden.metadata import DataFile
from lakewarden.policy.model import CompactionPolicy, MiB, parse_policy


def test_policy_defaults_fill_in() -> None:
    p = parse_policy(None)
    assert p.compaction.enabled
    assert p.compaction.target_file_size_bytes == 128 * MiB
    assert p.compaction.small_file_threshold_bytes == 96 * MiB


@pytest.mark.parametrize(
    "raw, fragment",
    [
        ({"compaction": {"target_file_size_bytes": 10}}, "target_file_size_bytes"),
        ({"compaction": {"min_small_files": 1}}, "min_small_files"),
        ({"compaction": {"small_file_ratio": 0}}, "small_file_ratio"),
        ({"compaction": {"bogus": 1}}, "bogus"),
        ({"compactoin": {}}, "compactoin"),
        ({"compaction": {"min_input_files": 50, "min_small_files": 10}}, "min_input_files"),
    ],
)
def test_policy_rejects_bad_values_naming_the_field(raw: dict, fragment: str) -> None:
    with pytest.raises(ValidationError) as err:
        parse_policy(raw)
    assert fragment in str(err.value)


def _facts(files: int, size: int, records: int = 0, deletes: int = 0) -> EventFacts:
    return EventFacts(
        {
            "total-data-files": str(files),
            "total-files-size": str(size),
            "total-records": str(records),
            "total-position-deletes": str(deletes),
        },
        files_added_since_last_task=0,
    )


def test_verdict_counts_reducible_files_against_target() -> None:
    policy = CompactionPolicy(target_file_size_bytes=100 * MiB, min_small_files=10)
    # 30 files holding 250 MiB need 3 files at 100 MiB: 27 reducible.
    v = event_verdict(policy, _facts(30, 250 * MiB))
    assert v.needed
    assert v.metrics["reducible_files"] == 27
    assert v.metrics["files_needed_at_target"] == 3
    assert v.expected_gain == {"data_files_removed_estimate": 27}
    assert "27 reducible files >= min_small_files 10" in v.reason


def test_verdict_large_files_with_a_few_small_ones_do_not_trigger() -> None:
    policy = CompactionPolicy(target_file_size_bytes=100 * MiB, min_small_files=10)
    # 100 full files and 5 tiny ones: 101 needed, 4 reducible.
    v = event_verdict(policy, _facts(105, 100 * 100 * MiB + 5 * MiB))
    assert not v.needed
    assert v.metrics["reducible_files"] == 4
    assert "< min_small_files 10" in v.reason


def test_verdict_respects_disabled_policy() -> None:
    policy = CompactionPolicy(enabled=False)
    v = event_verdict(policy, _facts(1000, 1000))
    assert not v.needed and "disabled" in v.reason


def test_verdict_on_empty_table() -> None:
    v = event_verdict(CompactionPolicy(), EventFacts({}, 0))
    assert not v.needed and v.metrics["total_data_files"] == 0


def _files(partition: str, n: int, size: int) -> list[DataFile]:
    return [
        DataFile(f"s3://b/{partition}/{i}.parquet", size, 10, 0, (("region", partition),))
        for i in range(n)
    ]


def test_plan_picks_only_partitions_with_enough_small_files() -> None:
    policy = CompactionPolicy(target_file_size_bytes=10_000, min_small_files=5, min_input_files=5)
    files = _files("a", 20, 1000) + _files("b", 3, 1000) + _files("c", 4, 20_000)
    outcome = plan_from_files(policy, 42, files)
    assert outcome.plan is not None
    plan = outcome.plan
    assert [p["partition"] for p in plan["partitions"]] == [{"region": "a"}]
    a = plan["partitions"][0]
    assert a["small_files"] == 20 and a["rewrite_bytes"] == 20_000
    assert a["expected_files_after"] == 2  # 20,000 bytes at 10,000 per file
    assert plan["files_before"] == 27
    assert plan["expected_files_after"] == 27 - 20 + 2
    assert plan["options"]["min-input-files"] == "5"
    assert plan["options"]["min-file-size-bytes"] == "7500"
    assert plan["snapshot_id"] == 42


def test_plan_skips_with_reason_when_nothing_qualifies() -> None:
    policy = CompactionPolicy(target_file_size_bytes=10_000, min_small_files=5, min_input_files=5)
    outcome = plan_from_files(policy, 7, _files("a", 4, 1000) + _files("b", 10, 50_000))
    assert outcome.plan is None
    assert "no partition has >= 5 files under 7500 bytes" in outcome.reason
    assert "4 small of 14 data files in 2 partitions" in outcome.reason


def test_plan_skips_when_merging_would_not_reduce_files() -> None:
    # 6 files of 7,400 bytes (small by ratio) merge into 5 at target 10,000: still one fewer.
    policy = CompactionPolicy(target_file_size_bytes=10_000, min_small_files=5, min_input_files=5)
    outcome = plan_from_files(policy, 7, _files("a", 6, 7400))
    assert outcome.plan is not None
    # 5 files of 9,999 bytes would need 5 files again: nothing gained, skipped.
    outcome = plan_from_files(
        CompactionPolicy(
            target_file_size_bytes=10_000,
            small_file_ratio=1.0,
            min_small_files=5,
            min_input_files=5,
        ),
        7,
        _files("a", 5, 9999),
    )
    assert outcome.plan is None


def test_plan_without_snapshot() -> None:
    outcome = plan_from_files(CompactionPolicy(), None, [])
    assert outcome.plan is None and "no snapshot" in outcome.reason


def test_verdict_fires_on_deleted_row_ratio() -> None:
    policy = CompactionPolicy(min_small_files=1000, delete_ratio_threshold=0.2)
    v = event_verdict(policy, _facts(3, 300 * MiB, records=1000, deletes=250))
    assert v.needed and "deleted-row ratio 0.25 >= 0.2" in v.reason
    assert v.expected_gain == {"delete_rows_purged_estimate": 250}


def test_plan_rewrites_files_hollowed_out_by_deletes() -> None:
    policy = CompactionPolicy(
        target_file_size_bytes=10_000,
        min_small_files=5,
        min_input_files=5,
        delete_ratio_threshold=0.3,
    )
    big = [
        DataFile(f"p/{i}", 9000, 100, 0, (), deleted_records=d) for i, d in enumerate((50, 10, 0))
    ]
    outcome = plan_from_files(policy, 1, big, delete_files=2)
    assert outcome.plan is not None
    part = outcome.plan["partitions"][0]
    assert part["files_with_deletes"] == 1 and part["small_files"] == 0
    assert outcome.plan["rewrite_position_deletes"] is True
    assert outcome.plan["options"]["delete-ratio-threshold"] == "0.3000"


def test_after_a_skipped_plan_the_verdict_waits_for_new_files() -> None:
    policy = CompactionPolicy(target_file_size_bytes=100 * MiB, min_small_files=10)
    summary = _facts(100, 100 * MiB).summary  # e.g. 100 partitions, one small file each
    waiting = event_verdict(policy, EventFacts(summary, 3, last_task_state="skipped"))
    assert not waiting.needed and "found nothing to merge" in waiting.reason
    assert event_verdict(policy, EventFacts(summary, 10, last_task_state="skipped")).needed
    assert event_verdict(policy, EventFacts(summary, 0, last_task_state="succeeded")).needed


def test_tiered_compaction_merges_a_full_tier_and_leaves_larger_files() -> None:
    # threshold 750_000 with 2 tiers: L0 < 187_500 <= L1 < 750_000
    policy = CompactionPolicy(
        target_file_size_bytes=1_000_000, min_small_files=5, min_input_files=5, tiers=2
    )
    assert policy.tier_bounds() == [187_500, 750_000]
    tiny = _files("a", 8, 10_000)  # L0: full (min_input_files 5)
    mid = _files("a", 2, 300_000)  # L1: not full (tier_min_files 3)
    big = _files("a", 2, 900_000)  # above the threshold: never rewritten
    outcome = plan_from_files(policy, 1, tiny + mid + big)
    assert outcome.plan is not None
    plan = outcome.plan
    assert plan["tier"] == {"level": 0, "files_below_bytes": 187_500, "output_file_bytes": 750_000}
    assert plan["files_to_rewrite"] == 8  # only the tiny files
    assert plan["options"]["min-file-size-bytes"] == "187500"
    assert plan["options"]["target-file-size-bytes"] == "750000"
    assert "tier L0" in outcome.reason
    assert plan["options"]["max-file-size-bytes"] == "1800000"  # large files are not split


def test_the_largest_full_tier_is_merged_though_the_lowest_is_full_too() -> None:
    """While every round brings a full lowest tier, the tiers above must still merge: a
    tier counts only its own files, and the largest full one goes first (B3)."""
    policy = CompactionPolicy(
        target_file_size_bytes=1_000_000, min_small_files=5, min_input_files=5, tiers=2
    )
    tiny, mid = _files("a", 8, 10_000), _files("a", 3, 300_000)
    outcome = plan_from_files(policy, 1, tiny + mid)
    assert outcome.plan is not None and outcome.plan["tier"]["level"] == 1
    assert outcome.plan["files_to_rewrite"] == 11  # the tier and the small files under it
    assert outcome.plan["options"]["target-file-size-bytes"] == "1000000"
    # Counted with the tiny files under it, L1 would be full with one file of its own.
    one_mid = plan_from_files(policy, 1, tiny + mid[:1])
    assert one_mid.plan is not None and one_mid.plan["tier"]["level"] == 0
    # Its own files in another partition do not add up.
    split = plan_from_files(policy, 1, tiny + mid[:2] + _files("b", 2, 300_000))
    assert split.plan is not None and split.plan["tier"]["level"] == 0
    # tier_min_files is the upper tiers' count.
    strict = policy.model_copy(update={"tier_min_files": 4})
    held = plan_from_files(strict, 1, tiny + mid)
    assert held.plan is not None and held.plan["tier"]["level"] == 0


def test_a_quiet_tiered_table_gets_a_major_merge_of_every_tier() -> None:
    """A tiered table keeps up to tier_min_files - 1 files per tier while it is written;
    once quiet, each partition's small files of every tier merge into target-size files."""
    policy = CompactionPolicy(
        target_file_size_bytes=1_000_000, min_small_files=5, min_input_files=5, tiers=2
    )
    leftovers = _files("a", 2, 300_000) + _files("a", 2, 10_000) + _files("b", 1, 10_000)
    assert plan_from_files(policy, 1, leftovers).plan is None  # no tier full
    outcome = plan_from_files(policy, 1, leftovers, quiet_minutes=75.0)
    assert outcome.plan is not None
    plan = outcome.plan
    assert plan["tier"] is None and plan["major_merge"] == {"quiet_minutes": 75.0}
    assert plan["files_to_rewrite"] == 4  # partition a's; b's one file stays
    assert plan["options"]["target-file-size-bytes"] == "1000000"
    assert plan["options"]["min-input-files"] == "2"
    assert "major merge: no data commit for 75 min" in outcome.reason
    # The sweep looks that often, on tiered tables only.
    assert policy.sweep_minutes() == 60
    assert CompactionPolicy().sweep_minutes() is None
    assert policy.model_copy(update={"tier_quiet_merge_minutes": None}).sweep_minutes() is None


def test_a_v3_plan_applies_deletion_vectors_and_runs_no_position_delete_rewrite() -> None:
    """Deletion vectors go with their data file's rewrite; Iceberg 1.12's
    rewrite_position_delete_files does nothing to them, so it is not asked for."""
    policy = CompactionPolicy(
        target_file_size_bytes=10_000, min_small_files=5, delete_ratio_threshold=0.3
    )
    big = [
        DataFile(f"p/{i}", 9000, 100, 0, (), deleted_records=d) for i, d in enumerate((50, 10, 0))
    ]
    outcome = plan_from_files(policy, 1, big, delete_files=2, deletion_vectors=2)
    assert outcome.plan is not None
    assert outcome.plan["partitions"][0]["files_with_deletes"] == 1
    assert outcome.plan["rewrite_position_deletes"] is False
    assert outcome.plan["deletion_vectors"] == 2
    assert "2 deletion vector(s) (format v3)" in outcome.reason
    # a v3 table still holding a v2 position-delete file (written before its upgrade)
    mixed = plan_from_files(policy, 1, big, delete_files=3, deletion_vectors=2)
    assert mixed.plan is not None and mixed.plan["rewrite_position_deletes"] is True
