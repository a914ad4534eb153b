"""The operator CLI's table form of what the API answers (no API: the views are pure)."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from cli.ops import _task_view

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
