"""Policy evaluation: does this commit call for a task, and why (or why not)?

The API evaluates from the snapshot summary alone (cheap, no file listing);
the worker then plans from the real file list and may still skip. Both
record their reasons.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from lakewarden.db.models import ManagedTable, TimelineEvent
from lakewarden.policy import CompactionPolicy, parse_policy
from lakewarden.tasks.repo import create_task, open_task


@dataclass(frozen=True)
class Verdict:
    needed: bool
    reason: str
    metrics: dict[str, Any] = field(default_factory=dict)
    expected_gain: dict[str, Any] = field(default_factory=dict)


def compaction_verdict(policy: CompactionPolicy, summary: dict[str, Any]) -> Verdict:
    """Files beyond what the table's bytes need at the target size are 'reducible'."""
    files = int(summary.get("total-data-files", 0) or 0)
    size = int(summary.get("total-files-size", 0) or 0)
    needed = max(1, math.ceil(size / policy.target_file_size_bytes)) if files else 0
    reducible = files - needed
    metrics = {
        "total_data_files": files,
        "total_files_size": size,
        "files_needed_at_target": needed,
        "reducible_files": reducible,
        "threshold_min_small_files": policy.min_small_files,
        "target_file_size_bytes": policy.target_file_size_bytes,
    }
    if not policy.enabled:
        return Verdict(False, "compaction is disabled by policy", metrics)
    if reducible >= policy.min_small_files:
        return Verdict(
            True,
            f"{reducible} reducible files >= min_small_files {policy.min_small_files} "
            f"({files} data files hold {size} bytes, {needed} would do at the target size)",
            metrics,
            {"data_files_removed_estimate": reducible},
        )
    return Verdict(
        False,
        f"{reducible} reducible files < min_small_files {policy.min_small_files}",
        metrics,
    )


def evaluate_events(session: Session, row: ManagedTable, event_ids: list[int], actor: str) -> None:
    """Evaluate the newest of the new events; the older ones are superseded by it."""
    if not event_ids:
        return
    events = list(
        session.scalars(
            select(TimelineEvent).where(TimelineEvent.id.in_(event_ids)).order_by(TimelineEvent.id)
        )
    )
    newest = events[-1]
    for ev in events[:-1]:
        ev.decision = "superseded"
        ev.decision_detail = {"reason": f"evaluated together with newer event {newest.id}"}
    policy = parse_policy(row.policy)
    verdict = compaction_verdict(policy.compaction, newest.summary)
    detail: dict[str, Any] = {
        "kind": "compaction",
        "reason": verdict.reason,
        "metrics": verdict.metrics,
    }
    if not verdict.needed:
        newest.decision = "disabled" if not policy.compaction.enabled else "no-action"
    else:
        task_id = create_task(
            session,
            table_id=row.id,
            kind="compaction",
            actor=actor,
            priority=policy.compaction.priority,
            max_attempts=policy.compaction.max_attempts,
            trigger={
                "source": "event",
                "event_id": newest.id,
                "snapshot_id": newest.snapshot_id,
                "reason": verdict.reason,
                "metrics": verdict.metrics,
                "expected_gain": verdict.expected_gain,
                "policy_version": row.policy_version,
            },
        )
        if task_id is not None:
            newest.decision = "task-created"
            detail["task_id"] = task_id
        else:
            existing = open_task(session, row.id, "compaction")
            newest.decision = "task-open"
            detail["task_id"] = existing.id if existing else None
            detail["reason"] = f"{verdict.reason}; an open compaction task already covers it"
    newest.decision_detail = detail
    session.flush()
