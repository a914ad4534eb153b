"""A job's finish and a poller never deadlock: the poller holds the table's row while it
moves the table's tasks, and finishing a run writes rows that reference the table (its
last success, a kind hold). `finish_run` takes the table's row before the task's, the
order every other writer keeps. Real Postgres, no Spark."""

from __future__ import annotations

import threading
import time

from fastapi.testclient import TestClient
from helpers import append_batches, lead, make_table
from sqlalchemy import text

from lakewarden.db.models import JobRun, Task
from lakewarden.db.session import transaction
from lakewarden.runtime import Runtime
from lakewarden.states import RunState, TaskState
from lakewarden.tasks import repo
from lakewarden.tasks.runs import finish_run


def _running_task(rt: Runtime, client: TestClient, holder: str, epoch: int) -> tuple[int, int]:
    """A compaction task on sales.orders, dispatched: (its id, the table's id)."""
    append_batches(make_table(rt, "sales", "orders"), 1)
    r = client.post("/api/v1/tables", json={"namespace": "sales", "name": "orders"})
    assert r.status_code == 201, r.text
    r = client.post("/api/v1/tables/sales/orders/tasks", json={"kind": "compaction"})
    assert r.status_code == 201, r.text
    task_id = int(r.json()["id"])
    with transaction(rt.engine) as s:
        repo.transition(s, task_id, TaskState.PLANNING, actor="worker")
        repo.transition(s, task_id, TaskState.PLANNED, actor="worker")
        task = s.get(Task, task_id)
        assert task is not None
        repo.transition(s, task_id, TaskState.RUNNING, actor=holder, attempt=1)
        s.add(
            JobRun(
                task_id=task_id,
                attempt=1,
                state=RunState.RUNNING,
                scheduler_id=holder,
                leader_epoch=epoch,
            )
        )
        return task_id, task.table_id


def test_a_finishing_job_waits_for_a_poller_holding_its_table(
    rt: Runtime, client: TestClient
) -> None:
    fence = lead(rt)
    task_id, table_id = _running_task(rt, client, fence.holder, fence.epoch)
    finished: list[str] = []
    with rt.engine.connect() as poller:
        poller.execute(text("SET lock_timeout = '20s'"))
        # The poller's transaction: the table's row first...
        poller.execute(
            text("SELECT id FROM managed_tables WHERE id = :t FOR UPDATE"), {"t": table_id}
        )
        job = threading.Thread(
            target=lambda: finished.append(
                finish_run(rt, fence, task_id, 1, committed_snapshot_id=1)
            )
        )
        job.start()
        time.sleep(1.0)  # the job's finish is now waiting on a lock
        # ...then the table's tasks: without the job waiting on the table's row first,
        # the job holds this task's row and Postgres aborts one of us as a deadlock.
        poller.execute(text("SELECT id FROM tasks WHERE id = :t FOR UPDATE"), {"t": task_id})
        poller.commit()
    job.join(30)
    assert finished == [TaskState.SUCCEEDED]
    with transaction(rt.engine) as s:
        task = s.get(Task, task_id)
        assert task is not None and task.state == TaskState.SUCCEEDED
