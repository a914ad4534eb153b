"""The planning of Hudi's clean and clustering, pure: which file versions the cleaner
deletes keeping N commits (its KEEP_LATEST_COMMITS rule), Hudi's file names, and the
layout strategy each policy section asks for."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from lakewarden.formats.hudi.file_versions import cleanable, group_files, parse_file
from lakewarden.kinds.hudi_clustering import strategy
from lakewarden.policy.model import ClusteringPolicy, Policy, ZOrderPolicy

FID = "6f1c4c4e-2d5e-4b8f-9a53-5f3c0c1e8a2b-0"
T1, T2, T3, T4 = "20261126010101000", "20261126010202000", "20261126010303000", "20261126010404000"


def base(fid: str, instant: str) -> str:
    return f"{fid}_0-7-12_{instant}.parquet"


def test_hudi_file_names() -> None:
    assert parse_file(base(FID, T1)) == (FID, T1, False)
    assert parse_file(f".{FID}_{T2}.log.1_0-20-30") == (FID, T2, True)
    assert parse_file(".hoodie_partition_metadata") is None
    assert parse_file("notes.txt") is None


def test_the_cleaner_keeps_the_latest_and_the_slice_a_retained_commit_reads() -> None:
    groups = group_files(
        [
            ("r0", base(FID, T1), 100),
            ("r0", base(FID, T2), 110),
            ("r0", base(FID, T3), 120),
            ("r0", base(FID, T4), 130),
            ("r1", base("other-0", T1), 50),  # one version: never cleaned
        ]
    )
    commits = [T1, T2, T3, T4]
    # Keep 2 commits: the earliest retained is T3; T3's and T4's slices stay, and so does
    # T2's (the newest slice older than the earliest retained, Hudi's rule); T1's goes.
    two = cleanable(groups, commits, {}, 2)
    assert (two.earliest_retained, two.files, two.bytes, two.slices) == (T3, 1, 100, 1)
    one = cleanable(groups, commits, {}, 1)  # earliest retained T4: T1 and T2 go, T3 stays
    assert (one.files, one.bytes) == (2, 210)
    assert one.versions_on_storage == 5
    # No more commits than retained: nothing goes.
    assert cleanable(groups, commits, {}, 4).earliest_retained is None
    assert cleanable(groups, commits, {}, 4).files == 0


def test_log_files_go_with_their_slice_and_replaced_groups_go_whole() -> None:
    groups = group_files(
        [
            ("", base(FID, T1), 100),
            ("", f".{FID}_{T1}.log.1_0-1-2", 10),
            ("", f".{FID}_{T2}.log.1_0-1-2", 10),
            ("", base(FID, T3), 120),
            ("", base("old-0", T1), 70),
        ]
    )
    found = cleanable(groups, [T1, T2, T3, T4], {T2: [("", "old-0")]}, 1)
    # FID: the slice of T1 (base and two logs) is older than T3, the newest before T4:
    # it stays; old-0 was replaced at T2 < T4: all of it goes.
    assert (found.files, found.file_groups_replaced, found.slices) == (1, 1, 0)
    found = cleanable(groups, [T1, T2, T3, T4], {T4: [("", "old-0")]}, 1)
    assert found.files == 0  # replaced at the earliest retained commit itself: kept
    # A replaced group not yet old enough is left whole, its older slices too (seen on
    # Hudi 1.2.0: its cleaner deleted nothing of a group a newer clustering replaced).
    found = cleanable(groups, [T1, T2, T3, T4], {T4: [("", FID)]}, 1)
    assert found.files == 0 and found.slices == 0


def test_a_savepointed_slice_stays() -> None:
    """A slice a savepoint reads (a TTL's undo point) is kept, as Hudi's cleaner keeps it:
    without this, a kept pre-TTL savepoint would make the clean kind due at every commit."""
    groups = group_files([("p", base("old-0", T1), 70), ("p", base(FID, T1), 100)])
    replaced = {T2: [("p", "old-0"), ("p", FID)]}
    found = cleanable(groups, [T1, T2, T3], replaced, 1)
    assert (found.files, found.file_groups_replaced) == (2, 2)
    kept = frozenset({("p", "old-0", T1)})
    found = cleanable(groups, [T1, T2, T3], replaced, 1, kept)
    assert (found.files, found.bytes) == (1, 100)
    assert (
        cleanable(groups, [T1, T2, T3], replaced, 1).kept_by_savepoints,
        found.kept_by_savepoints,
    ) == (0, 1)  # the verdict says the savepoint holds it back


def test_layout_strategy_of_each_section() -> None:
    assert strategy("clustering", ClusteringPolicy(enabled=True, columns=["a"])) == "linear"
    z = ZOrderPolicy(enabled=True, columns=["a", "b"])
    assert strategy("zorder", z) == "z-order"
    h = ZOrderPolicy(enabled=True, columns=["a", "b"], curve="hilbert")
    assert strategy("zorder", h) == "hilbert"
    with pytest.raises(ValidationError):
        ZOrderPolicy(enabled=True, columns=["a", "b"], curve="peano")  # type: ignore[arg-type]
    assert Policy().zorder.curve == "z-order"


def test_retained_commits_never_below_either_retention() -> None:
    from lakewarden.kinds.hudi_clean import retained_commits

    class Timeline:
        def __init__(self, times: list[str]) -> None:
            from lakewarden.formats.hudi.timeline import Instant

            self._done = [Instant(t, "commit", "completed", t, f"{t}_{t}.commit") for t in times]

        def completed(self) -> list[Any]:
            return self._done

    now = datetime(2026, 11, 26, 1, 10, tzinfo=UTC).astimezone()
    local = now.strftime("%Y%m%d%H%M%S") + "000"
    old = "20200101000000000"
    policy = Policy().clean.model_copy(
        update={"keep_last_snapshots": 2, "max_snapshot_age_hours": 1}
    )
    assert retained_commits(policy, Timeline([old, old, old]), now) == 2  # type: ignore[arg-type]
    young = Timeline([old, local, local, local])
    assert retained_commits(policy, young, now) == 3  # type: ignore[arg-type]
