"""A rewrite with partial progress (the planners' default) in which one file group fails
and another commits: Iceberg only logs the failure; the run, the task and an alert say it."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from helpers import append_batches, make_table, manage, run_one
from sqlalchemy import select

from lakewarden.alerts.rules import evaluate_task_rules
from lakewarden.db.models import Alert, JobRun, Task
from lakewarden.db.session import transaction
from lakewarden.runtime import Runtime
from lakewarden.states import TaskState
from lakewarden.tasks import repo
from services.scheduler.main import Scheduler
from services.worker.main import Worker

pytestmark = pytest.mark.spark


def test_a_rewrite_that_lost_one_file_group_ends_partial_with_its_error_and_an_alert(
    scheduler: Scheduler, spark_rt: Runtime
) -> None:
    table = append_batches(make_table(spark_rt, name="half_lost"), 6)  # 6 files in a, 6 in b
    rows_a = sorted(table.scan(row_filter="region = 'a'").to_arrow()["id"].to_pylist())
    task_id = manage(
        spark_rt,
        "half_lost",
        {"compaction": {"min_small_files": 5, "min_input_files": 5, "max_attempts": 1}},
    )
    assert Worker(spark_rt).run_once()
    # One data file of partition b deleted from storage (a bad manual cleanup): b's file
    # group fails, a's commits.
    files = table.inspect.files().to_pylist()
    lost = next(f for f in files if f["partition"]["region"] == "b")
    path = Path(urlsplit(lost["file_path"]).path)
    path.unlink()

    assert run_one(scheduler) == TaskState.SUCCEEDED
    with transaction(spark_rt.engine) as s:
        task = s.get(Task, task_id)
        assert task is not None
        (run,) = s.scalars(select(JobRun).where(JobRun.task_id == task_id)).all()
        result, reason = task.result or {}, task.reason or ""
        metrics, log_tail = run.metrics or {}, run.log_tail or ""
    assert metrics["partial"] is True
    assert (metrics["file_groups"], metrics["rewritten_groups"], metrics["failed_groups"]) == (
        2,
        1,
        1,
    )
    assert metrics["failed_data_files"] == 6 and metrics["rewritten_data_files"] == 6
    assert metrics["failed_partitions"] == [{"region": "b"}]
    assert result["partial"] is True and result["failed_groups"] == 1
    assert result["committed_snapshot_id"]
    assert reason.startswith("job committed part: rewrote 1 of 2 file groups; 1 failed")
    assert path.name in reason  # the first error names the missing file
    assert path.name in log_tail

    with transaction(spark_rt.engine) as s:
        evaluate_task_rules(s, spark_rt.settings, datetime.now(UTC))
        alerts = s.execute(
            select(Alert.rule, Alert.key, Alert.severity, Alert.summary).where(
                Alert.rule == "task_partial", Alert.state != "resolved"
            )
        ).all()
    assert [(a.key, a.severity) for a in alerts] == [("sales.half_lost:compaction", "warning")]
    assert path.name in alerts[0].summary

    # pyiceberg: partition a rewritten into one file, b untouched, no row lost.
    table = table.refresh()
    after = table.inspect.files().to_pylist()
    by_region = {r: [f for f in after if f["partition"]["region"] == r] for r in ("a", "b")}
    assert len(by_region["a"]) == 1
    assert {f["file_path"] for f in by_region["b"]} == {
        f["file_path"] for f in files if f["partition"]["region"] == "b"
    }
    assert sum(f["record_count"] for f in after) == sum(f["record_count"] for f in files) == 60
    assert sorted(table.scan(row_filter="region = 'a'").to_arrow()["id"].to_pylist()) == rows_a

    # The next compaction has only b's group left, which fails again: nothing commits, so
    # the attempt fails and is retried as any failure, its run counting what failed.
    with transaction(spark_rt.engine) as s:
        table_id = s.get(Task, task_id).table_id  # type: ignore[union-attr]
        again = repo.create_task(
            s, table_id=table_id, kind="compaction", trigger={}, actor="test", max_attempts=2
        )
    assert again is not None and Worker(spark_rt).run_once()
    snapshot = table.current_snapshot()
    assert run_one(scheduler) == TaskState.PENDING
    with transaction(spark_rt.engine) as s:
        task = s.get(Task, again)
        assert task is not None
        (run,) = s.scalars(select(JobRun).where(JobRun.task_id == again)).all()
        reason, metrics, error = task.reason or "", run.metrics or {}, run.error or ""
    assert (metrics["rewritten_groups"], metrics["failed_groups"], metrics["partial"]) == (
        0,
        1,
        False,
    )
    assert error.startswith(
        "RewriteFailed: rewrote 0 of 1 file groups; 1 failed (6 data files): "
        "java.io.FileNotFoundException"
    )
    assert path.name in error and reason.startswith("attempt 1/2 failed, re-planning in ")
    assert table.refresh().current_snapshot() == snapshot
