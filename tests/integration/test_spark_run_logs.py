"""A job that fails inside Spark keeps Spark's own error lines in its run's log tail, not
only the Python exception: the warm session's driver logs them to a file per session,
tagged with the job group (lakewarden.spark.joblog). (A submitted application's: in
test_applications.py.)"""

from __future__ import annotations

import re

import pytest
from conftest import serve
from helpers import (
    append_batches,
    break_planned_rewrite,
    executor_error,
    make_table,
    manage,
    run_one,
)

from lakewarden.runtime import Runtime
from services.scheduler.main import Scheduler
from services.worker.main import Worker

pytestmark = pytest.mark.spark


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
    lost = break_planned_rewrite(spark_rt, task_id, table)
    assert run_one(scheduler) == "failed"

    with serve(spark_rt) as api:
        response = api.get(f"/api/v1/tasks/{task_id}")
    assert response.status_code == 200, response.text
    (run,) = response.json()["runs"]
    assert run["error"] and run["log_tail"]
    tail = run["log_tail"]
    assert re.search(executor_error(f"lakewarden-task-{task_id}-1"), tail, re.M)
    assert lost in tail
    # The task-result thread's line (untagged), attributed by its stage: this job's.
    assert re.search(r"^\S+ WARN TaskSetManager \[[^\]]*\] \{\} Lost task ", tail, re.M)
    # Its message lines, not Java's stack frames; bounded.
    assert not re.search(r"^\s+at ", tail, re.M)
    assert len(tail.splitlines()) <= 50 and len(tail) <= 8 * 1024
    assert tail.startswith(run["error"])
    assert run["ui_url"] is None  # the tests' session runs without its UI or a history server
