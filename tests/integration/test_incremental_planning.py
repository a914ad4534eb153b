"""Incremental planning on a real table (issue 32 §5): pyiceberg writes Parquet files to the
test catalog; after an append to one partition, the compaction planner (as a worker calls
it) reads only the new manifest, and plans what a full listing plans."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from helpers import append_batches, current, make_table

from lakewarden import manifest_cache
from lakewarden.kinds import compaction
from lakewarden.manifest_cache import ManifestCache
from lakewarden.policy.model import CompactionPolicy
from lakewarden.runtime import Runtime


def test_after_an_append_to_one_partition_the_plan_reads_one_manifest_and_is_the_full_plan(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = append_batches(make_table(rt, name="incremental"), 6)  # regions a and b
    policy = CompactionPolicy(min_input_files=2)
    cache = ManifestCache(max_files=10_000, full_every=1_000)
    monkeypatch.setattr(manifest_cache._shared, "_one", cache)
    now = datetime.now(UTC)
    before = compaction.plan(policy, table, now)  # the last plan: every manifest read
    assert before.plan is not None and "manifests" not in before.reason  # nothing cached

    table = append_batches(table, 1, start=1_000, regions=("a",))
    incremental = compaction.plan(policy, table, now)
    assert "listed 1 of 7 manifests, 6 from the plan cache" in incremental.reason

    monkeypatch.setattr(manifest_cache._shared, "_one", ManifestCache(max_files=0, full_every=1))
    full = compaction.plan(policy, table, now)
    assert "manifests" not in full.reason  # listed in full, as before incremental planning
    assert incremental.plan == full.plan
    assert incremental.plan is not None
    by_region = {p["partition"]["region"]: p for p in incremental.plan["partitions"]}
    assert (by_region["a"]["small_files"], by_region["b"]["small_files"]) == (7, 6)
    assert incremental.plan["snapshot_id"] == current(table).snapshot_id
