"""A job that fails inside Spark keeps Spark's own error lines in its run's log tail, not
only the Python exception: the warm session's driver logs them to a file per session,
tagged with the job group (lakewarden.spark.joblog)."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from helpers import append_batches, make_table, manage, run_one
from pyiceberg.table import Table
from sqlalchemy import select, text

from lakewarden.db.models import JobRun
from lakewarden.db.session import transaction
from lakewarden.runtime import Runtime
from services.scheduler.main import Scheduler
from services.worker.main import Worker

pytestmark = pytest.mark.spark


def lose_a_data_file(table: Table) -> str:
    """Delete one of the table's data files from storage (a broken table, as after a bad
    manual cleanup): reading it fails inside a Spark task."""
    path = urlsplit(table.inspect.files()["file_path"][0].as_py()).path
    Path(path).unlink()
    return Path(path).name


def test_a_job_failing_in_spark_keeps_spark_s_error_lines_in_its_log_tail(
    scheduler: Scheduler, spark_rt: Runtime
) -> None:
    table = append_batches(make_table(spark_rt, name="lost_file", partitioned=False), 6)
    task_id = manage(
        spark_rt,
        "lost_file",
        {"compaction": {"min_small_files": 5, "min_input_files": 5, "max_attempts": 1}},
    )
    assert Worker(spark_rt).run_once()
    # All or nothing: with partial progress (the planner's default) Iceberg logs a failed
    # file group and commits the others, and the task succeeds having rewritten less.
    with spark_rt.engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE tasks SET plan = jsonb_set(plan, "
                "'{options,partial-progress.enabled}', '\"false\"') WHERE id = :id"
            ),
            {"id": task_id},
        )
    lost = lose_a_data_file(table)
    assert run_one(scheduler) == "failed"

    with transaction(spark_rt.engine) as s:
        run = s.scalars(select(JobRun).where(JobRun.task_id == task_id)).one()
    assert run.error and run.log_tail
    tail = run.log_tail
    # The executor's own ERROR line, as log4j wrote it in the driver JVM, tagged with this
    # job's group: only Spark's log has it (the Python exception quotes other lines).
    group = f"lakewarden-task-{task_id}-1"
    assert re.search(
        rf"^\S+ ERROR Executor \[[^\]]*\] \{{{group}\}} Exception in task ", tail, re.M
    )
    assert lost in tail
    # Its message lines, not Java's stack frames; bounded.
    assert not re.search(r"^\s+at ", tail, re.M)
    assert len(tail.splitlines()) <= 50 and len(tail) <= 8 * 1024
    assert tail.startswith(run.error)
    assert run.ui_url is None  # the tests' session runs without its UI or a history server
