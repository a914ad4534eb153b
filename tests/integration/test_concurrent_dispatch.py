"""Several jobs at once on the scheduler's one Spark session, each in its pool's FAIR Spark
pool; and dispatch that wakes when a task is planned instead of waiting for its poll."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
from helpers import append_batches, make_table, manage, wait_for
from sqlalchemy import select, text

from lakewarden.catalogs.catalog import TableRef
from lakewarden.db.models import JobRun, Task
from lakewarden.db.session import transaction
from lakewarden.runtime import Runtime
from services.scheduler.main import Scheduler
from services.worker.main import Worker

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakewarden.kinds.base import JobResult

pytestmark = pytest.mark.spark


def _meeting_kind(monkeypatch: pytest.MonkeyPatch, meet: threading.Barrier) -> dict[str, Any]:
    """A compaction kind whose jobs wait for each other (`meet`: only jobs running at the
    same time get past it), then run a real Spark job; records each job's Spark pool."""
    from lakewarden import kinds
    from lakewarden.kinds.base import JobResult, Kind, PlanOutcome

    seen: dict[str, Any] = {}

    def run(spark: SparkSession, catalog: str, ref: TableRef, plan: dict[str, Any]) -> JobResult:
        seen[ref.name] = spark.sparkContext.getLocalProperty("spark.scheduler.pool")
        meet.wait(timeout=120)
        spark.range(100).selectExpr("sum(id)").collect()  # a Spark job, in the job's pool
        return JobResult({}, None)

    meeting = Kind(name="compaction", plan=lambda *_: PlanOutcome({"meet": True}, "meet"), run=run)
    monkeypatch.setitem(kinds.REGISTRY, "compaction", meeting)
    return seen


def _planned(rt: Runtime, name: str, pool: str = "default") -> int:
    append_batches(make_table(rt, name=name), 1)
    task_id = manage(rt, name, {})
    with transaction(rt.engine) as s:
        s.execute(text("UPDATE tasks SET pool = :p WHERE id = :id"), {"p": pool, "id": task_id})
    assert Worker(rt).run_once()
    return task_id


def test_two_jobs_run_at_once_on_the_session_each_in_its_fair_pool(
    scheduler: Scheduler, spark_rt: Runtime, spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = _meeting_kind(monkeypatch, threading.Barrier(2))
    etl = _planned(spark_rt, "in_etl", pool="etl")
    default = _planned(spark_rt, "in_default")
    assert spark_rt.settings.max_concurrent_jobs >= 2  # the default uses the cores

    assert scheduler.dispatch_once()  # one round dispatches both: a batch
    entries = list(scheduler.inflight.values())
    assert len(entries) == 2
    assert [e.future.result(timeout=300) for e in entries] == ["succeeded", "succeeded"]

    # Each job ran with its lakewarden pool as its Spark pool, and Spark shares by pool.
    assert seen == {"in_etl": "etl", "in_default": "default"}
    sc = spark.sparkContext._jsc.sc()
    assert sc.getSchedulingMode().toString() == "FAIR"
    assert sc.getPoolForName("etl").isDefined()
    # Both were running at once (each got past the meeting only because the other came).
    with transaction(spark_rt.engine) as s:
        runs = {
            r.task_id: r
            for r in s.scalars(select(JobRun).where(JobRun.task_id.in_([etl, default])))
        }
    a, b = runs[etl], runs[default]
    assert a.finished_at is not None and b.finished_at is not None
    assert a.started_at < b.finished_at and b.started_at < a.finished_at


@pytest.fixture
def patient_scheduler(spark_rt: Runtime, spark: SparkSession) -> Iterator[Scheduler]:
    """A real scheduler loop (`serve`) whose poll fallback is 300 s: only a wake-up makes
    it dispatch a task planned while it sleeps."""
    with spark_rt.engine.begin() as conn:
        conn.execute(text("DELETE FROM managed_tables"))
        conn.execute(text("DELETE FROM leader_lease"))
    settings = spark_rt.settings.model_copy(
        update={"scheduler_poll_interval_s": 300.0, "spark_warmup": False}
    )
    sched = Scheduler(dataclasses.replace(spark_rt, settings=settings))
    sched._spark = spark
    loop = threading.Thread(target=sched.serve, name="scheduler-under-test", daemon=True)
    loop.start()
    yield sched
    sched.stop.set()
    loop.join(timeout=60)


def test_a_task_planned_while_the_scheduler_sleeps_is_dispatched_at_once(
    patient_scheduler: Scheduler, spark_rt: Runtime
) -> None:
    sched = patient_scheduler
    wait_for(
        lambda: (
            sched.task_wakeup is not None
            and sched.task_wakeup.connected.is_set()
            and not sched.wake.is_set()
        ),
        60,
        "the scheduler to listen and go to sleep",
    )
    append_batches(make_table(spark_rt, name="woken"), 3)
    task_id = manage(
        spark_rt, "woken", {"compaction": {"min_small_files": 2, "min_input_files": 2}}
    )
    assert Worker(spark_rt).run_once()  # pending -> planned, which wakes the scheduler

    def done() -> str | None:
        with transaction(spark_rt.engine) as s:
            task = s.get(Task, task_id)
            return task.state if task is not None and task.state == "succeeded" else None

    # Far sooner than the 300 s poll: the job is dispatched when the plan commits.
    wait_for(done, 120, "the planned task to be dispatched and succeed")
