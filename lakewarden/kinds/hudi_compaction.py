"""Compaction of a merge-on-read Hudi table (issue 28): merge each file slice's log files
into a new base file with Hudi's own procedures (`lakewarden.formats.hudi.jobs`), run as a
Spark application of its own in the Hudi session family (`lakewarden.jobs.hudi`).

The same `compaction` policy section as Iceberg's, two of its fields read the Hudi way:
`min_input_files`: a file slice with at least this many log files is due (a reader merges
each of them into every read of the slice); `target_file_size_bytes`: log files holding
this many bytes in all are due (a target file's worth of rows read the slow way).
`enabled`, `priority`, `pool`, `timeout_minutes` mean what they mean for Iceberg; the other
fields are Iceberg's bin-packing and are not read for Hudi tables.

Never fight the writer: a copy-on-write table has nothing to compact; a table whose writer
compacts (inline or async, said by its hoodie.properties or its last delta commit's
metadata, or seen: a compaction on the timeline that no lakewarden run planned) is skipped
with that reason, as is one with a compaction someone else planned and left pending.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from lakewarden.catalogs.catalog import CatalogEntry, TableRef
from lakewarden.db.models import JobRun, Task
from lakewarden.formats.hudi import incremental
from lakewarden.formats.hudi.catalog import open_timeline
from lakewarden.formats.hudi.facts import HudiFacts, read_facts
from lakewarden.formats.hudi.timeline import HudiTimeline, Instant
from lakewarden.kinds.base import PlanOutcome, Verdict
from lakewarden.policy.model import CompactionPolicy, KindPolicy, Policy

KIND = "compaction"
# Where a run records the instant it planned (its metrics, also while it runs): a retry
# of the task executes that instant, never a new schedule.
PLANNED = "hudi_planned_instant"
# Write configs by which a writer compacts on its own (inline, or scheduled inline and run
# by its async service). `extra.` keys: the writer's commit extraMetadata (`summarize`).
WRITER_COMPACTS = (
    "hoodie.compact.inline",
    "hoodie.compact.schedule.inline",
    "hoodie.datasource.compaction.async.enable",
)


def planned_instants(session: Session, table_id: int) -> set[str]:
    """Every compaction instant a lakewarden run of this table planned."""
    found = session.scalars(
        select(JobRun.metrics[PLANNED].astext)
        .join(Task, Task.id == JobRun.task_id)
        .where(Task.table_id == table_id, Task.kind == KIND, JobRun.metrics[PLANNED].isnot(None))
    )
    return {i for i in found if i}


def planned_by_task(session: Session, task_id: int) -> str | None:
    """The instant an earlier run of this task planned (the newest), if any."""
    return session.scalar(
        select(JobRun.metrics[PLANNED].astext)
        .where(JobRun.task_id == task_id, JobRun.metrics[PLANNED].isnot(None))
        .order_by(JobRun.attempt.desc())
        .limit(1)
    )


def _on(value: Any) -> bool:
    return str(value).strip().lower() == "true"


def writer_compacts(
    timeline: HudiTimeline, ours: Iterable[str], instants: list[Instant] | None = None
) -> str | None:
    """Why the table's writer (or Hudi's own job) compacts it, or None. `instants`: the
    timeline's listing already read (`HudiTimeline.completed`)."""
    props = timeline.properties
    for key in WRITER_COMPACTS:
        if _on(props.get(key)):
            return f"its hoodie.properties set {key}=true: the writer compacts"
    ours = set(ours)
    done = timeline.completed(instants)
    deltas = [i for i in done if i.action == "deltacommit"]
    if deltas:
        extra: Mapping[str, Any] = timeline.read_instant(deltas[-1]).get("extraMetadata") or {}
        for key in WRITER_COMPACTS:
            if _on(extra.get(key)):
                return (
                    f"its last delta commit {deltas[-1].requested} says {key}=true: "
                    "the writer compacts"
                )
    theirs = [i.requested for i in done if i.action == "commit" and i.requested not in ours]
    if theirs:
        return (
            f"compaction {theirs[-1]} on its timeline was not planned by lakewarden: the "
            "writer (inline or async) or Hudi's own job compacts it"
        )
    return None


# A table at version 6 is a Hudi 0.x writer's. Its Flink writer (0.14) does not check its
# appends against a compaction another process planned: a delta commit requested just after
# lakewarden's plan wrote to the slice the compaction replaced, and its updates were lost
# (tests/integration/test_live_writer.py at 240 s). So lakewarden compacts such a table only
# once its writer has been quiet this long: the task opens when compaction is due and its
# planning waits (back to pending until then, again if the writer wrote meanwhile), so a
# writer that stops is compacted without waiting for a commit that would never come.
OLD_WRITER_QUIET_S = 900.0


def verdict(
    policy: CompactionPolicy,
    facts: HudiFacts,
    timeline: HudiTimeline,
    ours: Iterable[str],
    now: float | None = None,
) -> Verdict:
    """Is a compaction due, from the file-system view and the timeline (no JVM)? `now`:
    the clock (epoch seconds) a writer's last delta commit is aged by."""
    most = max(facts.log_files_per_slice, default=0)
    metrics = {
        "table_type": facts.table_type,
        "log_files": facts.log_files,
        "log_bytes": facts.log_bytes,
        "max_log_files_per_slice": most,
        "slices_with_log_files": sum(1 for n in facts.log_files_per_slice if n),
        "threshold_log_files_per_slice": policy.min_input_files,
        "threshold_log_bytes": policy.target_file_size_bytes,
    }
    if not policy.enabled:
        return Verdict(False, "compaction is disabled by policy", metrics)
    if facts.table_type != "MERGE_ON_READ":
        return Verdict(False, "copy-on-write: no log files, nothing to compact", metrics)
    ours = set(ours)
    instants = timeline.instants()  # the timeline listed once: every check reads this
    foreign = [i.requested for i in timeline.pending(instants) if i.action == "compaction"]
    foreign = [i for i in foreign if i not in ours]
    if foreign:
        return Verdict(
            False,
            f"compaction {foreign[-1]} was planned by someone else and is pending: theirs "
            "to run (lakewarden never runs a plan it did not make)",
            metrics,
        )
    writer = writer_compacts(timeline, ours, instants)
    if writer is not None:
        return Verdict(False, f"{writer}; lakewarden does not fight it", metrics)
    due = _due(policy, facts, metrics, most)
    if due.needed and facts.table_version < 8:
        ago = timeline.written_ago_s(time.time() if now is None else now, instants)
        if ago is not None and ago < OLD_WRITER_QUIET_S:
            return Verdict(
                True,
                f"{due.reason}, but table version {facts.table_version} (a Hudi 0.x "
                f"writer's) had a delta commit {ago:.0f}s ago: lakewarden compacts it only "
                f"after {OLD_WRITER_QUIET_S:.0f}s without one (a Hudi 0.14 Flink writer "
                "appends to the file slice another process's compaction replaces: updates "
                "lost, docs/hudi.md); the task waits",
                metrics,
                due.expected_gain,
                wait_s=OLD_WRITER_QUIET_S - ago,
            )
    return due


def _due(policy: CompactionPolicy, facts: HudiFacts, metrics: dict[str, Any], most: int) -> Verdict:
    """Whether the log files call for a compaction, by the policy's thresholds."""
    gain = {"log_files_merged_estimate": facts.log_files}
    if most >= policy.min_input_files:
        return Verdict(
            True,
            f"a file slice has {most} log files >= min_input_files {policy.min_input_files} "
            f"({facts.log_files} log files, {facts.log_bytes} bytes in all)",
            metrics,
            gain,
        )
    if facts.log_files and facts.log_bytes >= policy.target_file_size_bytes:
        return Verdict(
            True,
            f"{facts.log_bytes} bytes of log files >= target_file_size_bytes "
            f"{policy.target_file_size_bytes}",
            metrics,
            gain,
        )
    return Verdict(
        False,
        f"at most {most} log files per slice < min_input_files {policy.min_input_files} and "
        f"{facts.log_bytes} log bytes < target_file_size_bytes {policy.target_file_size_bytes}",
        metrics,
    )


def plan(
    policy: CompactionPolicy, facts: HudiFacts, timeline: HudiTimeline, ours: Iterable[str]
) -> PlanOutcome:
    """The job's plan (the table's base path and what the planner saw), or why not. The
    compaction instant itself is planned by the job (Hudi's schedule), recorded on its run."""
    found = verdict(policy, facts, timeline, ours)
    if not found.needed or found.wait_s is not None:
        return PlanOutcome(None, found.reason, retry_in_s=found.wait_s)
    return PlanOutcome(
        {
            "format": "hudi",
            "base_path": facts.base_path,
            "head": facts.head,
            "files_before": facts.log_files + len(facts.base_file_sizes),
            "expected_files_after": len(facts.base_file_sizes),
            "log_files": facts.log_files,
            "log_bytes": facts.log_bytes,
            # The job runs Hudi's write client with the metadata table as the table has
            # it: one run with it off deletes the table's metadata table.
            "metadata_table": bool(timeline.properties.get("hoodie.table.metadata.partitions")),
        },
        found.reason,
    )


def context(session: Session, table_id: int) -> dict[str, Any]:
    """What `plan_table` needs from the table's past runs: the compactions lakewarden
    planned (its own, never the writer's)."""
    return {"ours": planned_instants(session, table_id)}


def plan_table(
    kind: str, section: KindPolicy, entry: CatalogEntry, ref: TableRef, context: dict[str, Any]
) -> PlanOutcome:
    """A Hudi table's plan, from its timeline and file-system view (no JVM)."""
    if kind != KIND or not isinstance(section, CompactionPolicy):
        return PlanOutcome(None, f"{kind} does not run on Hudi tables yet (issue 28)")
    timeline = open_timeline(entry, ref)
    facts = read_facts(timeline.base_path, timeline, incremental.shared().slices)
    return plan(section, facts, timeline, context["ours"])


def event_verdicts(
    session: Session, table_id: int, policy: Policy, timeline: HudiTimeline
) -> dict[str, Verdict]:
    """The verdicts of the kinds that run on a Hudi table when its timeline moved, from its
    file-system view and timeline as just read: compaction only, for now."""
    section = policy.for_kind(KIND)
    assert isinstance(section, CompactionPolicy)
    if not section.enabled:  # recorded as disabled by the caller: nothing to read
        return {KIND: Verdict(False, "compaction is disabled by policy")}
    facts = read_facts(timeline.base_path, timeline, incremental.shared().slices)
    return {KIND: verdict(section, facts, timeline, planned_instants(session, table_id))}
