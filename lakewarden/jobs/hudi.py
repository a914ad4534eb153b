"""Run a Hudi table's job (`lakewarden.kinds.hudi`: compaction, clustering and zorder,
clean and archival, TTL: `_ttl`, the column-stats index: `_stats`) on a Hudi-family
session and record its outcome: always in a Spark application of its own
(`lakewarden.jobs.application_entry`), never in the scheduler's warm Iceberg session (one
JVM has one classpath, and PySpark one JVM per process).

A compaction's or clustering's instant is planned once (Hudi's `run_compaction` or
`run_clustering` schedule) and recorded on the run at once (`hudi_planned_instant` in its
metrics): a retry of the task executes that instant (done already: the run succeeds
without running again), never a new schedule. A clean runs Hudi's cleaner, then its
timeline archival; a retry runs them again (each does only what is left).

A compaction or clustering is checked before its commit is visible
(`formats.hudi.precommit`): Hudi's write client executes the instant without completing
it, hudi-rs reads the base files it wrote and the file slices its plan replaces, and only
equal rows and checksums per partition are committed (`_checked`). A mismatch is never
committed: the inflight instant is rolled back (Hudi's own rollback; a clustering's plan
purged with it), the task fails for good with the run's `validation` and `undo` metrics,
and the critical `rewrite_mismatch` alert is raised, as an Iceberg mismatch does.

A plan hudi-rs cannot read (a log-only file group) is executed by Hudi's procedure, which
commits as it ends (the run's `before_commit` says so), and is validated after: the
table's rows and their order-independent checksum read by hudi-rs
(`lakewarden.formats.hudi.validation.digest`) right before the execution and after it
must be equal, and a mismatch is undone: before it executes, the table's newest write
commit is savepointed (`create_savepoint`), and a mismatch restores the table to it
(`rollback_to_savepoint`, which rolls the rewrite back), the run's `validation` and
`undo` metrics saying so. The savepoint is dropped after either way.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import select, update

from lakewarden import object_store
from lakewarden.db.models import JobRun, PartitionReadiness, Task
from lakewarden.db.session import transaction
from lakewarden.formats.hudi import column_stats, precommit
from lakewarden.formats.hudi import jobs as hudi_jobs
from lakewarden.formats.hudi import lock as hudi_lock
from lakewarden.formats.hudi.facts import HudiFacts, read_facts
from lakewarden.formats.hudi.file_versions import instants_read_by_latest_slices
from lakewarden.formats.hudi.storage import table_storage
from lakewarden.formats.hudi.timeline import WRITE_ACTIONS, HudiTimeline
from lakewarden.formats.hudi.validation import (
    Digest,
    KeyedRows,
    compare_beside_writer,
    digest,
    rows_by_key,
)
from lakewarden.jobs.execute import (
    Job,
    failpoint,
    finish_raised,
    job_cost,
    policy_check,
    record_app_id,
)
from lakewarden.kinds import hudi as hudi_kinds
from lakewarden.kinds import hudi_clean, hudi_compaction, hudi_stats, hudi_ttl, ttl
from lakewarden.leader import Fence
from lakewarden.outcomes import PlanRejected, RewriteMismatch
from lakewarden.runtime import Runtime
from lakewarden.spark.session import set_secrets
from lakewarden.tasks.runs import finish_run

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

# Where a rewrite's run records the commit it savepointed before rewriting (its undo point).
SAVEPOINT = "hudi_savepoint"
# Instants archival leaves beyond those the latest file slices read: a live writer's
# commits while the archival runs push its window forward.
ARCHIVE_MARGIN = 10


def record_planned(rt: Runtime, job: Job, instant: str) -> None:
    """The planned instant on the run, committed before the execution starts."""
    with transaction(rt.engine) as s:
        s.execute(
            update(JobRun)
            .where(JobRun.task_id == job.task_id, JobRun.attempt == job.attempt)
            .values(metrics={hudi_compaction.PLANNED: instant})
        )


def planned_before(rt: Runtime, job: Job) -> str | None:
    with transaction(rt.engine) as s:
        return hudi_compaction.planned_by_task(s, job.task_id)


def _validation(before: Digest, after: Digest, instant: str, seconds: float) -> dict[str, Any]:
    return {
        "status": "passed" if before == after else "failed",
        "reader": "hudi-rs",
        "rows": before.rows,
        "rows_after": after.rows,
        "checksum_before": str(before.checksum),
        "checksum_after": str(after.checksum),
        "after_instant": instant,
        "seconds": round(seconds, 3),
    }


def _rewrite(
    rt: Runtime,
    spark: SparkSession,
    fence: Callable[[], Fence],
    job: Job,
    metrics: dict[str, Any],
) -> str | None:
    """A compaction or clustering: plan the instant once (recorded on the run before it
    runs), execute it, check it before its commit (`_checked`; else validate after). A
    state when the run finished early (an earlier attempt finished it, or nothing to
    plan); None when `metrics` hold the outcome."""
    base_path = str(job.plan["base_path"])
    metadata = bool(job.plan.get("metadata_table"))
    options: dict[str, str] = {}  # the executing write client's (`_checked`)
    if job.kind == hudi_compaction.KIND:
        label = "compaction"

        def schedule() -> str | None:
            return hudi_jobs.schedule_compaction(spark, base_path)

        def execute(instant: str) -> None:  # a plan `_checked` cannot check
            hudi_jobs.run_compaction(spark, base_path, instant)
    else:
        label = "clustering"
        columns = [str(c) for c in job.plan.get("columns") or []]
        if not columns:
            raise PlanRejected(f"a clustering plan without columns: {sorted(job.plan)}")
        strategy = str(job.plan.get("strategy"))
        target = int(job.plan.get("target_file_size_bytes") or 128 << 20)
        options = hudi_jobs.clustering_options(columns, strategy, target, metadata)

        def schedule() -> str | None:
            return hudi_jobs.schedule_clustering(
                spark, base_path, columns, strategy, target, metadata
            )

        def execute(instant: str) -> None:  # a plan `_checked` cannot check
            hudi_jobs.run_clustering(spark, base_path, instant, metadata)

    instant = planned_before(rt, job)
    if instant is not None:
        timeline = HudiTimeline(base_path)
        done = {i.requested for i in timeline.completed()}
        if instant in done:  # an earlier attempt finished it: never run again
            return finish_run(
                rt,
                fence(),
                job.task_id,
                job.attempt,
                metrics={hudi_compaction.PLANNED: instant, "recovered": True},
            )
        if instant not in {i.requested for i in timeline.pending()}:
            # Its plan is gone (a clustering's is purged when its commit was refused):
            # planned again.
            instant = None
    # A first look at the policy before planning; the last is right before the commit
    # (`_checked`; the procedure, for a plan `_checked` cannot check, commits inside).
    policy_check(rt, job.task_id)()
    spark.sparkContext.setJobGroup(job.group, f"lakewarden task {job.task_id}", True)
    if instant is None:
        instant = schedule()
        if instant is None:
            return finish_run(
                rt, fence(), job.task_id, job.attempt, metrics={"reason": "nothing to plan"}
            )
        record_planned(rt, job, instant)
    else:
        # A retry after an attempt that died executing it (kill -9): Hudi refuses the
        # instant while the dead attempt's heartbeat looks alive; wait it out.
        wait_s = hudi_jobs.heartbeat_wait_s(base_path, instant, time.time())
        if wait_s > 0:
            log.info(
                "task %d: waiting %.0fs for %s's heartbeat to expire", job.task_id, wait_s, instant
            )
            time.sleep(wait_s)
            metrics["heartbeat_wait_s"] = round(wait_s, 1)
    metrics[hudi_compaction.PLANNED] = instant
    before_facts = read_facts(base_path)
    slices = precommit.plan_slices(base_path, instant, label)
    if all(s.base for s in slices):
        hudi_jobs.with_metadata(spark, metadata)
        last_look = policy_check(rt, job.task_id)
        _checked(rt, spark, job, base_path, instant, label, slices, options, last_look, metrics)
        _file_metrics(before_facts, read_facts(base_path), metrics)
        return None
    # hudi-rs reads no file slice without a base file (a bucket index's log-only file
    # groups): such a plan is executed by the procedure and validated after its commit.
    metrics["before_commit"] = "not checked: the plan has log-only file groups"
    started = time.monotonic()
    before = _before(base_path) if job.validation.enabled else None
    checked_s = time.monotonic() - started
    # The undo point: the table's newest write commit, savepointed before the rewrite.
    hudi_jobs.with_metadata(spark, metadata)
    savepoint = before_facts.head_write
    if savepoint is not None:
        hudi_jobs.create_savepoint(spark, base_path, savepoint)
        metrics[SAVEPOINT] = savepoint
    started = time.monotonic()
    execute(instant)
    metrics[f"{label}_seconds"] = round(time.monotonic() - started, 3)
    done = {i.requested for i in HudiTimeline(base_path).completed()}
    if instant not in done:
        raise RuntimeError(f"{label} {instant} did not complete on {base_path}")
    if failpoint(rt) in ("corrupt-rewrite", "corrupt-rewrite-then-write"):
        _corrupt(base_path, instant)
    if failpoint(rt) == "corrupt-rewrite-then-write":
        hudi_jobs.rewrite_one_row(spark, base_path, "failpoint-writer", metadata)
    _file_metrics(before_facts, read_facts(base_path), metrics)
    try:
        _validate(job, base_path, before, checked_s, f"{label} {instant}", metrics, {instant})
    except RewriteMismatch as exc:
        if savepoint is None:
            raise
        # Undo: the table restored to the savepoint (Hudi rolls the rewrite back), then
        # the savepoint dropped; the task still fails for good and the alert is raised.
        # Never over another writer's commits: those would be rolled back too.
        started = time.monotonic()
        theirs = commits_after(base_path, savepoint, {instant})
        if theirs:
            exc.metrics["undo"] = {
                "restored": False,
                "savepoint": savepoint,
                "would_roll_back": theirs,
                "how": _restore_call(base_path, savepoint),
            }
            raise RewriteMismatch(
                f"{exc}; not undone: restoring savepoint {savepoint} would roll back "
                f"{len(theirs)} commit(s) of other writers ({theirs[0]} to {theirs[-1]}); "
                "the savepoint is kept for an operator to restore when it is safe",
                exc.metrics,
            ) from exc
        hudi_jobs.restore_to_savepoint(spark, base_path, savepoint)
        hudi_jobs.delete_savepoint(spark, base_path, savepoint)
        restored = digest(base_path) if before is not None else None
        exc.metrics["undo"] = {
            "restored_to_savepoint": savepoint,
            "rows_as_before": restored == before[1].digest if before is not None else None,
            "seconds": round(time.monotonic() - started, 3),
        }
        raise RewriteMismatch(
            f"{exc}; undone: the table was restored to savepoint {savepoint}", exc.metrics
        ) from exc
    if savepoint is not None:
        hudi_jobs.delete_savepoint(spark, base_path, savepoint)
    return None


def _file_metrics(before: HudiFacts, after: HudiFacts, metrics: dict[str, Any]) -> None:
    metrics.update(
        log_files_before=before.log_files,
        log_files_after=after.log_files,
        log_bytes_before=before.log_bytes,
        base_files_before=len(before.base_file_sizes),
        base_files_after=len(after.base_file_sizes),
    )


def _checked(
    rt: Runtime,
    spark: SparkSession,
    job: Job,
    base_path: str,
    instant: str,
    label: str,
    slices: list[precommit.Slice],
    options: dict[str, str],
    last_look: Callable[[], None],
    metrics: dict[str, Any],
) -> None:
    """Execute the planned compaction or clustering (`label`) without completing it, check
    the base files it wrote against the file slices its plan replaces
    (`formats.hudi.precommit`), and commit it only if they hold the same rows; else roll
    the inflight instant back (no reader ever saw it) and raise RewriteMismatch.
    `last_look`: the policy's, right before the commit; what it raises (PolicyChanged)
    rolls the instant back too."""
    inputs = None
    started = time.monotonic()
    if job.validation.enabled:
        inputs = precommit.input_digests(base_path, slices)
    checked_s = time.monotonic() - started
    execution = precommit.Execution(spark, base_path, instant, label, options)
    try:
        try:
            _execute_and_check(rt, spark, job, execution, inputs, checked_s, metrics)
            last_look()
        except RewriteMismatch:  # rolled back already
            raise
        except Exception:
            # Whatever stopped it (a failed or cancelled execution, an unreadable file, the
            # policy's last look): nothing pending is left behind. An inflight instant would
            # keep its file groups from being compacted or clustered again, and a pending
            # clustering refuses writers' updates to them.
            _roll_back(execution, metrics)
            raise
        started = time.monotonic()
        execution.commit()
        metrics["commit_seconds"] = round(time.monotonic() - started, 3)
    finally:
        execution.close()
    done = {i.requested for i in HudiTimeline(base_path).completed()}
    if instant not in done:
        raise RuntimeError(f"{label} {instant} did not complete on {base_path}")


def _execute_and_check(
    rt: Runtime,
    spark: SparkSession,
    job: Job,
    execution: precommit.Execution,
    inputs: dict[str, Digest] | None,
    checked_s: float,
    metrics: dict[str, Any],
) -> None:
    """Execute the instant without completing it and check what it wrote against `inputs`
    (the replaced slices' digests; None: validation is off); RewriteMismatch (the instant
    rolled back) when they differ."""
    base_path, instant, label = execution.base_path, execution.instant, execution.kind
    started = time.monotonic()
    written = execution.run()
    metrics[f"{label}_seconds"] = round(time.monotonic() - started, 3)
    # The failpoints act where a real fault would: on the written, uncommitted files.
    if failpoint(rt) in ("corrupt-rewrite", "corrupt-rewrite-then-write"):
        _drop_a_row(base_path, instant)
    if failpoint(rt) == "corrupt-rewrite-then-write":
        hudi_jobs.rewrite_one_row(
            spark,
            base_path,
            "failpoint-writer",
            bool(job.plan.get("metadata_table")),
            new_key=label == "clustering",
        )
    if failpoint(rt) == "fail-before-commit":
        raise RuntimeError(f"failpoint: {label} {instant} failed after writing its files")
    if inputs is None:
        metrics["validation"] = {"status": "skipped", "reason": "validation is disabled"}
    else:
        started = time.monotonic()
        after, missing = precommit.written_digests(base_path, written)
        found = precommit.compare(inputs, after)
        checked_s += time.monotonic() - started
        before_d, after_d = found["before"], found["after"]
        differ = found["partitions_differing"]
        bad = bool(missing or differ)
        metrics["validation"] = {
            **_validation(before_d, after_d, instant, checked_s),
            "status": "failed" if bad else "passed",
            "mode": "before commit",
            "partitions": found["partitions"],
            "files_written": len(written),
            **({"files_missing": missing} if missing else {}),
            **({"partitions_differing": dict(list(differ.items())[:20])} if differ else {}),
        }
        if bad:
            raise _not_committed(execution, before_d, after_d, missing, differ, metrics)


def _roll_back(
    execution: precommit.Execution, metrics: dict[str, Any], keep_plan: bool = True
) -> str:
    """Roll the rewrite's inflight instant back (a clustering's plan purged with it; a
    compaction's too, not `keep_plan`: one that wrote wrong rows is not run again), the
    run's `undo` metrics saying so; what was done."""
    label, instant = execution.kind, execution.instant
    started = time.monotonic()
    try:
        execution.abort(keep_plan)
        metrics["undo"] = {"committed": False, "rolled_back_inflight": instant}
        undone = "not committed: its inflight instant was rolled back, readers never saw it"
        if label == "clustering" or not keep_plan:
            metrics["undo"]["plan_purged"] = True
            undone += "; its plan was purged"
    except Exception as exc:  # the instant stays inflight: never completed, Hudi rolls it back
        log.exception("%s %s: rolling back the inflight instant failed", label, instant)
        metrics["undo"] = {"committed": False, "rolled_back_inflight": None, "error": str(exc)}
        undone = "not committed (its inflight instant is left for Hudi to roll back)"
    metrics["undo"]["seconds"] = round(time.monotonic() - started, 3)
    return undone


def _not_committed(
    execution: precommit.Execution,
    before: Digest,
    after: Digest,
    missing: list[str],
    differ: dict[str, Any],
    metrics: dict[str, Any],
) -> RewriteMismatch:
    """The mismatch of a rewrite never committed, its inflight instant rolled back (a
    clustering's plan purged with it)."""
    # Never run again: a plan left requested would keep its file groups out of later plans.
    undone = _roll_back(execution, metrics, keep_plan=False)
    where = f"{len(missing)} written file(s) missing" if missing else ""
    if differ:
        where += ("; " if where else "") + f"{len(differ)} partition(s) differ"
    return RewriteMismatch(
        f"{execution.kind} {execution.instant} wrote {after.rows} rows (checksum "
        f"{after.checksum}) from file slices of {before.rows} rows (checksum "
        f"{before.checksum}), read by hudi-rs: {where}; {undone}",
        metrics,
    )


def commits_after(base_path: str, instant: str, ours: set[str]) -> list[str]:
    """Write commits on the timeline after `instant` that are not `ours`: another
    writer's, which a restore to `instant` would roll back."""
    return [
        i.requested
        for i in HudiTimeline(base_path).completed()
        if i.action in WRITE_ACTIONS and i.requested > instant and i.requested not in ours
    ]


def _restore_call(base_path: str, savepoint: str) -> str:
    return f"CALL rollback_to_savepoint(path => '{base_path}', instant_time => '{savepoint}')"


def _written_by(base_path: str, instant: str) -> list[str]:
    """The base files `instant` wrote (committed or not), by name."""
    from pyarrow import fs as pafs

    timeline = HudiTimeline(base_path)
    infos = timeline.fs.get_file_info(pafs.FileSelector(timeline.base, recursive=True))
    return sorted(
        i.path
        for i in infos
        if i.base_name.endswith(f"_{instant}.parquet") and "/.hoodie" not in i.path
    )


def _corrupt(base_path: str, instant: str) -> None:
    """Test-only (the `corrupt-rewrite` failpoint on a rewrite validated after its commit):
    delete one base file the rewrite wrote, so that validation sees rows missing."""
    written = _written_by(base_path, instant)
    if written:
        log.warning("failpoint: deleting %s written by %s", written[0], instant)
        HudiTimeline(base_path).fs.delete_file(written[0])


def _drop_a_row(base_path: str, instant: str) -> None:
    """Test-only (the `corrupt-rewrite` failpoint on a rewrite checked before its commit):
    one base file the compaction or clustering wrote loses its last row, as a writer's bug
    would lose it. (Deleting a compaction's file would not do: a reader's file-system view
    falls back to the slice it replaced.)"""
    import pyarrow.parquet as pq

    written = _written_by(base_path, instant)
    if not written:
        return
    fs = HudiTimeline(base_path).fs
    with fs.open_input_file(written[0]) as f:
        rows = pq.read_table(f)
    log.warning("failpoint: dropping a row of %s written by %s", written[0], instant)
    with fs.open_output_stream(written[0]) as out:
        pq.write_table(rows.slice(0, max(0, rows.num_rows - 1)), out)


# What a validation reads before a rewrite: the completed instants, then the records.
Before = tuple[set[str], KeyedRows]


def _before(base_path: str) -> Before:
    """The completed instants, listed before the records are read (a commit that lands
    in between is counted as another writer's: the careful side)."""
    seen = {i.requested for i in HudiTimeline(base_path).completed()}
    return seen, rows_by_key(base_path)


def _others_since(base_path: str, seen: set[str], ours: set[str]) -> tuple[list[str], bool]:
    """Other writers' write commits completed since `seen` was listed, and whether one of
    them deleted records (a delete's count, or a replacecommit)."""
    timeline = HudiTimeline(base_path)
    new = [
        i
        for i in timeline.completed()
        if i.action in WRITE_ACTIONS and i.requested not in seen and i.requested not in ours
    ]
    deletes = False
    for instant in new:
        if instant.action == "replacecommit":
            deletes = True
            continue
        stats = timeline.read_instant(instant).get("partitionToWriteStats") or {}
        deletes |= any(int(s.get("numDeletes") or 0) for ss in stats.values() for s in ss or [])
    return [i.requested for i in new], deletes


def _validate(
    job: Job,
    base_path: str,
    before: Before | None,
    checked_s: float,
    what: str,
    metrics: dict[str, Any],
    ours: set[str],
) -> None:
    """The rows after equal those before (hudi-rs), else RewriteMismatch. When other
    writers committed meanwhile (a live writer), record by record: every record none of
    their commits wrote is there after, unchanged and once (`compare_beside_writer`)."""
    if before is None:
        metrics["validation"] = {"status": "skipped", "reason": "validation is disabled"}
        return
    started = time.monotonic()
    seen, rows_before = before
    rows_after = rows_by_key(base_path)
    others, deletes = _others_since(base_path, seen, ours)
    checked_s += time.monotonic() - started
    at = what.rsplit(" ", 1)[-1]
    found = _validation(rows_before.digest, rows_after.digest, at, checked_s)
    metrics["validation"] = found
    if not others:
        if rows_before.digest != rows_after.digest:
            raise RewriteMismatch(
                f"{what} changed the table's rows: {found['rows']} rows (checksum "
                f"{found['checksum_before']}) before, {found['rows_after']} "
                f"({found['checksum_after']}) after, read by hudi-rs",
                metrics,
            )
        return
    compared = compare_beside_writer(rows_before, rows_after, others, deletes)
    bad = {k: compared[k] for k in ("lost", "changed", "appeared", "duplicates") if compared[k]}
    found.update(
        status="failed" if bad else "passed",
        mode="by record",
        other_writers_commits=len(others),
        **compared,
    )
    if bad:
        said = ", ".join(f"{n} {k}" for k, n in bad.items())
        raise RewriteMismatch(
            f"{what} did not keep the records it read beside {len(others)} commit(s) of "
            f"other writers: {said} (by record key, read by hudi-rs)",
            metrics,
        )


def _clean(rt: Runtime, spark: SparkSession, job: Job, metrics: dict[str, Any]) -> None:
    """Hudi's cleaner keeping the plan's retained commits, then timeline archival; the
    latest rows must be the same after (a clean deletes only what no retained commit
    reads). A retry runs them again: each does only what is left."""
    base_path = str(job.plan["base_path"])
    metadata = bool(job.plan.get("metadata_table"))
    retain = int(job.plan.get("retain_commits") or 0)
    if retain < 1:
        raise PlanRejected(f"a clean plan without retained commits: {job.plan}")
    policy_check(rt, job.task_id)()
    spark.sparkContext.setJobGroup(job.group, f"lakewarden task {job.task_id}", True)
    _ready_savepoints(rt, spark, job, base_path, metrics)
    if not job.plan.get("clean", True):
        return  # only readiness' savepoints to make or delete
    timeline = HudiTimeline(base_path)
    cleans_before = {i.requested for i in timeline.instants() if i.action == "clean"}
    length_before = len(timeline.completed())
    started = time.monotonic()
    before = _before(base_path) if job.validation.enabled else None
    checked_s = time.monotonic() - started
    started = time.monotonic()
    rows = hudi_jobs.run_clean(spark, base_path, retain, metadata)
    metrics["clean_seconds"] = round(time.monotonic() - started, 3)
    timeline = HudiTimeline(base_path)
    made = sorted(
        i.requested
        for i in timeline.completed()
        if i.action == "clean" and i.requested not in cleans_before
    )
    metrics.update(
        {
            hudi_clean.CLEANED: made,
            "retain_commits": retain,
            "files_deleted": sum(int(r.get("total_files_deleted") or 0) for r in rows),
            "earliest_commit_to_retain": next(
                (r.get("earliest_commit_to_retain") for r in rows), None
            ),
        }
    )
    started = time.monotonic()
    # Never archive an instant a latest file slice reads (a merge-on-read table's log
    # files not compacted yet), with room for a live writer's commits meanwhile.
    least = int(job.plan.get("archive_min_commits") or retain + 1)
    needed = instants_read_by_latest_slices(HudiTimeline(base_path)) + ARCHIVE_MARGIN
    keep = max(least, needed)
    metrics["archive_min_commits"] = keep
    metrics["archive_result"] = hudi_jobs.archive(
        spark,
        base_path,
        keep,
        keep + max(10, int(job.plan.get("archive_max_commits") or 0) - least),
        retain,
        metadata,
    )
    metrics["archive_seconds"] = round(time.monotonic() - started, 3)
    metrics["timeline_length_before"] = length_before
    metrics["timeline_length_after"] = len(HudiTimeline(base_path).completed())
    _validate(
        job, base_path, before, checked_s, f"clean {made[-1] if made else ''}", metrics, set(made)
    )


def _ready_savepoints(
    rt: Runtime, spark: SparkSession, job: Job, base_path: str, metrics: dict[str, Any]
) -> None:
    """Readiness (issue 28): savepoint the ready partitions' instants the plan names, and
    delete lakewarden's readiness savepoints whose pins lapsed; then record each made one
    as the tag of the partitions it pins. A retry finds what an earlier attempt did."""
    make = [str(i) for i in job.plan.get(hudi_clean.READY_SAVEPOINTS) or []]
    release = [str(i) for i in job.plan.get(hudi_clean.RELEASED_SAVEPOINTS) or []]
    if not make and not release:
        return
    have = {i.requested for i in HudiTimeline(base_path).completed() if i.action == "savepoint"}
    for instant in make:
        if instant not in have:
            hudi_jobs.create_savepoint(spark, base_path, instant, hudi_clean.READY_SAVEPOINT)
    for instant in release:
        if instant in have:
            hudi_jobs.delete_savepoint(spark, base_path, instant)
    metrics[hudi_clean.READY_SAVEPOINTS], metrics[hudi_clean.RELEASED_SAVEPOINTS] = make, release
    with transaction(rt.engine) as s:
        table_id = select(Task.table_id).where(Task.id == job.task_id).scalar_subquery()
        rows = (PartitionReadiness.table_id == table_id, PartitionReadiness.tag.is_(None))
        for instant in make:
            s.execute(
                update(PartitionReadiness)
                .where(*rows, PartitionReadiness.snapshot_id == int(instant))
                .values(tag=instant)
            )
        if release:
            s.execute(
                update(PartitionReadiness)
                .where(
                    PartitionReadiness.table_id == table_id,
                    PartitionReadiness.tag.in_(release),
                )
                .values(tag=None)
            )


def record_metrics(rt: Runtime, job: Job, metrics: dict[str, Any]) -> None:
    """`metrics` on the run now, committed before the job acts (a retry reads them)."""
    with transaction(rt.engine) as s:
        s.execute(
            update(JobRun)
            .where(JobRun.task_id == job.task_id, JobRun.attempt == job.attempt)
            .values(metrics=dict(metrics))
        )


def _earlier_metrics(rt: Runtime, job: Job, key: str) -> dict[str, Any]:
    """The metrics of the task's newest earlier run that recorded `key` (a retry resumes
    from what an earlier attempt recorded before acting), or {}."""
    with transaction(rt.engine) as s:
        found = s.scalar(
            select(JobRun.metrics)
            .where(
                JobRun.task_id == job.task_id,
                JobRun.attempt < job.attempt,
                JobRun.metrics[key].isnot(None),
            )
            .order_by(JobRun.attempt.desc())
            .limit(1)
        )
    return dict(found or {})


def _ttl(
    rt: Runtime,
    spark: SparkSession,
    fence: Callable[[], Fence],
    job: Job,
    metrics: dict[str, Any],
) -> str | None:
    """TTL: drop lapsed pre-TTL savepoints, count exactly again (hudi-rs) and hold as the
    policy says, savepoint the table (recorded on the run before anything is deleted),
    delete (Hudi's delete_partition or delete, the commit marked with the task), then check
    the rows the commit deleted against the count; a mismatch restores the savepoint.
    A retry finds an earlier attempt's marked commit and never deletes twice."""
    plan = job.plan
    base_path = str(plan["base_path"])
    metadata = bool(plan.get("metadata_table"))
    level, condition, planned, max_fraction, undo_days = hudi_ttl.checked_plan(
        plan, datetime.now(UTC)
    )
    partitions = [str(p) for p in plan.get("partitions") or []]
    mark = f"task-{job.task_id}"
    timeline = HudiTimeline(base_path)
    done = hudi_ttl.marked(timeline, mark)
    if done is not None:  # an earlier attempt deleted: never again, but still guarded
        earlier = _earlier_metrics(rt, job, hudi_ttl.SAVEPOINT)
        metrics.update(earlier, recovered=True)
        metrics[hudi_ttl.INSTANT] = done
        counted, savepoint = earlier.get("counted_rows"), earlier.get(hudi_ttl.SAVEPOINT)
        if isinstance(counted, int) and isinstance(savepoint, str):
            deleted = hudi_ttl.deleted_by_commit(timeline, done, savepoint)
            metrics["deleted_records"] = deleted
            if not hudi_ttl.same_rows(counted, deleted):
                hudi_jobs.with_metadata(spark, metadata)
                undone = _undo_ttl(spark, base_path, savepoint, done, metrics)
                raise RewriteMismatch(
                    f"TTL commit {done} (an earlier attempt's) deleted {deleted} rows where "
                    f"it counted {counted}: {undone}",
                    metrics,
                )
        return finish_run(rt, fence(), job.task_id, job.attempt, metrics=metrics)
    now = datetime.now(UTC)
    hudi_jobs.with_metadata(spark, metadata)
    lapsed = hudi_ttl.undo_expired(hudi_ttl.pre_ttl_savepoints(timeline), undo_days, now)
    for old in lapsed:
        hudi_jobs.delete_savepoint(spark, base_path, old)
    metrics.update(level=level, cutoff=plan["cutoff"], savepoints_dropped=lapsed)
    # 1. The exact count, now (hudi-rs), and the holds.
    rows = hudi_ttl.read_rows(base_path, str(plan["column"]))
    total = rows.num_rows
    if level == "partition":
        import pyarrow.compute as pc

        parts = rows.column(hudi_ttl.PARTITION)
        counted = int(
            pc.sum(pc.is_in(parts, value_set=hudi_ttl.strings(set(partitions)))).as_py() or 0
        )
    else:
        cut = datetime.fromisoformat(str(plan["cutoff"]))
        mask = hudi_ttl.expired_mask(
            rows.column(str(plan["column"])), str(plan["column_type"]), cut
        )
        counted = int(mask.to_pylist().count(True))
    metrics.update(
        counted_rows=counted, rows_before=total, planned_rows=planned, max_fraction=max_fraction
    )
    ttl.hold_if_too_much(counted, total, max_fraction, metrics)
    if counted == 0:
        metrics.update(deleted_records=0, note="nothing older than the cutoff at run time")
        return None
    # 2. The undo point, recorded on the run before the delete; kept undo_retention_days.
    policy_check(rt, job.task_id)()
    spark.sparkContext.setJobGroup(job.group, f"lakewarden task {job.task_id}", True)
    timeline = HudiTimeline(base_path)
    completed = timeline.completed()
    writes = [i.requested for i in completed if i.action in WRITE_ACTIONS]
    if not writes:
        raise PlanRejected(f"no write commit to savepoint on {base_path}")
    savepoint = writes[-1]
    if savepoint not in {i.requested for i in completed if i.action == "savepoint"}:
        hudi_jobs.create_ttl_savepoint(spark, base_path, savepoint)
    metrics[hudi_ttl.SAVEPOINT] = savepoint
    metrics["undo"] = {
        "savepoint": savepoint,
        "retain_days": undo_days,
        "how": (
            f"CALL rollback_to_savepoint(path => '{base_path}', instant_time => '{savepoint}')"
        ),
    }
    metrics["mark"] = mark
    record_metrics(rt, job, metrics)
    # 3. Ask the policy once more, then delete.
    policy_check(rt, job.task_id)()
    started = time.monotonic()
    if level == "partition":
        hudi_jobs.delete_partitions(spark, base_path, partitions, mark, metadata)
    else:
        hudi_jobs.delete_rows(spark, base_path, condition, mark, metadata)
    metrics["ttl_seconds"] = round(time.monotonic() - started, 3)
    timeline = HudiTimeline(base_path)
    instant = hudi_ttl.marked(timeline, mark)
    if instant is None:
        raise RuntimeError(f"the TTL's delete left no commit marked {mark} on {base_path}")
    metrics[hudi_ttl.INSTANT] = instant
    record_metrics(rt, job, metrics)
    # 4. The exact-count guard: what the commit deleted (its metadata) is what was counted.
    deleted = hudi_ttl.deleted_by_commit(timeline, instant, savepoint)
    after = hudi_ttl.read_rows(base_path, str(plan["column"])).num_rows
    if failpoint(rt) == "ttl-miscount-row" and level == "row":
        deleted += 1  # test-only: the guard must see a mismatch and undo it
    metrics.update(deleted_records=deleted, rows_after=after)
    # The rows read after count other writers' commits too: compared only without any.
    alone = not commits_after(base_path, savepoint, {instant})
    if not hudi_ttl.same_rows(counted, deleted) or (alone and total - after != counted):
        undone = _undo_ttl(spark, base_path, savepoint, instant, metrics)
        if metrics["undo"].get("restored"):
            restored = hudi_ttl.read_rows(base_path, str(plan["column"])).num_rows
            metrics["undo"]["rows_as_before"] = restored == total
        raise RewriteMismatch(
            f"TTL commit {instant} deleted {deleted} rows (its commit metadata; {total - after} "
            f"fewer rows read by hudi-rs) where it counted {counted} right before: {undone}",
            metrics,
        )
    return None


def _undo_ttl(
    spark: SparkSession, base_path: str, savepoint: str, instant: str, metrics: dict[str, Any]
) -> str:
    """Restore the pre-TTL savepoint, unless other writers committed after it (a restore
    would roll their commits back too): then it is left to an operator. What was done."""
    theirs = commits_after(base_path, savepoint, {instant})
    if theirs:
        metrics["undo"] = {
            **metrics.get("undo", {}),
            "restored": False,
            "would_roll_back": theirs,
            "how": _restore_call(base_path, savepoint),
        }
        return (
            f"not undone: restoring savepoint {savepoint} would roll back {len(theirs)} "
            f"commit(s) of other writers ({theirs[0]} to {theirs[-1]}); restore it by hand "
            "when it is safe"
        )
    hudi_jobs.restore_to_savepoint(spark, base_path, savepoint)
    metrics["undo"] = {**metrics.get("undo", {}), "restored": True}
    return f"undone, the table was restored to savepoint {savepoint}"


def _stats(rt: Runtime, job: Job, spark: SparkSession, metrics: dict[str, Any]) -> None:
    """Build the column-stats index with Hudi's async indexer (`column_stats.build`); the
    indexing instant is recorded on the run as soon as Hudi scheduled it (`hudi_stats.BUILT`),
    so that a retry resumes it (or finds it done) and the planner knows the index for
    lakewarden's. The index
    must be a built partition of the metadata table after."""
    base_path = str(job.plan["base_path"])
    policy_check(rt, job.task_id)()
    spark.sparkContext.setJobGroup(job.group, f"lakewarden task {job.task_id}", True)

    def scheduled(instant: str) -> None:
        metrics[hudi_stats.BUILT] = instant
        record_metrics(rt, job, metrics)

    resume = job.plan.get("resume_instant")
    # A retry: the indexing instant an earlier attempt scheduled.
    built = _earlier_metrics(rt, job, hudi_stats.BUILT).get(hudi_stats.BUILT)
    earlier = str(built) if built else None
    if earlier is not None:
        state = column_stats.read_state(HudiTimeline(base_path))
        if earlier in state.pending_indexing:
            resume = earlier
        elif earlier in state.completed_indexing and state.built:
            metrics.update({hudi_stats.BUILT: earlier, "recovered": True})
            metrics["column_stats_index"] = state.summary()
            return
    if resume:
        metrics[hudi_stats.BUILT] = str(resume)
    started = time.monotonic()
    columns = [str(c) for c in job.plan.get("columns") or []]
    done = column_stats.build(spark, HudiTimeline(base_path), columns, resume, scheduled)
    metrics.update(done, index_seconds=round(time.monotonic() - started, 3))
    state = column_stats.read_state(HudiTimeline(base_path))
    metrics["column_stats_index"] = state.summary()
    if not state.built:
        raise RuntimeError(
            f"Hudi's indexing {done.get('indexing_instant')} ended without a column_stats "
            f"partition in the metadata table ({done})"
        )


def _run_kind(
    rt: Runtime,
    spark: SparkSession,
    fence: Callable[[], Fence],
    job: Job,
    metrics: dict[str, Any],
) -> str | None:
    """The job's kind run; a state when it finished early, None when `metrics` hold it."""
    if job.kind == hudi_clean.KIND:
        _clean(rt, spark, job, metrics)
        return None
    if job.kind == hudi_ttl.KIND:
        return _ttl(rt, spark, fence, job, metrics)
    if job.kind == hudi_stats.KIND:
        _stats(rt, job, spark, metrics)
        return None
    return _rewrite(rt, spark, fence, job, metrics)


def run_hudi_job(rt: Runtime, spark: SparkSession, fence: Callable[[], Fence], job: Job) -> str:
    """Run the job's Hudi table service on its table (`job.plan["base_path"]`) and record
    the outcome."""
    metrics: dict[str, Any] = {}
    try:
        sc = spark.sparkContext
        record_app_id(rt, job, sc.applicationId, sc.uiWebUrl)
        if job.kind not in hudi_kinds.KINDS or not job.plan.get("base_path"):
            raise PlanRejected(f"not a Hudi plan: {job.kind} {sorted(job.plan)}")
        base_path = str(job.plan["base_path"])
        # The catalog's properties, and the table (the metastore's lock is on its entry).
        storage = hudi_lock.for_table(
            rt.catalogs.entry(job.catalog).resolved, job.ref.namespace, job.ref.name
        )
        # A table on S3: Spark through S3A with the catalog's credentials (per bucket, on
        # the running session), the Python side's reads through `table_storage`.
        s3a = object_store.hadoop_s3a(storage, base_path)
        set_secrets(spark, {f"spark.hadoop.{k}": v for k, v in s3a.items()})
        with table_storage(base_path, storage):
            # A writer may be live on the table: the lock it shares (the catalog's choice).
            hudi_jobs.with_concurrency(spark, base_path)
            metrics["hudi_lock"] = {
                k: v for k, v in hudi_lock.describe(base_path, storage).items() if k != "why"
            }
            hudi_jobs.with_table_version(spark, base_path)  # never upgrade the writer's table
            early = _run_kind(rt, spark, fence, job, metrics)
        if early is not None:
            return early
    except Exception as exc:
        return finish_raised(rt, fence(), job, exc, metrics)
    metrics["cost"] = job_cost(spark, job.group)
    state = finish_run(rt, fence(), job.task_id, job.attempt, metrics=metrics)
    log.info("task %d: %s %s", job.task_id, state, metrics)
    return state
