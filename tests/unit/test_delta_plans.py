"""What lakewarden plans on a Delta table, from its facts alone (`lakewarden.kinds.delta`):
which partitions a compaction or a Z-order rewrites, the retention a VACUUM keeps, and
why it leaves a table alone; and the predicate naming those partitions."""

from __future__ import annotations

from datetime import date

import pytest

from lakewarden.formats.delta.facts import DeltaFacts, PartitionFacts
from lakewarden.formats.delta.jobs import purge_sql
from lakewarden.kinds.delta import (
    clean_verdict,
    compaction_and_purge,
    compaction_verdict,
    retain_hours,
    retention_hours,
    zorder_verdict,
)
from lakewarden.metadata import DataFile
from lakewarden.outcomes import PlanRejected
from lakewarden.policy.model import CleanPolicy, CompactionPolicy, ZOrderPolicy
from lakewarden.spark.sql import partition_predicate


def _facts(small: dict[str, int], **config: str) -> DeltaFacts:
    facts = DeltaFacts(
        path="/wh/lake/t",
        version=3,
        min_reader_version=1,
        min_writer_version=2,
        reader_features=[],
        writer_features=[],
        partition_columns=["day"],
        configuration=dict(config),
        target_file_size=1000,
        small_file_threshold=750,
        commit_files=4,
        oldest_version_in_log=0,
        checkpoint_version=None,
        checkpoint_at_ms=None,
        columns=["id", "day", "x", "y"],
    )
    for key, n in small.items():
        facts.partitions[key] = PartitionFacts(files=n, bytes=100 * n, small_files=n)
        facts.partition_values[key] = {"day": key.split("=")[1]}
        facts.file_sizes += [100] * n
    return facts


def test_compaction_takes_only_partitions_with_enough_small_files() -> None:
    policy = CompactionPolicy(min_input_files=3, min_small_files=4)
    verdict, due = compaction_verdict(policy, _facts({"day=a": 3, "day=b": 2, "day=c": 3}))
    assert verdict.needed and due == ["day=a", "day=c"]
    assert "6 small files" in verdict.reason
    few, due = compaction_verdict(policy, _facts({"day=a": 3, "day=b": 2}))
    assert not few.needed and due == [] and "3 small files in 1 partition(s)" in few.reason
    none, _ = compaction_verdict(policy, _facts({"day=a": 2}))
    assert "no partition has min_input_files 3" in none.reason and "most: 2 in day=a" in none.reason


def test_a_table_whose_writer_compacts_is_left_alone() -> None:
    facts = _facts({"day=a": 9}, **{"delta.autoOptimize.autoCompact": "true"})
    verdict, _ = compaction_verdict(CompactionPolicy(min_input_files=3, min_small_files=3), facts)
    assert not verdict.needed and "autoCompact=true: the writer compacts" in verdict.reason


def test_zorder_where_a_lookup_opens_many_files() -> None:
    facts = _facts({})
    overlapping = [DataFile(f"f{i}", 10, 10, 0, (), {"x": (0, 99), "y": (0, 99)}) for i in range(3)]
    disjoint = [DataFile(f"g{i}", 10, 10, 0, (), {"x": (i, i), "y": (i, i)}) for i in range(3)]
    facts.partition_files = {"day=a": overlapping, "day=b": disjoint}
    policy = ZOrderPolicy(enabled=True, columns=["x", "y"], max_files_per_lookup=1.5)
    verdict, due = zorder_verdict(policy, facts)
    assert verdict.needed and due == ["day=a"] and "up to 3.0 files" in verdict.reason
    on_partition = ZOrderPolicy(enabled=True, columns=["x", "day"])
    refused, _ = zorder_verdict(on_partition, facts)
    assert not refused.needed and "day: partition column" in refused.reason
    missing, _ = zorder_verdict(ZOrderPolicy(enabled=True, columns=["x", "z"]), facts)
    assert "column(s) z not in the table" in missing.reason
    hilbert = ZOrderPolicy(
        enabled=True, columns=["x", "y"], max_files_per_lookup=1.5, curve="hilbert"
    )
    curved, _ = zorder_verdict(hilbert, facts)  # Hudi's layout strategy only
    assert not curved.needed and "curve hilbert is Hudi's only" in curved.reason


def test_vacuum_keeps_deltas_retention_unless_the_policy_consents() -> None:
    facts = _facts({})
    assert retention_hours(facts) == 168
    assert (
        retention_hours(_facts({}, **{"delta.deletedFileRetentionDuration": "interval 2 days"}))
        == 48
    )
    plain = CleanPolicy(max_snapshot_age_hours=1)
    assert retain_hours(plain, facts) == 168
    verdict = clean_verdict(plain, facts, expired=4)
    assert verdict.needed and "RETAIN 168 HOURS" in verdict.reason
    assert "holds without allow_below_safety_floors" in verdict.reason
    consented = CleanPolicy(max_snapshot_age_hours=1, allow_below_safety_floors=True)
    assert retain_hours(consented, facts) == 1
    assert "the policy consents" in clean_verdict(consented, facts, expired=4).reason
    assert not clean_verdict(consented, facts, expired=0).needed


def test_the_predicate_names_partitions_by_typed_values() -> None:
    where = partition_predicate(
        [{"day": "it's", "n": 1}, {"day": date(2026, 1, 2), "n": None}, {"ok": True}]
    )
    assert where == (
        "(`day` = 'it\\'s' AND `n` = 1) OR (`day` = DATE '2026-01-02' AND `n` IS NULL) "
        "OR (`ok` = true)"
    )
    with pytest.raises(PlanRejected):
        partition_predicate([{"day": "a\nb"}])
    with pytest.raises(PlanRejected):
        partition_predicate([{"bad col": 1}])


def test_files_hollowed_out_by_deletion_vectors_are_purged_where_they_are() -> None:
    """A partition with a file whose deletion vector hides delete_ratio_threshold of its
    rows is purged (REORG … WHERE it), beside a bin-pack or alone; a writer that compacts
    does not purge, so the purge still runs."""
    facts = _facts({"day=a": 1, "day=b": 1}, **{"delta.autoOptimize.autoCompact": "true"})
    facts.partition_files = {
        "day=a": [DataFile("a", 100, 10, 0, (), {}, 3.0)],  # 30% hidden
        "day=b": [DataFile("b", 100, 10, 0, (), {}, 1.0)],  # 10%
    }
    facts.deletion_vector_files, facts.deleted_rows = 2, 4
    policy = CompactionPolicy(min_input_files=3, min_small_files=3, delete_ratio_threshold=0.2)
    verdict, packed, purged = compaction_and_purge(policy, facts)
    assert verdict.needed and packed is None and purged == ["day=a"]
    assert "REORG … APPLY (PURGE): 1 file(s)" in verdict.reason and "day=a" in verdict.reason
    assert verdict.metrics["files_to_purge"] == 1 and verdict.metrics["deleted_rows"] == 4
    stricter = policy.model_copy(update={"delete_ratio_threshold": 0.5})
    none, packed, purged = compaction_and_purge(stricter, facts)
    assert not none.needed and packed is None and purged is None
    assert "purge: no file's deletion vector hides delete_ratio_threshold 0.5" in none.reason
    assert purge_sql("/wh/t", [{"day": "a"}]) == (
        "REORG TABLE delta.`/wh/t` WHERE (`day` = 'a') APPLY (PURGE)"
    )
    assert purge_sql("/wh/t", []) == "REORG TABLE delta.`/wh/t` APPLY (PURGE)"
