"""The health score and signals from synthetic numbers."""

from __future__ import annotations

from lakewarden.health_model import TableHealth, score, signals
from lakewarden.policy import Policy, parse_policy


def _health(**over: object) -> TableHealth:
    base: dict = dict(
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
        snapshots={"count": 3, "oldest_age_s": 10, "newest_age_s": 1},
        manifests={"count": 2, "total_bytes": 1, "avg_bytes": 1},
        layout={},
        ttl={},
        partitions=[],
        signals=[],
    )
    base.update(over)
    return TableHealth(**base)


def test_a_healthy_table_scores_100_with_no_signals() -> None:
    h, p = _health(), Policy()
    assert score(h, p) == 100 and signals(h, p) == []


def test_small_files_and_deletes_cost_up_to_40_each() -> None:
    p = Policy()
    assert score(_health(reducible_files=100), p) == 60
    assert score(_health(reducible_files=50), p) == 80
    deletes = {"position": 1, "equality": 1, "position_rows": 0, "equality_rows": 1000}
    assert score(_health(delete_files=deletes), p) == 60  # 2 x 10% weighted = 20%: full
    both = _health(reducible_files=100, delete_files=deletes, deleted_row_ratio=0.3)
    assert score(both, p) == 20
    kinds = {(s.kind, s.metric) for s in signals(both, p)}
    assert kinds == {("compaction", "reducible_files"), ("compaction", "deleted_row_ratio")}


def test_layout_ttl_and_clean_signals() -> None:
    p = parse_policy(
        {
            "zorder": {"enabled": True, "columns": ["a", "b"]},
            "ttl": {"enabled": True, "column": "ts", "retention_days": 7},
            "clean": {
                "keep_last_snapshots": 2,
                "max_snapshot_age_hours": 1,
                "rewrite_manifests_min_count": 10,
            },
        }
    )
    h = _health(
        layout={"zorder": 6.0},
        ttl={"files_past_retention": 3},
        snapshots={"count": 20, "oldest_age_s": 7200, "newest_age_s": 5},
        manifests={"count": 12, "total_bytes": 1, "avg_bytes": 1},
    )
    assert {(s.kind, s.metric) for s in signals(h, p)} == {
        ("zorder", "files_per_lookup"),
        ("ttl", "files_past_retention"),
        ("clean", "snapshots"),
        ("clean", "manifests"),
    }
    assert score(h, p) == 100 - 10 - 5 - 5
