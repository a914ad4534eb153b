"""The stats kind on Delta and Hudi tables, judged from their facts alone (issue 32 §1):
a Delta table's files without statistics and the partitions that hold them
(`kinds.delta_stats`); a Hudi table's column-stats index, built only where the writer keeps
it (`kinds.hudi_stats`). Every skip says why."""

from __future__ import annotations

from lakewarden.formats.delta.facts import DeltaFacts, PartitionFacts
from lakewarden.formats.hudi.column_stats import IndexState
from lakewarden.kinds.delta_stats import stats_verdict
from lakewarden.kinds.hudi_stats import plan, verdict
from lakewarden.policy.model import StatsPolicy

ON = StatsPolicy(enabled=True)


def _delta(without: dict[str, int], reader_features: list[str] | None = None) -> DeltaFacts:
    facts = DeltaFacts(
        path="/wh/lake/t",
        version=3,
        min_reader_version=1,
        min_writer_version=2,
        reader_features=reader_features or [],
        writer_features=[],
        partition_columns=["day"],
        configuration={},
        target_file_size=1000,
        small_file_threshold=750,
        commit_files=4,
        oldest_version_in_log=0,
        checkpoint_version=None,
        checkpoint_at_ms=None,
    )
    for key, n in without.items():
        facts.partitions[key] = PartitionFacts(files=2, bytes=200, files_without_stats=n)
        facts.file_sizes += [100, 100]
    return facts


def test_delta_partitions_with_files_without_statistics_are_due() -> None:
    found, due = stats_verdict(ON, _delta({"day=a": 2, "day=b": 0, "day=c": 1}))
    assert found.needed and due == ["day=a", "day=c"]
    assert "3 of 6 live file(s) have no statistics" in found.reason
    assert found.metrics == {"files": 6, "files_without_stats": 3, "partitions_due": 2}


def test_delta_skips_say_why() -> None:
    fresh, due = stats_verdict(ON, _delta({"day=a": 0}))
    assert not fresh.needed and due == []
    assert "statistics are fresh: all 2 live file(s) carry Delta's statistics" in fresh.reason
    off, _ = stats_verdict(StatsPolicy(), _delta({"day=a": 1}))
    assert not off.needed and off.reason == "stats is disabled by policy"
    dv, _ = stats_verdict(ON, _delta({"day=a": 1}, ["deletionVectors"]))
    assert not dv.needed and "statsRecomputeNotSupportedOnDvTables" in dv.reason


def _hudi(**kw: object) -> IndexState:
    base: dict[str, object] = {
        "table_version": 9,
        "metadata_table": True,
        "built": False,
        "inflight": False,
        "latest_write": "20261126120000000",
    }
    return IndexState(**{**base, **kw})  # type: ignore[arg-type]


def test_hudi_index_is_built_where_the_metadata_table_lacks_it() -> None:
    outcome = plan(StatsPolicy(enabled=True, columns=["id"]), _hudi(), "/wh/t", set())
    assert outcome.plan is not None and outcome.plan["columns"] == ["id"]
    assert outcome.plan["action"] == "build_column_stats" and outcome.plan["resume_instant"] is None
    assert "no column-stats index" in outcome.reason
    # an indexing of ours left pending: resumed, not scheduled again
    mine = _hudi(pending_indexing=["20261126130000000"])
    found, resume = verdict(ON, mine, {"20261126130000000"})
    assert found.needed and resume == "20261126130000000"


def test_hudi_never_fights_the_writer_and_says_why() -> None:
    def said(state: IndexState, ours: set[str] | None = None, **policy: object) -> str:
        found, _ = verdict(StatsPolicy(enabled=True, **policy), state, ours or set())  # type: ignore[arg-type]
        assert not found.needed
        return found.reason

    assert "exists (3 file(s), columns ['id', 'v']) and is current" in said(
        _hudi(built=True, synced=True, columns=["id", "v"], index_files=3)
    )
    assert "does not hold the newest write" in said(_hudi(built=True, synced=False))
    assert "not the policy's ['x']" in said(_hudi(built=True, columns=["id"]), columns=["x"])
    assert "no metadata table" in said(_hudi(metadata_table=False))
    assert "table version 6" in said(_hudi(table_version=6))
    assert "someone else started" in said(_hudi(pending_indexing=["20261126130000000"]))
    gone = said(_hudi(completed_indexing=["20261126130000000"]), {"20261126130000000"})
    assert "lakewarden built (indexing 20261126130000000) is gone" in gone
    assert verdict(StatsPolicy(), _hudi(), set())[0].reason == "stats is disabled by policy"
