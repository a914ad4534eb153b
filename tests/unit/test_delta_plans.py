"""What lakewarden plans on a Delta table, from its facts alone (`lakewarden.kinds.delta`):
which partitions a compaction or a Z-order rewrites, a clustered table's OPTIMIZE (never
ZORDER BY), the retention a VACUUM keeps, the log files a clean removes, and why it leaves
a table alone; and the predicate naming those partitions."""

from __future__ import annotations

from datetime import date

import pytest

from lakewarden.formats.delta.facts import DeltaFacts, PartitionFacts
from lakewarden.formats.delta.jobs import purge_sql
from lakewarden.formats.delta.log_files import LogFiles, interval_hours
from lakewarden.kinds.delta import (
    clean_verdict,
    clustering_verdict,
    compaction_and_purge,
    compaction_verdict,
    log_verdict,
    retain_hours,
    retention_hours,
    zorder_verdict,
)
from lakewarden.metadata import DataFile
from lakewarden.outcomes import PlanRejected
from lakewarden.policy.model import (
    CleanPolicy,
    ClusteringPolicy,
    CompactionPolicy,
    ZOrderPolicy,
)
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


def test_a_table_another_service_optimizes_is_left_alone_by_every_command() -> None:
    """Another optimizer in the log (`detect_delta`): compaction, purge, Z-order and
    clustering skip with its evidence; VACUUM skips only for another's VACUUMs."""
    from lakewarden.catalogs.foreign import ForeignMaintainer

    evidence = ForeignMaintainer(
        "delta-optimizer", "2 OPTIMIZE/REORG commits lakewarden did not make"
    )
    facts = _facts({"day=a": 9})
    facts.other_optimizers = {"optimize": evidence}
    facts.partition_files = {"day=a": [DataFile("f", 10, 10, 0, (), {"x": (0, 9)}, 9.0)]}
    policy = CompactionPolicy(min_input_files=3, min_small_files=3)
    verdict, purged, packed = compaction_and_purge(policy, facts)
    assert not verdict.needed and (purged, packed) == (None, None)
    assert verdict.reason.count("2 OPTIMIZE/REORG commits lakewarden did not make") == 2
    zorder, _ = zorder_verdict(ZOrderPolicy(enabled=True, columns=["x", "y"]), facts)
    assert not zorder.needed and zorder.reason == evidence.evidence
    facts.clustering_columns = ["x"]
    clustered = clustering_verdict(ClusteringPolicy(enabled=True), facts)
    assert not clustered.needed and clustered.reason == evidence.evidence
    clean = CleanPolicy(max_snapshot_age_hours=1, allow_below_safety_floors=True)
    assert clean_verdict(clean, facts, 5).needed  # their OPTIMIZEs are no VACUUMs
    facts.other_optimizers = {"vacuum": ForeignMaintainer("x", "2 VACUUM commits")}
    assert clean_verdict(clean, facts, 5).reason == "2 VACUUM commits"
    facts.other_optimizers = {"compaction": ForeignMaintainer("auto-compaction", "auto=true")}
    binpack, _ = compaction_verdict(policy, facts)
    assert not binpack.needed and binpack.reason == "auto=true"


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


def test_a_clustered_table_is_clustered_by_optimize_and_never_zordered() -> None:
    facts = _facts({})
    facts.partition_columns, facts.clustering_columns = [], ["x", "y"]
    overlapping = [DataFile(f"f{i}", 10, 10, 0, (), {"x": (0, 99), "y": (0, 99)}) for i in range(3)]
    facts.partition_files = {"": overlapping}
    zorder, due = zorder_verdict(ZOrderPolicy(enabled=True, columns=["x", "y"]), facts)
    assert not zorder.needed and due == []
    assert "CLUSTER BY x, y" in zorder.reason and "Delta refuses ZORDER BY" in zorder.reason
    verdict = clustering_verdict(ClusteringPolicy(enabled=True), facts)
    assert verdict.needed and "OPTIMIZE (liquid clustering by x, y" in verdict.reason
    other = clustering_verdict(ClusteringPolicy(enabled=True, columns=["y"]), facts)
    assert not other.needed and "not the table's clustering columns x, y" in other.reason
    facts.partition_files = {"": overlapping[:1]}
    laid = clustering_verdict(ClusteringPolicy(enabled=True), facts)
    assert not laid.needed and "opens at most 1" in laid.reason


def test_an_unclustered_table_is_the_zorder_kinds() -> None:
    verdict = clustering_verdict(ClusteringPolicy(enabled=True, columns=["x"]), _facts({}))
    assert not verdict.needed and "no clustering columns" in verdict.reason
    assert "the zorder kind Z-orders it" in verdict.reason


DAY_MS = 86_400_000
NOW_MS = 100 * DAY_MS


def _log(commits: dict[int, float], checkpoints: dict[int, float], hours: float = 720) -> LogFiles:
    """A log whose commits and checkpoints were written that many days before NOW_MS."""
    log = LogFiles(retention_hours=hours, cleanup_enabled=True)
    log.files = sorted(
        [(v, f"{v:020d}.json", 10, NOW_MS - int(d * DAY_MS)) for v, d in commits.items()]
        + [
            (v, f"{v:020d}.checkpoint.parquet", 10, NOW_MS - int(d * DAY_MS))
            for v, d in checkpoints.items()
        ]
    )
    return log


def test_old_log_files_go_only_before_a_checkpoint_as_old() -> None:
    # versions 0-3 forty days old, 4-5 new; never checkpointed: nothing can go yet, and a
    # checkpoint at the head is due for 0-3
    log = _log({0: 40, 1: 40, 2: 40, 3: 40, 4: 1, 5: 0}, {})
    assert log.removable(NOW_MS) == [] and log.checkpoint_needed(NOW_MS, 5) == [0, 1, 2, 3]
    # a new checkpoint at 5: still nothing goes (it is younger than the retention), and
    # none is needed any more
    log = _log({0: 40, 1: 40, 2: 40, 3: 40, 4: 1, 5: 0}, {5: 0})
    assert log.removable(NOW_MS) == [] and log.checkpoint_needed(NOW_MS, 5) == []
    # a checkpoint at 3, itself old: 0-2 go, never 3 or its checkpoint
    log = _log({0: 40, 1: 40, 2: 40, 3: 40, 4: 1, 5: 0}, {3: 39})
    assert log.removable(NOW_MS) == [f"{v:020d}.json" for v in range(3)]
    # a 60-day retention keeps a forty-day-old log whole
    log = _log({0: 40, 1: 40, 2: 40, 3: 40, 4: 1}, {3: 39}, hours=1440)
    assert log.removable(NOW_MS) == [] and log.checkpoint_needed(NOW_MS, 4) == []


def test_log_cleanup_due_says_why_and_respects_the_tables_switch() -> None:
    facts = _facts({})
    facts.version = 5
    facts.log = _log({0: 40, 1: 40, 2: 40, 3: 40, 4: 1, 5: 0}, {3: 39})
    verdict = log_verdict(facts, NOW_MS)
    assert verdict.needed and "3 log file(s) older than the table's log retention (720 h)" in (
        verdict.reason
    )
    facts.log.cleanup_enabled = False
    off = log_verdict(facts, NOW_MS)
    assert not off.needed and "delta.enableExpiredLogCleanup is false" in off.reason
    assert interval_hours("interval 60 days", 1) == 1440 and interval_hours("soon", 7) == 7
