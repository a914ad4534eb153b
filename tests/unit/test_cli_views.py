"""The operator CLI's table form of what the API answers (no API: the views are pure)."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from cli.ops import _table_view, _task_view

VALIDATION = {
    "status": "passed",
    "rows": 120,
    "partitions_checked": 3,
    "partitions": [{"partition": "region=a", "match": True}],
    "cost_seconds": 1.5,
    "reason": "every touched partition holds the same rows",
}


def _shown(data: Any) -> str:
    console = Console(width=400, record=True)
    for renderable in _task_view(data):
        console.print(renderable)
    return console.export_text()


def test_a_runs_validation_is_one_line_not_its_partitions() -> None:
    run = {
        "attempt": 1,
        "state": "succeeded",
        "spark_app_id": "local-1",
        "duration_ms": 900,
        "metrics": {"rewritten_data_files": 6, "validation": VALIDATION},
        "error": None,
    }
    task = {
        "id": 7,
        "kind": "compaction",
        "table": "sales.orders",
        "state": "succeeded",
        "attempt": 1,
        "max_attempts": 3,
        "reason": None,
        "plan": None,
        "result": None,
        "created_at": None,
        "updated_at": None,
        "history": [],
        "runs": [run],
    }
    shown = _shown(task)
    assert "passed: 120 rows in 3 partition(s), 1.5s (every touched partition" in shown
    assert '"rewritten_data_files": 6' in shown and "region=a" not in shown


def test_pools_show_capacity_against_bounds_and_why() -> None:
    from cli.ops import _pools_view

    decision = {
        "at": "2026-11-26T12:00:00Z",
        "before": 1,
        "after": 2,
        "queued": 5,
        "running": 1,
        "reason": "scaled up: the oldest of 5 queued tasks waited 31s > 30s",
        "leader_epoch": 3,
    }
    elastic = {
        "capacity": 2,
        "min": 1,
        "max": 8,
        "reason": decision["reason"],
        "decisions": [decision],
    }
    found = {
        "items": [
            {
                "pool": "big",
                "mode": "application",
                "running": 2,
                "queued": 3,
                "oldest_wait_s": 40.2,
                "limit": 2,
                "elastic": elastic,
            },
            {
                "pool": "default",
                "mode": "session",
                "running": 0,
                "queued": 0,
                "oldest_wait_s": None,
                "limit": None,
                "elastic": None,
            },
        ]
    }
    console = Console(width=400, record=True)
    for renderable in _pools_view(found):
        console.print(renderable)
    text = console.export_text()
    assert "2 (1..8)" in text and "fixed" in text
    assert "pool big: latest changes" in text
    assert text.count("scaled up: the oldest of 5 queued tasks waited 31s > 30s") == 2


def test_a_v3_table_shows_its_format_what_is_refused_and_its_deletion_vectors() -> None:
    t = {
        "catalog": "lake",
        "namespace": "sales",
        "name": "v3",
        "policy_version": 1,
    }
    deletes = {"position": 4, "equality": 0, "deletion_vectors": 4}
    h = {
        "score": 90,
        "data_files": 8,
        "small_files": 8,
        "bytes": 8000,
        "records": 400,
        "format_version": 3,
        "delete_files": deletes,
        "snapshots": {"count": 5},
        "measured_at": "now",
        "signals": [],
    }
    x: dict[str, object] = {"summary": "nothing would run now", "kinds": {}, "blocked_by": []}
    x |= {"region": "default", "region_leader": True}
    x["format"] = {"refused": ["repair", "revert", "cherry-pick"]}
    console = Console(width=400, record=True)
    for renderable in _table_view({"table": {**t, "managed_by": "api"}, "health": h, "explain": x}):
        console.print(renderable)
    shown = console.export_text()
    assert "Iceberg v3 (refused: repair, revert, cherry-pick)" in shown
    assert "4 position (4 deletion vectors), 0 equality" in shown
