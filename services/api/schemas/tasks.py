"""The bodies of the task routes: triggering a task, a task with its history and runs."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal, Self

from pydantic import (
    Field,
)

from lakewarden.db.models import Task
from lakewarden.policy.model import KINDS
from lakewarden.tasks.repo import TaskRecord
from services.api.schemas.common import Page, RequestModel, ResponseModel


class TaskIn(RequestModel):
    kind: Literal[KINDS] = "compaction"  # type: ignore[valid-type]
    override_disabled: bool = Field(
        default=False,
        description="run this kind once although the table's policy disables it; recorded "
        "on the task (without it, triggering a disabled kind is a 409)",
    )


class TransitionOut(ResponseModel):
    from_state: str | None
    to_state: str
    actor: str
    reason: str | None
    leader_epoch: int | None
    at: datetime


class RunOut(ResponseModel):
    attempt: int
    state: str
    scheduler_id: str
    leader_epoch: int
    spark_app_id: str | None
    started_at: datetime
    finished_at: datetime | None
    duration_ms: int | None
    metrics: dict[str, Any] | None
    committed_snapshot_id: int | None
    error: str | None
    # The error's message, then Spark's own WARN/ERROR lines of the job (tasks.runs.log_tail_of).
    log_tail: str | None
    # Its Spark UI while it runs, its history server page once it ended (when configured).
    ui_url: str | None
    mode: str = Field(description="session (the leader's warm session) or application")
    deploy_mode: str | None = Field(
        description="an application's: client or cluster; warm-host when its family's warm "
        "host ran it (WARM_FAMILIES)"
    )


class TaskOut(ResponseModel):
    id: int
    table: str
    kind: str
    state: str
    priority: int
    trigger: dict[str, Any]
    plan: dict[str, Any] | None
    result: dict[str, Any] | None
    reason: str | None
    attempt: int
    max_attempts: int
    not_before: datetime
    holder: str | None
    created_at: datetime
    updated_at: datetime
    on_hold: str | None = Field(
        default=None,
        description="a task not yet running: what keeps it from starting now (the global "
        "freeze, its table's pause, a writer's blocker), e.g. `paused by X since T: "
        "reason`; null when nothing does",
    )

    @classmethod
    def of(cls, task: Task, table: str, **more: Any) -> Self:
        """The task's own fields, its table's namespace.name, and `more` (computed ones,
        and a subclass's)."""
        own = {
            f: getattr(task, f)
            for f in cls.model_fields
            if f not in ("table", "on_hold") and f not in more
        }
        return cls(table=table, **own, **more)


class TaskDetail(TaskOut):
    history: list[TransitionOut]
    runs: list[RunOut]

    @classmethod
    def of_record(cls, record: TaskRecord, on_hold: str | None = None) -> TaskDetail:
        return cls.of(
            record.task, record.table, history=record.history, runs=record.runs, on_hold=on_hold
        )


class TaskPage(Page[TaskOut]):
    pass


class CostRowOut(ResponseModel):
    """One group's runs and what Spark says they cost (`metrics.cost` of each run)."""

    key: str = Field(
        description="the group: catalog.namespace.name, catalog.namespace, kind, "
        "pool, or a UTC date"
    )
    runs: int = Field(description="runs that finished in the window")
    measured_runs: int = Field(description="of which with Spark metrics (not a recovered run)")
    executor_cpu_s: float = Field(
        description="executor CPU seconds (with the driver CPU of an Arrow-rewritten "
        "compaction, which works in the driver: each run's metrics.cost.driver_cpu_s)"
    )
    executor_run_s: float = Field(description="executor task seconds")
    input_bytes: float = Field(description="bytes Spark read")
    shuffle_bytes: float = Field(description="shuffle bytes written")
    written_bytes: float = Field(description="bytes of the data files the commits added")
    files_written: float = Field(description="data files the commits added")
    wall_s: float = Field(description="the runs' wall seconds, for comparison")


class CostsOut(ResponseModel):
    by: str
    since: datetime
    truncated: bool = Field(description="more groups than the 1,000 listed")
    items: list[CostRowOut]


class CapacityDecisionOut(ResponseModel):
    at: datetime
    before: int
    after: int
    reason: str = Field(description="why the leader changed the pool's capacity")
    queued: int = Field(description="runnable tasks of the pool it saw")
    running: int
    leader_epoch: int


class ElasticOut(ResponseModel):
    """A pool's elastic capacity (settings `POOL_CAPACITY`): its limits, now, and why."""

    min: int
    max: int
    scale_up_wait_s: float
    scale_up_queued_per_slot: float
    step: int
    scale_down_idle_s: float
    capacity: int = Field(description="the jobs the pool may run at once now")
    reason: str = Field(description="the last decision's reason")
    changed_at: datetime | None
    idle_since: datetime | None = Field(description="a slot free with nothing runnable since")
    decisions: list[CapacityDecisionOut] = Field(description="the latest changes, newest first")


class PoolOut(ResponseModel):
    pool: str
    mode: str = Field(description="session or application (POOL_MODES)")
    running: int
    queued: int = Field(description="planned tasks due whose table runs nothing")
    oldest_wait_s: float | None
    limit: int | None = Field(description="jobs it may run at once now (null: no limit)")
    elastic: ElasticOut | None = Field(description="null: a fixed pool")


class PoolsOut(ResponseModel):
    items: list[PoolOut]
