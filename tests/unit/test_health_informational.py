"""The informational health signals from synthetic inputs: commit rate and the streaming-writer
rule, partition skew, metadata files, and the storage summary (listing less references).
None of them moves the score. No table, no database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from lakewarden.health.model import (
    MetadataFiles,
    SnapshotInfo,
    build,
    commit_summary,
    metadata_summary,
)
from lakewarden.metadata import DataFile
from lakewarden.policy.model import Policy
from lakewarden.storage import Listing, References, StoredFile, summary

NOW = datetime(2026, 3, 1, tzinfo=UTC)


def _snaps(*ages_s: float, op: str = "append") -> list[SnapshotInfo]:
    return [
        SnapshotInfo(i, int((NOW - timedelta(seconds=a)).timestamp() * 1000), op)
        for i, a in enumerate(ages_s)
    ]


def test_commits_per_day_over_a_week() -> None:
    day = 86400
    c = commit_summary(_snaps(10, 100, day + 1, 3 * day, 6 * day + 5, 8 * day), NOW)
    assert c["daily_7d"] == [2, 1, 0, 1, 0, 0, 1]  # the one 8 days ago is outside the week
    assert (c["last_24h"], c["last_7d"], c["per_day_7d"]) == (2, 5, round(5 / 7, 2))
    # a snapshot stamped ahead of our clock counts as now, not as lost
    assert commit_summary(_snaps(-30), NOW)["last_24h"] == 1
    assert commit_summary([], NOW)["daily_7d"] == [0] * 7


def test_a_streaming_writer_is_a_steady_cadence_that_goes_on_now() -> None:
    def active(snaps: list[SnapshotInfo]) -> bool:
        return bool(commit_summary(snaps, NOW)["streaming_writer_active"])

    every_minute = _snaps(5, 65, 125, 185, 245)
    c = commit_summary(every_minute, NOW)
    assert (c["data_commits_last_hour"], c["median_interval_s_last_hour"]) == (5, 60.0)
    assert active(every_minute)
    assert not active(_snaps(5, 65, 125))  # 3 commits: under STREAMING_MIN_COMMITS (4)
    # a burst that ended 40 minutes ago: the newest is far past twice the cadence
    assert not active(_snaps(2400, 2460, 2520, 2580))
    # every 16 minutes: slower than STREAMING_MAX_INTERVAL_S (15 min)
    assert not active(_snaps(0, 960, 1920, 2880))
    # compaction (replace) and deletes are not a writer's data
    assert not active(_snaps(5, 65, 125, 185, op="replace"))
    assert not active(_snaps(5, 65, 125, 185, op="delete"))
    assert active(_snaps(5, 65, 125, 185, op="overwrite"))
    assert commit_summary([], NOW)["median_interval_s_last_hour"] is None


def _file(region: str, size: int) -> DataFile:
    return DataFile(f"s3://w/{region}/{size}.parquet", size, 10, 0, (("region", region),))


def test_partition_skew_is_the_busiest_against_the_median() -> None:
    files = [_file("a", 100), _file("a", 100), _file("a", 700), _file("b", 50), _file("c", 200)]
    skew = build(Policy(), 1, files, [], {}, None).partition_skew
    assert skew["partitions"] == 3
    assert skew["bytes"] == {
        "median": 200,
        "busiest": 900,
        "busiest_partition": {"region": "a"},
        "ratio": 4.5,
    }
    assert skew["data_files"] == {
        "median": 1,
        "busiest": 3,
        "busiest_partition": {"region": "a"},
        "ratio": 3.0,
    }
    empty = build(Policy(), None, [], [], {}, None).partition_skew
    assert empty["partitions"] == 0 and empty["bytes"]["ratio"] is None


def test_new_signals_leave_the_score_alone() -> None:
    files = [_file("a", 100), _file("b", 10**9)]
    quiet = build(Policy(), 1, files, [], {}, None, now=NOW)
    busy = build(
        Policy(),
        1,
        files,
        [],
        {},
        None,
        snapshots=_snaps(5, 65, 125, 185, 245),
        now=NOW,
        metadata=MetadataFiles(500, False, 1000),
    )
    assert busy.commits["streaming_writer_active"] and busy.metadata_files["files"] == 500
    assert busy.penalties == quiet.penalties and busy.score == quiet.score


def test_metadata_files_bytes_wait_for_a_storage_read() -> None:
    assert metadata_summary(MetadataFiles(4, True, 3)) == {
        "files": 4,
        "bytes": None,
        "current_bytes": None,
        "delete_after_commit": True,
        "previous_versions_max": 3,
    }
    assert metadata_summary(None)["files"] == 0


def test_the_storage_summary_subtracts_references_from_the_listing() -> None:
    old = NOW - timedelta(hours=100)
    listing = Listing(
        [
            StoredFile("w/t/data/live.parquet", 1000, old),
            StoredFile("w/t/data/old.parquet", 400, old),
            StoredFile("w/t/data/orphan-old.parquet", 70, old),
            StoredFile("w/t/data/orphan-new.parquet", 30, NOW - timedelta(hours=1)),
            StoredFile("w/t/data/no-mtime.bin", 5, None),  # unknown age: never removable
            StoredFile("w/t/metadata/v1.metadata.json", 9, old),
        ],
        capped=False,
        max_files=100,
    )
    refs = References(
        referenced={
            "w/t/data/live.parquet",
            "w/t/data/old.parquet",
            "w/t/data/gone.parquet",  # referenced, not on storage: no bytes either way
            "w/t/metadata/v1.metadata.json",
        },
        live_sizes={"w/t/data/live.parquet": 1000, "w/t/data/old.parquet": 400},
        live_in_heads={"w/t/data/live.parquet"},
        manifests_read=2,
    )
    s = summary(listing, refs, NOW, orphan_min_age_hours=72)
    assert (s["listed_files"], s["listed_bytes"]) == (6, 1514)
    assert (s["unreferenced_files"], s["unreferenced_bytes"]) == (3, 105)
    assert (s["unreferenced_older_files"], s["unreferenced_older_bytes"]) == (1, 70)
    assert (s["old_snapshots_only_files"], s["old_snapshots_only_bytes"]) == (1, 400)
    assert (s["capped"], s["max_files"], s["manifests_read"]) == (False, 100, 2)
