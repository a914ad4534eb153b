"""Clean of a Hudi table (issue 28): Hudi's cleaner deletes the file versions no retained
commit reads, then Hudi's timeline archival moves old instants off the active timeline;
both through Hudi's own procedures (`run_clean`, `archive_commits`) in a Hudi-family
application (`lakewarden.jobs.hudi`).

The table's `clean` policy section, read the Hudi way: the cleaner keeps the latest
`retained` write commits (`KEEP_LATEST_COMMITS`), where `retained` is the larger of
`keep_last_snapshots` and the write commits completed in the last `max_snapshot_age_hours`
(a commit is Iceberg's snapshot: never below either retention). Archival keeps one more
instant than that (Hudi's rule: `hoodie.keep.min.commits` > the cleaner's retained commits).
`enabled`, `priority`, `pool`, `timeout_minutes` as for Iceberg; the orphan and manifest
fields are Iceberg's and not read. Judged when the timeline moves (not swept by time):
a clean is due when file versions no retained commit reads are still on storage
(`formats.hudi.file_versions`, a listing and the timeline, no JVM).

Readiness' pins (issue 28, with `readiness.tag`): the job first savepoints each ready
partition's instant (`READY_SAVEPOINT`) and deletes lakewarden's readiness savepoints whose
pins lapsed (`readiness.tag_retention_days`); the leader's readiness round opens a clean
task when a partition becomes ready. A savepoint fights no writer: it is made (or deleted)
also on a table whose writer cleans, without running the cleaner there.

Never fight the writer: a table whose writer cleans (`hoodie.clean.automatic` or async
clean true in its hoodie.properties or its last write commit's extraMetadata, or a
completed clean on its timeline no lakewarden run made) is skipped with that reason, as is
one with a clean someone else left pending.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from lakewarden.formats.hudi.file_versions import Cleanable, savepoint_comments, table_cleanable
from lakewarden.formats.hudi.timeline import WRITE_ACTIONS, HudiTimeline, instant_millis
from lakewarden.kinds.base import PlanOutcome, Verdict
from lakewarden.policy.model import CleanPolicy

KIND = "clean"
# Where a run records the clean instant(s) Hudi's cleaner made (its metrics): a completed
# clean that no run recorded is the writer's.
CLEANED = "hudi_clean_instants"
# Readiness' savepoints (issue 28): a ready partition's instant, savepointed so that every
# cleaner keeps what a reader pinned at it reads; made (and lapsed ones deleted) by the
# clean job first. Its comment is how lakewarden tells them from anyone else's.
READY_SAVEPOINT = "lakewarden readiness pin"
READY_SAVEPOINTS, RELEASED_SAVEPOINTS = "ready_savepoints", "released_savepoints"
WRITER_CLEANS = (
    "hoodie.clean.automatic",
    "hoodie.clean.async.enabled",
    "hoodie.clean.async",
)


def _on(value: Any) -> bool:
    return str(value).strip().lower() == "true"


def retained_commits(policy: CleanPolicy, timeline: HudiTimeline, now: datetime) -> int:
    """Write commits the cleaner keeps: `keep_last_snapshots`, or more when more completed
    within `max_snapshot_age_hours`."""
    since = (now - timedelta(hours=policy.max_snapshot_age_hours)).timestamp() * 1000
    young = sum(
        1
        for i in timeline.completed()
        if i.action in WRITE_ACTIONS and instant_millis(i.completed or i.requested) >= since
    )
    return max(policy.keep_last_snapshots, young)


def writer_cleans(timeline: HudiTimeline, ours: Iterable[str]) -> str | None:
    """Why the table's writer (or Hudi's own job) cleans it, or None."""
    props: Mapping[str, Any] = timeline.properties
    for key in WRITER_CLEANS:
        if _on(props.get(key)):
            return f"its hoodie.properties set {key}=true: the writer cleans"
    done = timeline.completed()
    writes = [i for i in done if i.action in WRITE_ACTIONS]
    if writes:
        extra: Mapping[str, Any] = timeline.read_instant(writes[-1]).get("extraMetadata") or {}
        for key in WRITER_CLEANS:
            if _on(extra.get(key)):
                return (
                    f"its last write commit {writes[-1].requested} says {key}=true: the "
                    "writer cleans"
                )
    ours = set(ours)
    theirs = [i.requested for i in done if i.action == "clean" and i.requested not in ours]
    if theirs:
        return (
            f"clean {theirs[-1]} on its timeline was not made by lakewarden: the writer "
            "(hoodie.clean.automatic, Hudi's default) or Hudi's own job cleans it"
        )
    return None


def verdict(
    policy: CleanPolicy, timeline: HudiTimeline, found: Cleanable, ours: Iterable[str]
) -> Verdict:
    """Is a clean due: file versions no retained commit reads are still on storage?"""
    metrics = {
        "retained_commits": found.retained,
        "earliest_commit_to_retain": found.earliest_retained,
        "cleanable_files": found.files,
        "cleanable_bytes": found.bytes,
        "cleanable_slices": found.slices,
        "replaced_file_groups": found.file_groups_replaced,
        "file_versions_on_storage": found.versions_on_storage,
        "kept_by_savepoints": found.kept_by_savepoints,
        "timeline_length": len(timeline.completed()),
    }
    if not policy.enabled:
        return Verdict(False, "clean is disabled by policy", metrics)
    pending = [i.requested for i in timeline.pending() if i.action == "clean"]
    if pending:
        return Verdict(
            False,
            f"clean {pending[-1]} is pending, left by someone else: theirs to finish "
            "(lakewarden never runs a plan it did not make)",
            metrics,
        )
    writer = writer_cleans(timeline, ours)
    if writer is not None:
        return Verdict(False, f"{writer}; lakewarden does not fight it", metrics)
    keep = (
        f"keeping the latest {found.retained} write commits (keep_last_snapshots, or those "
        "within max_snapshot_age_hours)"
    )
    if found.kept_by_savepoints:
        held = savepoint_comments(timeline)
        names = ", ".join(f"{at} ({why or 'no comment'})" for at, why in sorted(held.items()))
        keep += (
            f"; {found.kept_by_savepoints} older file version(s) stay for savepoint(s) {names}: "
            "Hudi's cleaner keeps what a savepoint reads, until the savepoint is deleted"
        )
    if found.earliest_retained is None:
        return Verdict(
            False, f"no more write commits than retained: nothing to clean, {keep}", metrics
        )
    if found.files == 0:
        return Verdict(
            False,
            f"no file version older than commit {found.earliest_retained} is left to delete, "
            f"{keep}",
            metrics,
        )
    return Verdict(
        True,
        f"{found.files} files ({found.bytes} bytes: {found.slices} older file slices, "
        f"{found.file_groups_replaced} replaced file groups) no query as of commit "
        f"{found.earliest_retained} or later reads, {keep}",
        metrics,
        {"files_deleted_estimate": found.files, "bytes_freed_estimate": found.bytes},
    )


def judge(
    policy: CleanPolicy, timeline: HudiTimeline, ours: Iterable[str], now: datetime
) -> Verdict:
    """The verdict of the table as it is now (a listing of its files)."""
    if not policy.enabled:
        return Verdict(False, "clean is disabled by policy")
    found = table_cleanable(timeline, retained_commits(policy, timeline, now))
    return verdict(policy, timeline, found, ours)


def savepoint_work(
    timeline: HudiTimeline, pins: Iterable[Mapping[str, Any]]
) -> tuple[list[str], list[str]]:
    """Readiness' savepoints (issue 28): (the pinned instants to savepoint, lakewarden's
    readiness savepoints whose pins lapsed, to delete). A pinned instant already
    savepointed (by anyone) needs none; one no longer on the timeline cannot have one."""
    completed = {i.requested for i in timeline.completed() if i.action in WRITE_ACTIONS}
    kept = {str(p["commit"]) for p in pins}
    savepoints = {i.requested: i for i in timeline.completed() if i.action == "savepoint"}
    ours = {
        at
        for at, i in savepoints.items()
        if timeline.read_instant(i).get("comments") == READY_SAVEPOINT
    }
    make = sorted(kept & completed - set(savepoints))
    return make, sorted(ours - kept)


def plan(
    policy: CleanPolicy,
    timeline: HudiTimeline,
    ours: Iterable[str],
    now: datetime,
    pins: Iterable[Mapping[str, Any]] = (),
) -> PlanOutcome:
    """The job's plan (base path, the commits the cleaner keeps, archival's bounds; the
    readiness savepoints to make and delete first), or why not. With savepoints to make
    or delete and nothing to clean (or a writer that cleans), the plan only does those:
    a savepoint fights no cleaner, every cleaner keeps what it reads."""
    found = judge(policy, timeline, ours, now)
    make, release = savepoint_work(timeline, pins) if policy.enabled else ([], [])
    if not found.needed and not (make or release):
        return PlanOutcome(None, found.reason)
    reason = found.reason
    if make or release:
        reason = (
            f"readiness: savepoint {', '.join(make) or 'none'}, delete lapsed savepoint(s) "
            f"{', '.join(release) or 'none'}; {'clean: ' if found.needed else 'no clean: '}"
            f"{found.reason}"
        )
    retained = int(found.metrics.get("retained_commits") or 1)
    return PlanOutcome(
        {
            "format": "hudi",
            "base_path": timeline.base_path,
            # readiness (issue 28): savepoints made and lapsed ones deleted before the clean
            READY_SAVEPOINTS: make,
            RELEASED_SAVEPOINTS: release,
            "clean": found.needed,
            "clean_policy": "KEEP_LATEST_COMMITS",
            "retain_commits": retained,
            # Hudi archives down to min once the active timeline holds more than max; min
            # must exceed the cleaner's retained commits.
            "archive_min_commits": retained + 1,
            "archive_max_commits": retained + 11,
            "metadata_table": bool(timeline.properties.get("hoodie.table.metadata.partitions")),
            "expected_files_deleted": found.metrics["cleanable_files"],
            "earliest_commit_to_retain": found.metrics.get("earliest_commit_to_retain"),
        },
        reason,
    )
