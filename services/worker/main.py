"""The worker loop: claim → heartbeat → plan → planned | skipped, a batch claimed at once
(up to CLAIM_BATCH) and planned one task at a time.

Idle, it sleeps until a task becomes pending (a NOTIFY: lakewarden.tasks.wakeup), a retry's
backoff ends, or the poll fallback (worker_poll_interval_s) comes round."""

from __future__ import annotations

import logging
import signal
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from pyiceberg.exceptions import NoSuchTableError
from sqlalchemy import select

from lakewarden import process
from lakewarden.backoff import retry_delay_s
from lakewarden.catalogs.catalog import TableRef, load_table
from lakewarden.db.models import ManagedTable, Task
from lakewarden.db.session import transaction
from lakewarden.events.listener import libpq_url
from lakewarden.kinds import REGISTRY, get_kind
from lakewarden.kinds.formats import PLANNERS, FormatPlanner
from lakewarden.logs import log_context
from lakewarden.policy import gate as policy_gate
from lakewarden.policy.gate import Verdict
from lakewarden.process import Ticker
from lakewarden.runtime import Runtime
from lakewarden.states import TaskState
from lakewarden.tables import ref_of
from lakewarden.tasks import repo
from lakewarden.tasks.wakeup import TaskWakeup

log = logging.getLogger(__name__)

# Tasks claimed in one transaction when a backlog waits: their claim, tables and gate in a
# few statements, not a few per task (B35). The batch's tasks not yet planned go back to
# pending when the worker stops, and once the batch is older than RELEASE_AFTER_S: a slow
# plan never keeps the rest from another, idle worker for long.
CLAIM_BATCH = 8
RELEASE_AFTER_S = 5.0


class Worker:
    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.stop = threading.Event()
        self.current_task: int | None = None
        self.held: frozenset[int] = frozenset()  # claimed, not yet planned (the heartbeat's)
        self.wake = threading.Event()  # a task became pending (lakewarden.tasks.wakeup)

    def _beat(self) -> None:
        task = self.current_task
        process.beat(self.rt, task, held=self.held | ({task} if task is not None else set()))

    def run_once(self) -> bool:
        """Claim a batch of tasks (up to CLAIM_BATCH) and plan them, one after another.
        Returns whether any was claimed."""
        with transaction(self.rt.engine) as s:
            tasks = repo.claim_batch_for_planning(
                s, self.rt.process_id, self.rt.settings.pinned_region, CLAIM_BATCH
            )
            if not tasks:
                return False
            rows = {
                row.id: row
                for row in s.scalars(
                    select(ManagedTable).where(ManagedTable.id.in_({t.table_id for t in tasks}))
                )
            }
            pairs = [(rows[t.table_id], t) for t in tasks]  # FK: every task's table is there
            batch = []
            for (row, task), verdict in zip(pairs, policy_gate.judge_all(s, pairs), strict=True):
                kind = REGISTRY.get(task.kind)  # unknown: planning fails below, saying so
                # A format with planners of its own (Hudi, Delta) plans from its log and files.
                own = PLANNERS.get(row.format)
                if own is not None:
                    context = own.context(s, row.id)
                else:
                    context = kind.plan_context(s, row.id) if kind is not None else {}
                batch.append((task, ref_of(row), row.catalog, verdict, context, own))
        self.held = frozenset(t.id for t in tasks)
        claimed_at = time.monotonic()
        try:
            for i, (task, ref, catalog, verdict, context, own) in enumerate(batch):
                if i and (self.stop.is_set() or time.monotonic() - claimed_at > RELEASE_AFTER_S):
                    self._release([t.id for t, *_ in batch[i:]])
                    break
                # attempt: the one this planning counts as (a failure spends it)
                table_name = f"{catalog}.{ref.dotted}"
                with log_context(task_id=task.id, table=table_name, attempt=task.attempt + 1):
                    self._plan(task, ref, catalog, verdict, context, own=own)
                self.held = self.held - {task.id}
        finally:
            self.held = frozenset()
        return True

    def _release(self, task_ids: list[int]) -> None:
        """Hand a batch's unplanned tasks back to pending, for any worker to claim; their
        attempts are not spent. One a reaper or an operator moved meanwhile is left as it
        is (the rest are then released one by one)."""
        late = f"its batch was claimed over {RELEASE_AFTER_S:g} s ago"
        why = "stopping" if self.stop.is_set() else late
        reasons = dict.fromkeys(task_ids, f"released unplanned by {self.rt.process_id}: {why}")
        for some in (reasons, *({t: r} for t, r in reasons.items())):
            try:
                with transaction(self.rt.engine) as s:
                    repo.transition_each(
                        s,
                        some,
                        TaskState.PENDING,
                        actor=self.rt.process_id,
                        expected=(TaskState.PLANNING,),
                        held_by=self.rt.process_id,
                        holder=None,
                    )
                if some is reasons:
                    return
            except repo.TransitionRejected as exc:
                log.info("not releasing task %d: %s", exc.task_id, exc)

    def _plan(
        self,
        task: Task,
        ref: TableRef,
        catalog: str,
        verdict: Verdict,
        context: dict[str, Any],
        *,
        own: FormatPlanner | None = None,
    ) -> bool:
        if verdict.section is None or verdict.action == "cancel":
            self._finish(task.id, TaskState.CANCELLED, verdict.reason)
            return True
        section, stamp = verdict.section, verdict.stamp
        self.current_task = task.id
        if self.rt.settings.fault_plan_delay_s:
            self.stop.wait(self.rt.settings.fault_plan_delay_s)  # failpoint: die mid-plan
        gone: type[Exception] = own.gone if own is not None else NoSuchTableError
        try:
            if own is not None:
                entry = self.rt.catalogs.entry(catalog)
                outcome = own.plan(task.kind, section, entry, ref, context)
            else:
                table = load_table(self.rt.catalogs.load(catalog), ref)
                kind = get_kind(task.kind)
                outcome = kind.plan(section, table, datetime.now(UTC), **context)
        except (NoSuchTableError, gone):
            self._finish(
                task.id, TaskState.SKIPPED, f"table {ref.dotted} no longer exists in the catalog"
            )
            return True
        except Exception as exc:
            log.exception("planning task %d failed", task.id)
            self._planning_failed(task.id, task.attempt, task.max_attempts, exc)
            return True
        finally:
            self.current_task = None
        if outcome.plan is None and outcome.retry_in_s is not None:
            # Not yet (a Hudi 0.x writer still writing): planned again later, no attempt spent.
            not_before = datetime.now(UTC) + timedelta(seconds=max(1.0, outcome.retry_in_s))
            self._finish(
                task.id, TaskState.PENDING, outcome.reason, not_before=not_before, holder=None
            )
        elif outcome.plan is None:
            self._finish(task.id, TaskState.SKIPPED, outcome.reason)
        else:
            # the stamp lets dispatch and the job see whether the policy changed since
            plan = {**outcome.plan, "policy": stamp.as_json() if stamp else None}
            self._finish(task.id, TaskState.PLANNED, outcome.reason, plan=plan)
        log.info("task %d (%s %s): %s", task.id, task.kind, ref.dotted, outcome.reason)
        return True

    def _finish(self, task_id: int, to: TaskState, reason: str, **fields: Any) -> None:
        try:
            with transaction(self.rt.engine) as s:
                repo.transition(
                    s,
                    task_id,
                    to,
                    actor=self.rt.process_id,
                    expected=(TaskState.PLANNING,),
                    held_by=self.rt.process_id,
                    reason=reason,
                    **fields,
                )
        except repo.TransitionRejected as exc:
            # Cancelled or reaped while we planned: our plan is no longer wanted.
            log.info("dropping plan for task %d: %s", task_id, exc)

    def _planning_failed(
        self, task_id: int, attempt: int, max_attempts: int, exc: Exception
    ) -> None:
        reason = f"planning failed: {type(exc).__name__}: {exc}"[:2000]
        if attempt + 1 >= max_attempts:
            self._finish(task_id, TaskState.FAILED, reason, attempt=attempt + 1)
            return
        delay = retry_delay_s(
            attempt + 1, self.rt.settings.retry_base_s, self.rt.settings.retry_cap_s
        )
        not_before = datetime.now(UTC) + timedelta(seconds=delay)
        self._finish(
            task_id,
            TaskState.PENDING,
            reason,
            attempt=attempt + 1,
            not_before=not_before,
            holder=None,
        )

    def serve(self) -> None:
        Ticker("heartbeat", self.rt.settings.heartbeat_interval_s, self._beat, self.stop).start()
        TaskWakeup(libpq_url(self.rt.db_url), {TaskState.PENDING: self.wake}, self.stop).start()
        region = self.rt.settings.pinned_region
        log.info(
            "worker %s started (%s)",
            self.rt.process_id,
            "every region" if region is None else f"region {region}",
        )
        while not self.stop.is_set():
            self.wake.clear()  # before looking: a wake-up while we look is kept
            try:
                claimed = self.run_once()
            except Exception:
                log.exception("worker loop error")
                claimed = False
            if not claimed:
                self._wait_for_work()
        process.forget(self.rt)

    def _wait_for_work(self) -> None:
        """Sleep until a task becomes pending, the earliest retry's backoff ends, or the
        poll fallback; looks at stop each second."""
        wait = self.rt.settings.worker_poll_interval_s
        try:
            with transaction(self.rt.engine) as s:
                due = repo.next_pending_due_in(s, self.rt.settings.pinned_region)
            if due is not None:
                wait = min(wait, max(0.0, due))
        except Exception:
            log.exception("could not read when the next retry is due")
        deadline = time.monotonic() + wait
        while not self.stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0 or self.wake.wait(min(1.0, left)):
                return


def main(rt: Runtime) -> None:
    worker = Worker(rt)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: worker.stop.set())
    worker.serve()
