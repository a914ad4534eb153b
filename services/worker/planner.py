"""Plan one claimed task: the file list decides what the job does, or why it is skipped."""

from __future__ import annotations

from typing import Any

from pyiceberg.table import Table

from lakewarden.planning.compaction import PlanOutcome, describe_files, plan_compaction
from lakewarden.policy import Policy


def plan_task(kind: str, policy: Policy, table: Table) -> PlanOutcome:
    if kind == "compaction":
        snapshot_id, files = describe_files(table)
        return plan_compaction(policy.compaction, snapshot_id, files)
    return PlanOutcome(None, f"no planner for task kind {kind!r}")


def summarize(outcome: PlanOutcome) -> dict[str, Any]:
    return {"plan": outcome.plan, "reason": outcome.reason}
