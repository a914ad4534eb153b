"""The kinds that run on a Hudi table (issue 28), judged and planned from its timeline and
files (no JVM), by kind: compaction (`hudi_compaction`), clean and archival
(`hudi_clean`), clustering (`hudi_clustering`), TTL (`hudi_ttl`), the column-stats index
(`hudi_stats`). The format's planner in
`kinds.formats.PLANNERS`; each job runs Hudi's own procedures (`lakewarden.jobs.hudi`).

Every kind is judged when the table's timeline moves (and at registration, the baseline
event), clean, TTL and stats too; the leader's sweep opens those three by time as well, the
first one interval after the registration (`kinds.formats.judged_at_registration`)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from lakewarden.catalogs.catalog import CatalogEntry, TableRef
from lakewarden.db.models import JobRun, Task
from lakewarden.formats.hudi import column_stats, incremental
from lakewarden.formats.hudi.catalog import open_timeline
from lakewarden.formats.hudi.facts import read_facts
from lakewarden.formats.hudi.timeline import HudiTimeline
from lakewarden.kinds import hudi_clean, hudi_clustering, hudi_compaction, hudi_stats, hudi_ttl
from lakewarden.kinds.base import PlanOutcome, Verdict
from lakewarden.kinds.ready_pins import ready_pins
from lakewarden.policy.model import (
    CleanPolicy,
    ClusteringPolicy,
    CompactionPolicy,
    KindPolicy,
    Policy,
    StatsPolicy,
    TTLPolicy,
    ZOrderPolicy,
)

KINDS = frozenset({"compaction", "clean", "clustering", "zorder", "ttl", "stats"})


def recorded(session: Session, table_id: int, kinds: tuple[str, ...], key: str) -> set[str]:
    """Every instant a lakewarden run of this table's `kinds` recorded under `key` in its
    metrics (one instant, or a list of them)."""
    found = session.scalars(
        select(JobRun.metrics[key])
        .join(Task, Task.id == JobRun.task_id)
        .where(Task.table_id == table_id, Task.kind.in_(kinds), JobRun.metrics[key].isnot(None))
    )
    out: set[str] = set()
    for value in found:
        out.update(str(v) for v in (value if isinstance(value, list) else [value]) if v)
    return out


def context(session: Session, table_id: int) -> dict[str, Any]:
    """What the planners need from the table's past runs: the instants lakewarden made
    (its own, never the writer's)."""
    return {
        "ours": hudi_compaction.planned_instants(session, table_id),
        "cleans": recorded(session, table_id, (hudi_clean.KIND,), hudi_clean.CLEANED),
        "clusterings": recorded(session, table_id, hudi_clustering.KINDS, hudi_compaction.PLANNED),
        "indexings": recorded(session, table_id, (hudi_stats.KIND,), hudi_stats.BUILT),
        # readiness (issue 28): the ready instants a savepoint pins
        "ready_pins": ready_pins(session, table_id, datetime.now(UTC), tagged=True),
    }


def plan_table(
    kind: str, section: KindPolicy, entry: CatalogEntry, ref: TableRef, context: dict[str, Any]
) -> PlanOutcome:
    """A Hudi table's plan for `kind`, from its timeline and files (no JVM), or why not."""
    if kind not in KINDS:
        return PlanOutcome(None, f"{kind} does not run on Hudi tables yet (issue 28)")
    timeline = open_timeline(entry, ref)
    if isinstance(section, CompactionPolicy):
        facts = read_facts(timeline.base_path, timeline, incremental.shared().slices)
        return explained(hudi_compaction.plan(section, facts, timeline, context["ours"]), timeline)
    if isinstance(section, CleanPolicy):
        return hudi_clean.plan(
            section, timeline, context["cleans"], datetime.now(UTC), context.get("ready_pins", ())
        )
    if isinstance(section, ClusteringPolicy | ZOrderPolicy):
        facts = read_facts(timeline.base_path, timeline, incremental.shared().slices)
        outcome = hudi_clustering.plan(kind, section, facts, timeline, context["clusterings"])
        return explained(outcome, timeline)
    if isinstance(section, TTLPolicy):
        return hudi_ttl.plan(section, timeline, datetime.now(UTC))
    if isinstance(section, StatsPolicy):
        state = column_stats.read_state(timeline)
        return hudi_stats.plan(section, state, timeline.base_path, context["indexings"])
    raise TypeError(f"not a Hudi kind's policy section: {type(section).__name__}")


def explained(outcome: PlanOutcome, timeline: HudiTimeline) -> PlanOutcome:
    """The reason says when the file slices were listed incrementally (`hudi.incremental`)."""
    read = incremental.shared().last.get(timeline.base_path)
    said = read.explain() if read is not None else ""
    return replace(outcome, reason=f"{outcome.reason} ({said})") if said else outcome


def verdicts(policy: Policy, timeline: HudiTimeline, ctx: dict[str, Any]) -> dict[str, Verdict]:
    """Each Hudi kind's verdict on the table as it is now (`ctx`: `context`'s answer);
    a disabled kind's without reading anything for it."""
    out: dict[str, Verdict] = {}
    compaction = policy.compaction
    facts = None
    if compaction.enabled:
        facts = read_facts(timeline.base_path, timeline, incremental.shared().slices)
        out["compaction"] = hudi_compaction.verdict(compaction, facts, timeline, ctx["ours"])
    else:
        out["compaction"] = Verdict(False, "compaction is disabled by policy")
    out["clean"] = hudi_clean.judge(policy.clean, timeline, ctx["cleans"], datetime.now(UTC))
    for kind in hudi_clustering.KINDS:
        section = policy.for_kind(kind)
        assert isinstance(section, ClusteringPolicy | ZOrderPolicy)
        if not section.enabled:
            out[kind] = Verdict(False, f"{kind} is disabled by policy")
            continue
        facts = facts or read_facts(timeline.base_path, timeline, incremental.shared().slices)
        out[kind] = hudi_clustering.verdict(kind, section, facts, timeline, ctx["clusterings"])
    out["ttl"] = hudi_ttl.verdict(policy.ttl, timeline, datetime.now(UTC))
    if policy.stats.enabled:
        state = column_stats.read_state(timeline)
        out["stats"] = hudi_stats.verdict(policy.stats, state, ctx["indexings"])[0]
    else:
        out["stats"] = Verdict(False, "stats is disabled by policy")
    return out


def event_verdicts(
    session: Session, table_id: int, policy: Policy, timeline: HudiTimeline
) -> dict[str, Verdict]:
    """Each Hudi kind's verdict when the table's timeline moved."""
    return verdicts(policy, timeline, context(session, table_id))
