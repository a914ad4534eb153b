"""Policy evaluation on commits: does this commit call for a task of each kind, and why?

The API evaluates from the snapshot summary alone (cheap, no file listing); the
worker then plans from the real file list and may still skip. Both record reasons.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from lakewarden.db.models import KindHold, ManagedTable, Task, TimelineEvent
from lakewarden.formats.hudi.facts import read_facts
from lakewarden.formats.hudi.timeline import HudiTimeline
from lakewarden.holds import describe as describe_hold
from lakewarden.kinds import REGISTRY, hudi_compaction
from lakewarden.kinds.base import EventFacts, Verdict
from lakewarden.policy.model import CompactionPolicy, Policy, first_problem
from lakewarden.tables import effective_policy_for
from lakewarden.tasks.birth import open_task, why_not


def event_facts(session: Session, table_id: int, kind: str, summary: dict[str, Any]) -> EventFacts:
    """What a commit is judged on for `kind` (its snapshot summary, and the table's history
    of `kind` tasks). Evaluation and explain both build the facts here."""
    return EventFacts(
        summary,
        _files_added_since_last_task(session, table_id, kind),
        _last_task_state(session, table_id, kind),
    )


def _files_added_since_last_task(session: Session, table_id: int, kind: str) -> int:
    """Data files that writers (not our own rewrites) added since the last `kind` task."""
    since = session.scalar(
        select(func.max(Task.created_at)).where(Task.table_id == table_id, Task.kind == kind)
    )
    return int(
        session.execute(
            text(
                "SELECT coalesce(sum((summary->>'added-data-files')::bigint), 0) "
                "FROM timeline_events WHERE table_id = :t AND operation <> 'replace' "
                "AND (CAST(:since AS timestamptz) IS NULL OR received_at > :since)"
            ),
            {"t": table_id, "since": since},
        ).scalar()
        or 0
    )


def _last_task_state(session: Session, table_id: int, kind: str) -> str | None:
    return session.scalar(
        select(Task.state)
        .where(Task.table_id == table_id, Task.kind == kind)
        .order_by(Task.id.desc())
        .limit(1)
    )


def hudi_verdicts(
    session: Session, row: ManagedTable, policy: Policy, timeline: HudiTimeline
) -> dict[str, Verdict]:
    """The kinds that run on a Hudi table and their verdicts, from its file-system view
    and timeline (lakewarden.kinds.hudi_compaction): compaction only, for now."""
    section = policy.for_kind(hudi_compaction.KIND)
    assert isinstance(section, CompactionPolicy)
    if not section.enabled:  # recorded as disabled by the caller: nothing to read
        return {hudi_compaction.KIND: Verdict(False, "compaction is disabled by policy")}
    facts = read_facts(timeline.base_path, timeline)
    ours = hudi_compaction.planned_instants(session, row.id)
    return {hudi_compaction.KIND: hudi_compaction.verdict(section, facts, timeline, ours)}


def evaluate_events(
    session: Session,
    row: ManagedTable,
    event_ids: list[int],
    actor: str,
    timeline: HudiTimeline | None = None,
) -> None:
    """Evaluate the newest of the new events for every event-driven kind; older ones are
    superseded by it. The event records one decision per kind, with its reason. A Hudi
    table (`timeline`: its timeline as just read) is judged by the kinds that run on it."""
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
    try:
        policy = effective_policy_for(session, row)
    except ValidationError as exc:
        # The commit is kept (nothing lost); nothing is decided until the policy is fixed.
        newest.decision = "policy-invalid"
        newest.decision_detail = {
            "reason": f"the stored policy no longer validates "
            f"({first_problem(exc)}): no kind is judged "
            f"until it is fixed (PUT /api/v1/tables/{row.namespace}/{row.name}/policy)"
        }
        session.flush()
        return
    detail: dict[str, Any] = {}
    hudi = None if timeline is None else hudi_verdicts(session, row, policy, timeline)
    for kind in REGISTRY.values():
        if kind.event_verdict is None:
            continue
        section = kind.section(policy)
        if hudi is not None and kind.name not in hudi:
            reason = f"{kind.name} does not run on Hudi tables yet (issue 28)"
            detail[kind.name] = {"decision": "no-action", "reason": reason}
            continue
        if not section.enabled:
            detail[kind.name] = {"decision": "disabled", "reason": f"{kind.name} is disabled"}
            continue
        verdict = (
            hudi[kind.name]
            if hudi is not None
            else kind.event_verdict(
                section, event_facts(session, row.id, kind.name, newest.summary)
            )
        )
        entry: dict[str, Any] = {"reason": verdict.reason, "metrics": verdict.metrics}
        if not verdict.needed:
            entry["decision"] = "no-action"
        else:
            task_id = open_task(
                session,
                table_id=row.id,
                policy_version=row.policy_version,
                kind=kind.name,
                section=section,
                actor=actor,
                trigger={
                    "source": "event",
                    "event_id": newest.id,
                    "snapshot_id": newest.snapshot_id,
                    **({"commit": newest.commit_id} if timeline is not None else {}),
                    "reason": verdict.reason,
                    "metrics": verdict.metrics,
                    "expected_gain": verdict.expected_gain,
                },
            )
            refused = None if task_id is not None else why_not(session, row.id, kind.name)
            if task_id is not None:
                entry.update(decision="task-created", task_id=task_id)
            elif isinstance(refused, KindHold):
                entry.update(
                    decision="held",
                    reason=f"{verdict.reason}; {describe_hold(session, row, refused)}",
                )
            else:
                entry.update(
                    decision="task-open",
                    task_id=refused.id if refused else None,
                    reason=f"{verdict.reason}; an open {kind.name} task already covers it",
                )
        detail[kind.name] = entry
    decisions = {d["decision"] for d in detail.values()}
    newest.decision = next(
        (d for d in ("task-created", "task-open", "held", "no-action") if d in decisions),
        "disabled",
    )
    newest.decision_detail = detail
    session.flush()
