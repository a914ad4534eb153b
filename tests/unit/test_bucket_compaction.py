"""Pure logic: compaction of primary-key tables bucketed by key (max_files_per_bucket), the
commit verdict's bucket rule and per-bucket health."""

from __future__ import annotations

from lakewarden.health.model import LiveDelete, build
from lakewarden.kinds.base import EventFacts
from lakewarden.kinds.compaction import event_verdict, plan_from_files
from lakewarden.metadata import DataFile, KeyBucket
from lakewarden.policy.model import CompactionPolicy, Policy
from services.api.schemas import BucketsOut

BUCKETS = {0: KeyBucket("id_bucket", "id", 4)}


def _bucket(b: int, n: int, size: int, deleted: float = 0.0) -> list[DataFile]:
    return [
        DataFile(
            f"s3://t/{b}/{i}.parquet", size, 10, 0, (("id_bucket", b),), deleted_records=deleted
        )
        for i in range(n)
    ]


def _policy(**kw: int) -> CompactionPolicy:
    base = {"target_file_size_bytes": 100_000, "min_small_files": 12, "min_input_files": 5}
    return CompactionPolicy.model_validate({**base, **kw})


def test_a_bucket_over_the_limit_is_merged_even_below_min_input_files() -> None:
    files = _bucket(0, 4, 1_000) + _bucket(1, 2, 1_000)  # 4 small files: < min_input_files 5
    assert plan_from_files(_policy(), 1, files, buckets=BUCKETS).plan is None  # rule off
    outcome = plan_from_files(_policy(max_files_per_bucket=3), 1, files, buckets=BUCKETS)
    plan = outcome.plan
    assert plan is not None
    assert outcome.reason.startswith(
        "1 bucket(s) hold more than max_files_per_bucket 3 data files (most: 4); rewrite 6"
    )
    # one min-input-files for the whole run: bucket 1's two small files merge too
    assert plan["options"]["min-input-files"] == "2"
    assert plan["options"]["delete-file-threshold"] == "1"
    assert [p.get("over_bucket_limit", False) for p in plan["partitions"]] == [True, False]
    assert plan["buckets"] == {
        "field": "id_bucket",
        "max_files_per_bucket": 3,
        "buckets": 2,
        "most_data_files": 4,
        "over_limit": 1,
    }
    # a table without a bucket on its key: the rule has nothing to count, and says so
    unbucketed = plan_from_files(_policy(max_files_per_bucket=3), 1, files, buckets={})
    assert unbucketed.plan is None
    assert unbucketed.reason.endswith(
        "does nothing here: no partition field buckets the key "
        "(bucket(N, key) on an identifier field)"
    )


def test_a_keyed_table_rewrites_every_data_file_a_delete_applies_to() -> None:
    files = _bucket(0, 1, 90_000, deleted=1) + _bucket(1, 1, 90_000)  # 10% deleted < 20%
    assert plan_from_files(_policy(), 1, files, 1, BUCKETS).plan is None
    plan = plan_from_files(_policy(max_files_per_bucket=8), 1, files, 1, BUCKETS).plan
    assert plan is not None and plan["files_to_rewrite"] == 1
    assert plan["options"]["remove-dangling-deletes"] == "true"


def test_tiers_apply_within_an_over_full_bucket() -> None:
    # threshold 75_000, 2 tiers: L0 < 18_750 <= L1 < 75_000
    policy = _policy(max_files_per_bucket=4, tiers=2)
    files = _bucket(0, 3, 1_000) + _bucket(0, 1, 40_000) + _bucket(0, 1, 90_000)
    plan = plan_from_files(policy, 1, files, buckets=BUCKETS).plan
    assert plan is not None
    assert plan["tier"]["level"] == 0 and plan["files_to_rewrite"] == 3  # the L1 file stays
    # Over the limit a bucket merges any 2 files: two of L1's are a full tier then.
    files = _bucket(0, 3, 1_000) + _bucket(0, 2, 40_000)
    plan = plan_from_files(policy, 1, files, buckets=BUCKETS).plan
    assert plan is not None and plan["tier"]["level"] == 1 and plan["files_to_rewrite"] == 5


def test_the_verdict_defers_the_bucket_rule_to_the_planner() -> None:
    summary = {"total-data-files": "9", "total-files-size": "900000", "total-records": "90"}
    facts = EventFacts(summary, files_added_since_last_task=1)
    assert not event_verdict(_policy(), facts).needed
    verdict = event_verdict(_policy(max_files_per_bucket=8), facts)
    assert verdict.needed and "needs the planner's file listing" in verdict.reason
    assert not event_verdict(_policy(max_files_per_bucket=9), facts).needed


def test_health_counts_files_and_deletes_per_bucket() -> None:
    policy = Policy.model_validate({"compaction": {"max_files_per_bucket": 2}})
    data = _bucket(0, 3, 1_000) + _bucket(1, 1, 1_000)
    deletes = [
        LiveDelete((("id_bucket", 0),), "equality", 4),
        LiveDelete((("id_bucket", 0),), "position", 2),
        LiveDelete((("id_bucket", 1),), "equality", 1),
    ]
    health = build(policy, 1, data, deletes, {}, None, buckets=BUCKETS)
    assert health.buckets is not None
    b0, b1 = health.buckets["per_bucket"]
    assert (b0["bucket"], b0["data_files"], b0["equality_delete_files"]) == (0, 3, 1)
    assert (b0["equality_delete_rows"], b0["position_delete_files"], b0["files"]) == (4, 1, 5)
    assert (b1["bucket"], b1["files"]) == (1, 2)
    assert health.buckets["over_limit"] == 1 and health.buckets["most_data_files"] == 3
    (signal,) = [s for s in health.signals if s.metric == "files_per_bucket"]
    assert signal.value == 3 and signal.threshold == 2
    assert BucketsOut.model_validate(health.buckets).per_bucket[0].files == 5  # the API's shape
    assert build(policy, 1, data, deletes, {}, None).buckets is None  # not bucketed by key
