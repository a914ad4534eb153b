"""Policy evaluation on commits: does this commit call for a task of each kind, and why?

The API evaluates from the snapshot summary alone (cheap, no file listing); the
worker then plans from the real file list and may still skip. Both record reasons.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from sqlalchemy import BigInteger, any_, bindparam, select, text
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import Session

from lakewarden.db.models import KindHold, ManagedTable, TimelineEvent
from lakewarden.holds import describe as describe_hold
from lakewarden.kinds import REGISTRY
from lakewarden.kinds.base import EventFacts
from lakewarden.kinds.formats import PLANNERS
from lakewarden.policy.model import Policy, effective_policy, first_problem
from lakewarden.tables import namespaces_defaults
from lakewarden.tasks.birth import Birth, open_tasks, why_not_all


def event_facts(session: Session, table_id: int, kind: str, summary: dict[str, Any]) -> EventFacts:
    """What a commit is judged on for `kind` (its snapshot summary, and the table's history
    of `kind` tasks). Evaluation and explain both build the facts here (`history_facts`)."""
    added, last_state = history_facts(session, [(table_id, kind)])[(table_id, kind)]
    return EventFacts(summary, added, last_state)


# Per (table, kind): the data files writers (not our own rewrites) added since the last task
# of the kind was created, and the state of that last task. One statement for any number.
# The files added since are the table's running sum now less the sum the last task marked
# as it was created (migration 0034): probes of two indexes, however many events and tasks
# came before (B25's sustained rate fell while a task stayed open and the events since it
# grew: B41). A task from before that migration has no mark: the events since the kind's
# newest task are summed, a range of ix_timeline_events_table_received; no task yet: the
# running sum is all there is.
_HISTORY_FACTS = text(
    """
    SELECT p.table_id, p.kind, last.state,
        CASE WHEN last.id IS NULL THEN coalesce(f.added, 0)
             WHEN last.mark IS NOT NULL THEN coalesce(f.added, 0) - last.mark
             ELSE (SELECT coalesce(sum((e.summary->>'added-data-files')::bigint), 0)
                   FROM timeline_events e
                   WHERE e.table_id = p.table_id AND e.operation <> 'replace'
                     AND e.received_at > (SELECT max(t.created_at) FROM tasks t
                                          WHERE t.table_id = p.table_id AND t.kind = p.kind))
        END AS added
    FROM unnest(CAST(:table_ids AS bigint[]), CAST(:kinds AS varchar[])) AS p(table_id, kind)
    LEFT JOIN table_files_added f ON f.table_id = p.table_id
    LEFT JOIN LATERAL (SELECT t.id, t.state, t.files_added_mark AS mark FROM tasks t
                       WHERE t.table_id = p.table_id AND t.kind = p.kind
                       ORDER BY t.id DESC LIMIT 1) last ON true
    """
)


def history_facts(
    session: Session, pairs: Sequence[tuple[int, str]]
) -> dict[tuple[int, str], tuple[int, str | None]]:
    """{(table id, kind): (files added since the kind's last task, that task's state)}."""
    if not pairs:
        return {}
    found = session.execute(
        _HISTORY_FACTS,
        {"table_ids": [t for t, _ in pairs], "kinds": [k for _, k in pairs]},
    )
    return {(t, k): (int(added or 0), state) for t, k, state, added in found}


@dataclass(frozen=True)
class Evaluation:
    """The new events of one table to evaluate; `timeline`: a path table's log (Hudi's
    timeline, Delta's log), as just read; its format's kinds judge it."""

    row: ManagedTable
    event_ids: list[int]
    timeline: Any = None


@dataclass(frozen=True)
class _Newest:
    """The newest new event of a table, as evaluation reads it."""

    id: int
    snapshot_id: int | None
    commit_id: str | None
    summary: dict[str, Any]


def evaluate_events(
    session: Session,
    row: ManagedTable,
    event_ids: list[int],
    actor: str,
    timeline: Any = None,
) -> None:
    """`evaluate_batch` of one table."""
    evaluate_batch(session, [Evaluation(row, event_ids, timeline)], actor)


def evaluate_batch(session: Session, batch: Sequence[Evaluation], actor: str) -> None:
    """Evaluate the newest of each table's new events for every event-driven kind; older
    ones are superseded by it. The event records one decision per kind, with its reason. A
    path table (with its `timeline`) is judged by the kinds that run on its format
    (`kinds.formats.PLANNERS`).

    Set-based, whatever the number of tables: one read of the events, one of the
    namespaces' defaults, one of the tables' task history, one statement opening every
    task called for (with its transitions), one asking why the others were not opened, one
    writing every event's decision."""
    batch = [e for e in batch if e.event_ids]
    if not batch:
        return
    all_ids = sorted(i for e in batch for i in e.event_ids)
    newest: dict[int, _Newest] = {}
    decisions: dict[int, tuple[str, dict[str, Any]]] = {}
    for id_, table_id, snapshot_id, commit_id, summary in session.execute(
        select(
            TimelineEvent.id,
            TimelineEvent.table_id,
            TimelineEvent.snapshot_id,
            TimelineEvent.commit_id,
            TimelineEvent.summary,
        )
        .where(TimelineEvent.id == any_(bindparam("ids", all_ids, type_=ARRAY(BigInteger))))
        .order_by(TimelineEvent.id)
    ):
        newest[table_id] = _Newest(id_, snapshot_id, commit_id, summary or {})
    for e in batch:
        last = newest[e.row.id].id
        reason = {"reason": f"evaluated together with newer event {last}"}
        for id_ in e.event_ids:
            if id_ != last:
                decisions[id_] = ("superseded", reason)
    defaults = namespaces_defaults(session, [e.row for e in batch])
    parsed: dict[str, Policy | ValidationError] = {}
    judged: list[tuple[Evaluation, Policy]] = []
    for e in batch:
        row = e.row
        ns = defaults.get((row.catalog, row.namespace))
        key = json.dumps([row.policy, ns], sort_keys=True, default=str)
        if key not in parsed:  # tables of one policy (most of a fleet) parse it once
            try:
                parsed[key] = effective_policy(row.policy, ns)
            except ValidationError as exc:
                parsed[key] = exc
        policy = parsed[key]
        if isinstance(policy, ValidationError):
            # The commit is kept (nothing lost); nothing is decided until the policy is fixed.
            decisions[newest[row.id].id] = (
                "policy-invalid",
                {
                    "reason": f"the stored policy no longer validates "
                    f"({first_problem(policy)}): no kind is judged "
                    f"until it is fixed (PUT /api/v1/tables/{row.namespace}/{row.name}/policy)"
                },
            )
        else:
            judged.append((e, policy))
    _judge(session, judged, newest, decisions, actor)
    _record(session, decisions)


def _judge(
    session: Session,
    judged: list[tuple[Evaluation, Policy]],
    newest: dict[int, _Newest],
    decisions: dict[int, tuple[str, dict[str, Any]]],
    actor: str,
) -> None:
    """Each table's verdict of each event-driven kind, the tasks they call for opened at
    once, and the decision of each table's newest event put in `decisions`."""
    kinds = [k for k in REGISTRY.values() if k.event_verdict is not None]
    facts = history_facts(
        session,
        [
            (e.row.id, k.name)
            for e, policy in judged
            if e.timeline is None
            for k in kinds
            if k.section(policy).enabled
        ],
    )
    details: dict[int, dict[str, Any]] = {}
    births: list[Birth] = []
    asked: list[tuple[int, str, str]] = []  # (table id, kind, reason) of each birth
    for e, policy in judged:
        row, ev = e.row, newest[e.row.id]
        detail: dict[str, Any] = details.setdefault(row.id, {})
        own = (
            None
            if e.timeline is None
            else PLANNERS[row.format].event_verdicts(session, row.id, policy, e.timeline)
        )
        # A format's own planner may judge a time-swept kind by its log too (Hudi's clean).
        extra = [REGISTRY[k] for k in own or {} if REGISTRY[k] not in kinds]
        for kind in [*kinds, *extra]:
            section = kind.section(policy)
            if own is not None and kind.name not in own:
                reason = f"{kind.name} does not run on {row.format.title()} tables yet"
                detail[kind.name] = {"decision": "no-action", "reason": reason}
                continue
            if not section.enabled:
                detail[kind.name] = {"decision": "disabled", "reason": f"{kind.name} is disabled"}
                continue
            if own is not None:
                verdict = own[kind.name]
            else:
                assert kind.event_verdict is not None
                added, last_state = facts[(row.id, kind.name)]
                verdict = kind.event_verdict(section, EventFacts(ev.summary, added, last_state))
            entry: dict[str, Any] = {"reason": verdict.reason, "metrics": verdict.metrics}
            detail[kind.name] = entry
            if not verdict.needed:
                entry["decision"] = "no-action"
                continue
            births.append(
                Birth(
                    table_id=row.id,
                    policy_version=row.policy_version,
                    kind=kind.name,
                    section=section,
                    trigger={
                        "source": "event",
                        "event_id": ev.id,
                        "snapshot_id": ev.snapshot_id,
                        **({"commit": ev.commit_id} if e.timeline is not None else {}),
                        "reason": verdict.reason,
                        "metrics": verdict.metrics,
                        "expected_gain": verdict.expected_gain,
                    },
                )
            )
            asked.append((row.id, kind.name, verdict.reason))
    opened = open_tasks(session, births, actor=actor)
    refused = why_not_all(session, [(t, k) for i, (t, k, _) in enumerate(asked) if i not in opened])
    rows = {e.row.id: e.row for e, _ in judged}
    for i, (table_id, kind_name, reason) in enumerate(asked):
        entry = details[table_id][kind_name]
        found = refused.get((table_id, kind_name))
        if i in opened:
            entry.update(decision="task-created", task_id=opened[i])
        elif isinstance(found, KindHold):
            held = describe_hold(session, rows[table_id], found)
            entry.update(decision="held", reason=f"{reason}; {held}")
        else:
            entry.update(
                decision="task-open",
                task_id=found.id if found else None,
                reason=f"{reason}; an open {kind_name} task already covers it",
            )
    for table_id, detail in details.items():
        made = {d["decision"] for d in detail.values()}
        decision = next(
            (d for d in ("task-created", "task-open", "held", "no-action") if d in made),
            "disabled",
        )
        decisions[newest[table_id].id] = (decision, detail)


# One JSON text of (id, decision, detail) rows: psycopg dumps arrays element by element in
# Python (see events.ingest's insert).
_RECORD = text(
    """
    UPDATE timeline_events e SET decision = u.e->>1, decision_detail = (u.e->2)::jsonb
    FROM json_array_elements(CAST(:rows AS json)) AS u(e)
    WHERE e.id = (u.e->>0)::bigint
    """
)


def _record(session: Session, decisions: dict[int, tuple[str, dict[str, Any]]]) -> None:
    """Write every event's decision in one statement; the session's copies of those events
    (if any) are expired, so they are read again as written."""
    if not decisions:
        return
    ids = sorted(decisions)
    rows = [[i, decisions[i][0], decisions[i][1]] for i in ids]
    session.execute(_RECORD, {"rows": json.dumps(rows, default=str)})
    wanted = set(ids)
    for obj in list(session.identity_map.values()):
        if isinstance(obj, TimelineEvent) and obj.id in wanted:
            session.expire(obj)
