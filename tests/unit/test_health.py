"""Table health from synthetic inputs: the per-partition summary (`build`), the score's
factors, the signals, and the JSON the API serves. No table, no database."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from lakewarden.health.explain import expected_gain
from lakewarden.health.model import (
    LiveDelete,
    ManifestInfo,
    SnapshotInfo,
    TableHealth,
    TTLColumn,
    build,
    layout_value,
    penalties,
    score,
    signals,
)
from lakewarden.metadata import DataFile
from lakewarden.policy.model import Policy, parse_policy
from services.api.schemas import HealthOut

MiB = 1024 * 1024
GiB = 1024 * MiB
NOW = datetime(2026, 3, 1, tzinfo=UTC)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _micros(at: datetime) -> int:
    return (at - EPOCH) // timedelta(microseconds=1)


def _file(
    region: str, size: int, records: int = 100, deleted: float = 0.0, **bounds: Any
) -> DataFile:
    return DataFile(
        path=f"s3://w/{region}/{size}-{records}-{sorted(bounds.items())}.parquet",
        size=size,
        records=records,
        spec_id=0,
        partition=(("region", region),),
        bounds=bounds,
        deleted_records=deleted,
    )


def _health(**over: Any) -> TableHealth:
    base: dict[str, Any] = dict(
        snapshot_id=1,
        measured_at="",
        score=100,
        data_files=100,
        bytes=10**9,
        records=10_000,
        file_size={"min": 1, "p50": 1, "max": 1},
        small_files=0,
        reducible_files=0,
        delete_files={"position": 0, "equality": 0, "position_rows": 0, "equality_rows": 0},
        deleted_row_ratio=0.0,
        snapshots={"count": 3, "oldest_age_s": 10, "newest_age_s": 1, "expirable": 0},
        manifests={"count": 2, "data": 2, "deletes": 0, "total_bytes": 1, "avg_bytes": 1},
        layout={},
        ttl={},
        partitions=[],
        signals=[],
    )
    base.update(over)
    return TableHealth(**base)


# --- build: what the files add up to, per partition and overall --------------------------


def test_build_sums_files_and_deletes_per_partition() -> None:
    policy = parse_policy({"compaction": {"target_file_size_bytes": 100 * MiB}})  # small < 75 MiB
    a = [_file("a", 1 * MiB), _file("a", 2 * MiB), _file("a", 3 * MiB), _file("a", 90 * MiB)]
    b = [_file("b", 10 * MiB, deleted=50.0), _file("b", 20 * MiB, deleted=10.0)]
    deletes = [
        LiveDelete((("region", "b"),), "position", 50),
        LiveDelete((("region", "b"),), "equality", 10),
        LiveDelete((), "equality", 5),  # a global equality delete: its own entry
    ]
    h = build(policy, 7, a + b, deletes, {}, None)

    assert (h.data_files, h.records, h.bytes) == (6, 600, 126 * MiB)
    assert h.file_size == {"min": 1 * MiB, "p50": int(6.5 * MiB), "max": 90 * MiB}
    assert (h.small_files, h.small_file_ratio, h.small_file_threshold_bytes) == (
        5,
        round(5 / 6, 4),
        75 * MiB,
    )
    # a: 96 MiB need 1 file of 100 MiB -> 3 reducible; b: 30 MiB -> 1 reducible
    assert h.reducible_files == 4
    assert h.delete_files == {
        "position": 1,
        "equality": 2,
        "position_rows": 50,
        "equality_rows": 15,
        "deletion_vectors": 0,
        "deletion_vector_rows": 0,
    }
    assert h.deleted_records == 60.0 and h.deleted_row_ratio == 0.1

    pa, pb, glob = h.partitions  # sorted by partition, the global one last
    assert (glob.partition, glob.data_files, glob.delete_files["equality"]) == ({}, 0, 1)
    assert pa.partition == {"region": "a"}
    assert (pa.data_files, pa.small_files, pa.small_file_ratio, pa.reducible_files) == (
        4,
        3,
        0.75,
        3,
    )
    assert pa.file_size == {"min": 1 * MiB, "p50": int(2.5 * MiB), "max": 90 * MiB}
    assert pa.delete_files["position"] == 0 and pa.deleted_row_ratio == 0.0
    assert pb.delete_files == {
        "position": 1,
        "equality": 1,
        "position_rows": 50,
        "equality_rows": 10,
        "deletion_vectors": 0,
        "deletion_vector_rows": 0,
    }
    assert (pb.deleted_records, pb.deleted_row_ratio) == (60.0, 0.3)


def test_build_measures_layout_per_partition_and_overall() -> None:
    # partition a: disjoint id ranges (well clustered); b: every file spans every id
    a = [_file("a", MiB, id=(i * 10, i * 10 + 9)) for i in range(4)]
    b = [_file("b", MiB, id=(0, 39)) for _ in range(4)]
    h = build(Policy(), 1, a + b, [], {"clustering": ["id"]}, None)
    by = {p.partition["region"]: p.files_per_lookup["clustering"] for p in h.partitions}
    assert by == {"a": 1.0, "b": 4.0}
    assert h.layout["clustering"] is not None and h.layout["clustering"] > 1.0
    assert layout_value(h, "clustering") == 4.0  # the worst partition is what a rewrite fixes


def test_build_reports_the_ttl_column_per_partition() -> None:
    old, recent = NOW - timedelta(days=30), NOW - timedelta(days=1)
    files = [
        _file("a", MiB, ts=(_micros(old), _micros(recent))),  # straddles the cutoff
        _file("b", MiB, ts=(_micros(recent), _micros(NOW))),
        _file("b", MiB),  # no bounds for ts
    ]
    ttl = TTLColumn("ts", "timestamp", NOW - timedelta(days=7))
    h = build(Policy(), 1, files, [], {}, ttl)
    pa, pb = h.partitions
    assert (pa.oldest_ttl_value, pa.past_retention) == (old.isoformat(), True)
    assert (pb.oldest_ttl_value, pb.past_retention) == (recent.isoformat(), False)
    assert h.ttl["oldest"] == old.isoformat() and h.ttl["newest"] == NOW.isoformat()
    assert h.ttl["files_past_retention"] == 1 and h.ttl["files_entirely_past_retention"] == 0
    assert h.ttl["files_without_bounds"] == 1

    dates = TTLColumn("d", "date", None)  # no retention: the oldest value, nothing judged
    h = build(Policy(), 1, [_file("a", MiB, d=(19000, 19005))], [], {}, dates)
    assert h.partitions[0].oldest_ttl_value == (EPOCH + timedelta(days=19000)).isoformat()
    assert h.partitions[0].past_retention is None and "files_past_retention" not in h.ttl


def test_an_empty_table() -> None:
    h = build(Policy(), None, [], [], {"clustering": ["id"]}, None)
    assert (h.data_files, h.small_file_ratio, h.partitions, h.layout) == (
        0,
        0.0,
        [],
        {"clustering": None},
    )
    assert score(h, Policy()) == 100 and signals(h, Policy()) == []


def test_build_judges_snapshots_and_manifests_and_scores() -> None:
    hour_ms = 3600 * 1000
    now_ms = int(NOW.timestamp() * 1000)
    # 8 snapshots, one an hour apart from 200 h ago: the newest 5 are kept, 3 are too old,
    # and a tag holds one of those
    snaps = [SnapshotInfo(i, now_ms - (200 - i) * hour_ms) for i in range(8)]
    manifests = [ManifestInfo(False, 100), ManifestInfo(False, 300), ManifestInfo(True, 200)]
    h = build(
        Policy(),
        7,
        [_file("a", 200 * MiB)],
        [],
        {},
        None,
        snapshots=snaps,
        protected={1},
        manifests=manifests,
        now=NOW,
    )
    assert h.measured_at == NOW.isoformat()
    assert h.snapshots == {
        "count": 8,
        "oldest_age_s": 200 * 3600.0,
        "newest_age_s": 193 * 3600.0,
        "expirable": 2,
    }
    assert h.manifests == {
        "count": 3,
        "data": 2,
        "deletes": 1,
        "total_bytes": 600,
        "avg_bytes": 200.0,
    }
    assert h.penalties["snapshots"] == 0.75  # 3 beyond keep_last 5, of 4 x 5
    assert h.score == 99 and [s.metric for s in h.signals] == ["snapshots"]


# --- score ---------------------------------------------------------------------------------


def test_a_healthy_table_scores_100_without_signals() -> None:
    h = _health()
    assert score(h, Policy()) == 100 and signals(h, Policy()) == []
    assert set(penalties(h, Policy()).values()) == {0.0}


def test_small_files_cost_up_to_40_by_the_reducible_share() -> None:
    p = Policy()
    assert penalties(_health(reducible_files=50), p)["small_files"] == 20.0
    assert score(_health(reducible_files=100), p) == 60
    assert score(_health(reducible_files=10, data_files=12), p) == 67  # 40 x 10/12 = 33.3


@pytest.mark.parametrize(
    "pos_rows, eq_rows, threshold, penalty",
    [
        (1000, 0, 0.2, 20.0),  # 10% of rows, half the threshold
        (0, 500, 0.2, 20.0),  # equality rows weigh double
        (0, 1000, 0.2, 40.0),
        (5000, 5000, 0.2, 40.0),  # capped
        (1000, 0, 0.1, 40.0),  # full at the policy's own threshold
    ],
)
def test_deletes_cost_up_to_40_with_equality_weighing_double(
    pos_rows: int, eq_rows: int, threshold: float, penalty: float
) -> None:
    deletes = {"position": 1, "equality": 1, "position_rows": pos_rows, "equality_rows": eq_rows}
    p = parse_policy({"compaction": {"delete_ratio_threshold": threshold}})
    assert penalties(_health(delete_files=deletes), p)["deletes"] == penalty


def test_layout_costs_up_to_10_only_for_an_enabled_layout_kind() -> None:
    h = _health(layout={"clustering": 3.0, "zorder": 9.0})
    disabled = parse_policy({"clustering": {"columns": ["id"]}})
    assert penalties(h, disabled)["layout"] == 0.0
    clustering = parse_policy({"clustering": {"enabled": True, "columns": ["id"]}})
    assert penalties(h, clustering)["layout"] == 5.0  # (3 - 2) / 2 of 10
    zorder = parse_policy({"zorder": {"enabled": True, "columns": ["a", "b"]}})
    assert penalties(h, zorder)["layout"] == 10.0  # capped


def test_snapshot_and_manifest_bloat_cost_up_to_10() -> None:
    p = parse_policy({"clean": {"keep_last_snapshots": 5, "rewrite_manifests_min_count": 50}})
    recent = _health(
        snapshots={"count": 100, "oldest_age_s": 60, "newest_age_s": 1, "expirable": 0}
    )
    assert penalties(recent, p)["snapshots"] == 0.0  # many, but none clean would expire
    some = {"count": 15, "oldest_age_s": 10**7, "newest_age_s": 1, "expirable": 10}
    assert penalties(_health(snapshots=some), p)["snapshots"] == 2.5  # 10 beyond 5 of 20
    many = {"count": 500, "oldest_age_s": 10**7, "newest_age_s": 1, "expirable": 495}
    manifests = {"count": 50, "data": 50, "deletes": 0, "total_bytes": 1, "avg_bytes": 1}
    h = _health(snapshots=many, manifests=manifests)
    assert penalties(h, p)["snapshots"] == 5.0 and penalties(h, p)["manifests"] == 5.0
    assert score(h, p) == 90


def test_the_score_never_drops_below_zero() -> None:
    p = parse_policy({"clustering": {"enabled": True, "columns": ["id"]}})
    deletes = {"position": 9, "equality": 9, "position_rows": 10**6, "equality_rows": 10**6}
    bloated = {"count": 10**4, "oldest_age_s": 10**8, "newest_age_s": 1, "expirable": 10**4}
    manifests = {"count": 10**4, "data": 1, "deletes": 1, "total_bytes": 1, "avg_bytes": 1}
    h = _health(
        reducible_files=100,
        delete_files=deletes,
        layout={"clustering": 100.0},
        snapshots=bloated,
        manifests=manifests,
    )
    assert sum(penalties(h, p).values()) == 100.0 and score(h, p) == 0


# --- signals -------------------------------------------------------------------------------


def test_every_threshold_that_fires_is_a_signal() -> None:
    p = parse_policy(
        {
            "compaction": {"min_small_files": 12, "delete_ratio_threshold": 0.2},
            "zorder": {"enabled": True, "columns": ["a", "b"], "max_files_per_lookup": 3},
            "ttl": {"enabled": True, "column": "ts", "retention_days": 7},
            "clean": {"keep_last_snapshots": 2, "rewrite_manifests_min_count": 10},
        }
    )
    h = _health(
        reducible_files=12,
        small_files=14,
        deleted_row_ratio=0.25,
        layout={"zorder": 6.0},
        ttl={"files_past_retention": 3, "oldest": "2020-01-01T00:00:00+00:00"},
        snapshots={"count": 20, "oldest_age_s": 10**7, "newest_age_s": 5, "expirable": 18},
        manifests={"count": 10, "data": 10, "deletes": 0, "total_bytes": 1, "avg_bytes": 1},
    )
    got = {(s.kind, s.metric): s for s in signals(h, p)}
    assert set(got) == {
        ("compaction", "reducible_files"),
        ("compaction", "deleted_row_ratio"),
        ("zorder", "files_per_lookup"),
        ("ttl", "files_past_retention"),
        ("clean", "snapshots"),
        ("clean", "manifests"),
    }
    assert (
        got["compaction", "reducible_files"].value,
        got["compaction", "reducible_files"].threshold,
    ) == (12, 12)
    assert (
        got["zorder", "files_per_lookup"].value,
        got["zorder", "files_per_lookup"].threshold,
    ) == (6.0, 3)
    assert "18 of them older than 120 h" in got["clean", "snapshots"].reason
    assert "2020-01-01" in got["ttl", "files_past_retention"].reason
    assert not any("disabled" in s.reason for s in got.values())


def test_thresholds_just_below_do_not_fire() -> None:
    p = parse_policy({"clustering": {"enabled": True, "columns": ["id"]}})
    h = _health(
        reducible_files=11,
        deleted_row_ratio=0.19,
        layout={"clustering": 2.0},
        ttl={"files_past_retention": 0},
        snapshots={"count": 50, "oldest_age_s": 10**7, "newest_age_s": 5, "expirable": 0},
        manifests={"count": 49, "data": 49, "deletes": 0, "total_bytes": 1, "avg_bytes": 1},
    )
    assert signals(h, p) == []


def test_a_signal_of_a_disabled_kind_says_so() -> None:
    p = parse_policy({"compaction": {"enabled": False}, "clustering": {"columns": ["id"]}})
    h = _health(reducible_files=50, layout={"clustering": 5.0})
    got = {s.kind: s for s in signals(h, p)}
    assert "(compaction is disabled by policy)" in got["compaction"].reason
    assert "(clustering is disabled by policy)" in got["clustering"].reason
    # a TTL without retention_days judges nothing
    assert not signals(_health(ttl={"files_past_retention": 4}), parse_policy({}))


def test_file_size_buckets_count_every_data_file_once_by_its_size() -> None:
    # each bucket's bounds (min inclusive, max exclusive), per partition and overall
    a = [_file("a", 0), _file("a", MiB - 1), _file("a", MiB), _file("a", 8 * MiB - 1)]
    b = [_file("b", 8 * MiB), _file("b", 128 * MiB), _file("b", 512 * MiB), _file("b", GiB)]
    h = build(Policy(), 1, a + b, [], {}, None)
    labels = ["<1 MB", "1-8 MB", "8-32 MB", "32-128 MB", "128-512 MB", ">512 MB"]
    assert [b["label"] for b in h.file_size_buckets] == labels
    assert [(b["min_bytes"], b["max_bytes"]) for b in h.file_size_buckets] == [
        (0, MiB),
        (MiB, 8 * MiB),
        (8 * MiB, 32 * MiB),
        (32 * MiB, 128 * MiB),
        (128 * MiB, 512 * MiB),
        (512 * MiB, None),
    ]
    assert [b["files"] for b in h.file_size_buckets] == [2, 2, 1, 0, 1, 2]
    assert [b["bytes"] for b in h.file_size_buckets] == [
        MiB - 1,
        9 * MiB - 1,
        8 * MiB,
        0,
        128 * MiB,
        512 * MiB + GiB,
    ]
    assert h.files_over_1gb == 1  # 1 GiB itself counts
    pa_, pb = h.partitions
    assert [b["files"] for b in pa_.file_size_buckets] == [2, 2, 0, 0, 0, 0]
    assert [b["files"] for b in pb.file_size_buckets] == [0, 0, 1, 0, 1, 2]
    assert (pa_.files_over_1gb, pb.files_over_1gb) == (0, 1)
    empty = build(Policy(), None, [], [], {}, None)
    assert [b["files"] for b in empty.file_size_buckets] == [0] * 6
    assert empty.files_over_1gb == 0


# --- what the API serves -------------------------------------------------------------------


def test_health_is_json_and_fits_the_response_model() -> None:
    files = [_file("a", MiB, ts=(_micros(NOW - timedelta(days=9)), _micros(NOW)))]
    ttl = TTLColumn("ts", "timestamp", NOW - timedelta(days=7))
    h = build(Policy(), 3, files, [LiveDelete((("region", "a"),), "position", 2)], {}, ttl)
    h.measured_at = NOW.isoformat()
    h.signals, h.penalties, h.score = signals(h, Policy()), penalties(h, Policy()), 100
    body = json.loads(json.dumps(h.to_dict()))
    out = HealthOut.model_validate({"table": "sales.orders", "policy_version": 1, **body})
    assert out.partitions[0].delete_files.position == 1 and out.ttl.files_past_retention == 1
    assert out.file_size_buckets[0].files == 0 and out.file_size_buckets[1].files == 1
    assert out.partitions[0].file_size_buckets[1].label == "1-8 MB"


def test_expected_gain_from_any_kind_of_plan() -> None:
    assert expected_gain(None) is None
    compaction = {
        "files_before": 12,
        "expected_files_after": 2,
        "bytes_to_rewrite": 99,
        "tier": None,
    }
    assert expected_gain(compaction) == {
        "files_before": 12,
        "expected_files_after": 2,
        "bytes_to_rewrite": 99,
        "data_files_removed": 10,
    }
    ttl = {"estimated_rows": 40, "estimated_fraction": 0.4, "cutoff": "x"}
    assert expected_gain(ttl) == {"estimated_rows": 40, "estimated_fraction": 0.4}
    clean = {
        "snapshots_before": 9,
        "actions": [{"name": "expire_snapshots", "expected_expired": 4}],
        "manifests_before": 3,
        "expected_manifests_after": 3,
    }
    assert expected_gain(clean) == {
        "snapshots_before": 9,
        "manifests_before": 3,
        "expected_manifests_after": 3,
        "expire_snapshots.expected_expired": 4,
    }


def test_deletion_vectors_are_position_deletes_counted_apart_too() -> None:
    """Format v3's deletion vectors: position deletes (the score weighs them so), and
    counted on their own, per partition and overall."""
    b = [_file("b", 10 * MiB, deleted=7.0), _file("b", 20 * MiB, deleted=3.0)]
    deletes = [
        LiveDelete((("region", "b"),), "position", 7, deletion_vector=True),
        LiveDelete((("region", "b"),), "position", 3, deletion_vector=True),
    ]
    h = build(Policy(), 7, b, deletes, {}, None)
    assert h.delete_files == {
        "position": 2,
        "equality": 0,
        "position_rows": 10,
        "equality_rows": 0,
        "deletion_vectors": 2,
        "deletion_vector_rows": 10,
    }
    (pb,) = h.partitions
    assert (pb.delete_files["deletion_vectors"], pb.deleted_records) == (2, 10.0)
