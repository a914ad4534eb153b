"""Clustering / Z-order planning as pure logic."""

from __future__ import annotations

import pytest

from lakewarden.catalog import TableRef
from lakewarden.kinds.base import EventFacts, PlanRejected
from lakewarden.kinds.sorting import event_verdict, plan_from_files, run
from lakewarden.metadata import DataFile
from lakewarden.policy import ClusteringPolicy, ZOrderPolicy


def _f(i: int, region: str, lo: int, hi: int) -> DataFile:
    return DataFile(f"{region}/{i}", 100, 10, 0, (("region", region),), bounds={"a": (lo, hi)})


def test_verdict_counts_files_written_since_the_last_rewrite() -> None:
    policy = ClusteringPolicy(enabled=True, columns=["a"], min_changed_files=10)
    assert event_verdict(policy, EventFacts({}, 10)).needed
    v = event_verdict(policy, EventFacts({}, 9))
    assert not v.needed and "9 data files written" in v.reason


def test_only_poor_partitions_are_rewritten_and_named_by_identity_values() -> None:
    policy = ClusteringPolicy(enabled=True, columns=["a"], max_files_per_lookup=2)
    overlapping = [_f(i, "eu", 0, 100) for i in range(5)]
    sorted_ = [_f(i, "us", i * 10, i * 10 + 9) for i in range(5)]
    outcome = plan_from_files("clustering", policy, 1, overlapping + sorted_, {"region": "region"})
    assert outcome.plan is not None
    assert outcome.plan["partition_filter"] == [{"region": "eu"}]
    assert outcome.plan["strategy"] == "sort" and outcome.plan["files_per_lookup_before"] == 5.0
    # Every partition poor: no filter, the whole table.
    whole = plan_from_files(
        "zorder",
        ZOrderPolicy(enabled=True, columns=["a", "b"]),
        1,
        overlapping,
        {"region": "region"},
    )
    assert whole.plan is not None and whole.plan["partition_filter"] is None


def test_good_layout_is_skipped_with_the_numbers() -> None:
    policy = ClusteringPolicy(enabled=True, columns=["a"])
    outcome = plan_from_files(
        "clustering", policy, 1, [_f(i, "us", i * 10, i * 10 + 9) for i in range(5)], {}
    )
    assert outcome.plan is None and "layout is good" in outcome.reason


@pytest.mark.parametrize(
    "bad",
    [
        {"strategy": "binpack"},
        {"columns": ["a; drop"]},
        {"columns": []},
        {"partition_filter": [{"region') or ('1": "x"}]},
        {"options": {"rewrite-all": "yes"}},
    ],
)
def test_tampered_plans_are_rejected_before_spark(bad: dict) -> None:
    plan = {
        "action": "rewrite_data_files",
        "strategy": "zorder",
        "columns": ["a", "b"],
        "options": {"rewrite-all": "true"},
        "partition_filter": None,
    }
    with pytest.raises(PlanRejected):
        run(None, "lake", TableRef("ns", "t"), {**plan, **bad})  # type: ignore[arg-type]
