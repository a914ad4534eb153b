"""The outcome of a finished job run: the run recorded and the task moved on, fenced.

Shared by the scheduler (jobs in its warm Spark session) and a submitted application
(`lakewarden.jobs.application_entry`), which reports its own result under the fence of the leader
that holds its run."""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from lakewarden import holds
from lakewarden.backoff import retry_delay_s
from lakewarden.db.models import JobRun, ManagedTable, Task
from lakewarden.db.session import transaction
from lakewarden.errors import headline
from lakewarden.leader import Fence, FencedOut
from lakewarden.redact import redact, secrets_of
from lakewarden.runtime import Runtime
from lakewarden.settings import Settings
from lakewarden.states import RunState, TaskState
from lakewarden.tasks import repo

log = logging.getLogger(__name__)

# A run's log tail: the error's message lines, then the last lines Spark logged (WARN and
# ERROR during the job, or a submitted application's output), Java stack frames left out.
LOG_TAIL_LINES = 50
LOG_TAIL_CHARS = 8 * 1024
_ERROR_LINES, _ERROR_CHARS = 20, 3000  # of those, at most this much for the error
_MORE_FRAMES = re.compile(r"\.\.\. \d+ more$")
# A run stopped on purpose, by the task state it moves to.
RUN_STATE_OF = {
    TaskState.SKIPPED: RunState.HELD,
    TaskState.CANCELLED: RunState.CANCELLED,
    TaskState.PENDING: RunState.STOPPED,
}


def finish_run(
    rt: Runtime,
    fence: Fence,
    task_id: int,
    attempt: int,
    *,
    metrics: dict[str, Any] | None = None,
    committed_snapshot_id: int | None = None,
    error: BaseException | None = None,
    retryable: bool = True,
    moved_to: tuple[TaskState, str] | None = None,
    spark_log: str = "",
    partial: str | None = None,
) -> str:
    """Record the run and move the task on. Returns the task's new state (or why not).

    `moved_to` (state, reason): the job stopped on purpose without committing: held
    ("skipped"), or the policy changed under it ("cancelled", or "pending" to re-plan).
    `spark_log`: what Spark logged of a failed job (`lakewarden.spark.joblog`), or the tail
    of its application's output: it follows the error in the run's log tail.
    `partial`: the job committed only part of its work (file groups of a rewrite failed):
    what failed, as the task's reason; `spark_log` then goes to the run's log tail.
    """
    # Spark's and the catalog's messages may quote a setting or a URL: never a secret.
    secrets = secrets_of(rt.settings, rt.db_url)
    text_error = redact(f"{type(error).__name__}: {error}", secrets) if error else None
    # What the run's error and the task's reason say: for a JVM error the Java exception's
    # line, not py4j's "An error occurred while calling o100.loadTable." (`errors.headline`).
    line_error = redact(headline(error), secrets) if error else None
    text_partial = redact(partial, secrets) if partial else None
    try:
        with transaction(rt.engine) as s:
            run = s.scalars(
                select(JobRun)
                .where(JobRun.task_id == task_id, JobRun.attempt == attempt)
                .with_for_update()
            ).one_or_none()
            task = s.get(Task, task_id)
            if task is None:
                return "gone"  # table unregistered while the job ran
            # The table's row before the task's: finishing writes rows that reference the
            # table (its last success, a kind hold), and a poller holding the table's row
            # while it moves the table's tasks would otherwise deadlock with us (the order
            # every other writer keeps: table, then its tasks).
            s.execute(
                select(ManagedTable.id)
                .where(ManagedTable.id == task.table_id)
                .with_for_update(key_share=True)
            )
            cancelled = task.state == TaskState.CANCELLED
            if run is not None:
                run.state = (
                    RunState.CANCELLED
                    if cancelled
                    else RUN_STATE_OF[moved_to[0]]
                    if moved_to
                    else (RunState.FAILED if error else RunState.SUCCEEDED)
                )
                run.finished_at = func.now()
                run.duration_ms = int((datetime.now(UTC) - run.started_at).total_seconds() * 1000)
                # What the run recorded while it ran (a Hudi job's planned instant, a TTL's
                # savepoint: what a retry reads) stays under what is said now: a dead
                # application's run is finished with no metrics of its own.
                run.metrics = {**(run.metrics or {}), **(metrics or {})} or None
                run.committed_snapshot_id = committed_snapshot_id
                if run.spark_app_id:
                    run.ui_url = run_ui_url(rt.settings, run.spark_app_id, run.ui_url, True)
                if text_error:
                    run.error = (line_error or "")[:1000]
                    # The headline first (the run's error), then the message's other lines
                    more = text_error.splitlines()[1:]
                    run.log_tail = log_tail_of(
                        "\n".join([run.error, *more]), redact(spark_log, secrets)
                    )
                elif text_partial:
                    run.log_tail = log_tail_of(text_partial, redact(spark_log, secrets))
            if cancelled:
                return TaskState.CANCELLED
            if moved_to is not None:
                to, reason = moved_to
                if run is not None:
                    run.error = reason[:1000]
                repo.transition(
                    s,
                    task_id,
                    to,
                    actor=rt.process_id,
                    expected=(TaskState.RUNNING,),
                    fence=fence,
                    reason=reason[:2000],
                    **_stop_fields(to, metrics),
                )
                return to
            if error is None:
                result = {**(metrics or {}), "committed_snapshot_id": committed_snapshot_id}
                repo.transition(
                    s,
                    task_id,
                    TaskState.SUCCEEDED,
                    actor=rt.process_id,
                    expected=(TaskState.RUNNING,),
                    fence=fence,
                    reason=f"job committed part: {text_partial}"[:2000]
                    if text_partial
                    else "job committed"
                    if committed_snapshot_id
                    else "job finished with nothing to commit",
                    result=result,
                )
                return TaskState.SUCCEEDED
            assert text_error is not None and line_error is not None
            s.flush()  # this run's error counts in the streak `holds.cause_of` reads
            same = rt.settings.hold_after_same_failures
            cause = holds.cause_of(s, task, metrics, same_failures=same)
            if cause is not None or not retryable or attempt >= task.max_attempts:
                why = (
                    "not retryable"
                    if not retryable
                    else f"failed {same} times in a row with the same error"
                    if cause is not None and attempt < task.max_attempts
                    else f"attempt {attempt}/{task.max_attempts}"
                )
                repo.transition(
                    s,
                    task_id,
                    TaskState.FAILED,
                    actor=rt.process_id,
                    expected=(TaskState.RUNNING,),
                    fence=fence,
                    reason=f"{why}: {line_error[:1000]}"
                    + (f" ({task.kind} is now held on the table)" if cause else ""),
                )
                if cause is not None:
                    # The same transaction, fenced: no task of the kind can be made between
                    # the failure and the hold (lakewarden.holds).
                    holds.hold(s, fence, task, cause)
                return TaskState.FAILED
            delay = retry_delay_s(attempt, rt.settings.retry_base_s, rt.settings.retry_cap_s)
            repo.transition(
                s,
                task_id,
                TaskState.PENDING,
                actor=rt.process_id,
                expected=(TaskState.RUNNING,),
                fence=fence,
                reason=f"attempt {attempt}/{task.max_attempts} failed, re-planning in "
                f"{delay:.0f}s: {line_error[:500]}",
                not_before=datetime.now(UTC) + timedelta(seconds=delay),
                holder=None,
                plan=None,
            )
            return TaskState.PENDING
    except FencedOut as exc:
        log.warning("task %d: result not recorded, %s", task_id, exc)
        return "fenced"
    except repo.TransitionRejected as exc:
        log.warning("task %d: %s", task_id, exc)
        return "rejected"


def last_run_with(session: Session, table_id: int, kind: str, key: str) -> datetime | None:
    """When the newest succeeded run of a `kind` task on the table started whose metrics
    have `key` (e.g. clean's "remove_orphan_files": the runs that removed orphans)."""
    return session.scalar(
        select(func.max(JobRun.started_at))
        .join(Task, Task.id == JobRun.task_id)
        .where(
            Task.table_id == table_id,
            Task.kind == kind,
            JobRun.state == RunState.SUCCEEDED,
            JobRun.metrics.has_key(key),
        )
    )


def run_ui_url(settings: Settings, app_id: str, live_url: str | None, finished: bool) -> str | None:
    """The link a run records: the application's live Spark UI while it runs (when the UI
    is on), its page on the history server (`spark_history_url`) once it finished or
    when there is no live UI."""
    history = settings.spark_history_url
    if history and (finished or not live_url):
        return f"{history.rstrip('/')}/history/{quote(app_id, safe='')}"
    return live_url


def log_tail_of(error: str, spark_log: str) -> str:
    """The error's first message lines, then the last of `spark_log`'s: Java stack frames
    ("at ...", "... 12 more") and lines said before (the same "Caused by" of each failed
    task) left out; at most LOG_TAIL_LINES lines and LOG_TAIL_CHARS, whole lines only."""
    seen: set[str] = set()
    head = "\n".join(_message_lines(error, seen)[:_ERROR_LINES])[:_ERROR_CHARS]
    spark = _message_lines(spark_log, seen)
    if not spark:
        return head
    room_lines = LOG_TAIL_LINES - head.count("\n") - 2
    return _last(f"{head}\n{_SPARK_LOG}", spark[-room_lines:])


_SPARK_LOG = "--- Spark's log, last lines ---"


def _last(head: str, lines: list[str]) -> str:
    """`head`, then as many of the last `lines` as fit in LOG_TAIL_CHARS."""
    kept: list[str] = []
    room = LOG_TAIL_CHARS - len(head)
    for line in reversed(lines):
        room -= len(line) + 1
        if room < 0:
            break
        kept.append(line)
    return "\n".join([head, *reversed(kept)])


def _message_lines(text: str, seen: set[str]) -> list[str]:
    out = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("at ") or _MORE_FRAMES.match(stripped):
            continue
        if stripped not in seen:
            seen.add(stripped)
            out.append(line.rstrip())
    return out


def _stop_fields(to: str, metrics: dict[str, Any] | None) -> dict[str, Any]:
    """A re-planned task drops its plan and holder; a held one keeps what it measured."""
    fields: dict[str, Any] = {"plan": None, "holder": None} if to == TaskState.PENDING else {}
    if metrics:
        fields["result"] = metrics
    return fields
