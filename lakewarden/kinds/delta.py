"""The kinds that run on a Delta table (issue 29), planned in Python from its log (delta-rs'
add actions: sizes, partition values, min/max stats; `formats.delta.facts`), run as Delta's
own commands in a Delta-family application (`lakewarden.jobs.delta`).

The policy sections are Iceberg's, their fields read where they mean the same:
- compaction, `OPTIMIZE … WHERE <partitions>` (bin-pack): a file under
  `target_file_size_bytes` * `small_file_ratio` is small (the table's own
  `delta.targetFileSize` replaces the target); a partition with at least `min_input_files`
  small files is due; a task needs `min_small_files` small files in due partitions.
- zorder, `OPTIMIZE … WHERE <partitions> ZORDER BY (columns)`: a partition where a lookup
  on `columns` opens more than `max_files_per_lookup` files (from the files' min/max
  stats) is due; files are written at `target_file_size_bytes`. Never on a table with
  liquid clustering (`CLUSTER BY`): Delta refuses ZORDER BY there.
- clustering, on a table with liquid clustering only: `OPTIMIZE` (no WHERE, no ZORDER BY:
  Delta clusters the files not yet clustered by the table's own clustering columns) where
  a lookup on those columns opens more than `max_files_per_lookup` files. A table without
  clustering columns is Z-ordered by the zorder kind (Delta has no sort rewrite).
- ttl (`kinds.delta_ttl`): a metadata-only `DELETE … WHERE <partition column> < cutoff`
  when the table is partitioned on the column (or a date Delta generates from it), a row
  `DELETE` otherwise; Iceberg's TTL arithmetic and holds.
- stats (`kinds.delta_stats`): the files without statistics, recomputed by Delta's
  `StatisticsCollection.recompute` in their partitions only.
- clean, `VACUUM … RETAIN n HOURS`: `max_snapshot_age_hours` is the retention. Never below
  Delta's own retention check (the table's `delta.deletedFileRetentionDuration`, 7 days by
  default) unless the policy says `allow_below_safety_floors` (a destructive change, so
  admin only: `policy.model.destructive_changes`), nor below what a ready partition's
  pinned version reads while readiness keeps its pin (`kinds.delta_pins`).
  And the log: the commit files and checkpoints past the table's own
  `delta.logRetentionDuration` (30 days by default; never less), removed by delta-rs'
  `cleanup_metadata()` as Delta does when it checkpoints, a checkpoint written first by
  `create_checkpoint()` where old commits have none after them
  (`formats.delta.log_files`); not where the table says `delta.enableExpiredLogCleanup`
  is false.
Other fields (tiers, buckets, branches, orphans, snapshots kept) are Iceberg's and not read.

Never fight the writer or another optimizer: a table whose writer compacts
(`delta.autoOptimize.autoCompact`, or an auto compaction's OPTIMIZE in its recent log) is
not compacted; one whose recent log shows OPTIMIZE or REORG commits recurring that
lakewarden did not make is neither compacted, purged, Z-ordered nor clustered; recurring
VACUUMs of another's: no VACUUM (the log's cleanup goes on). The evidence is the skip's
reason and health's `other_optimizers` (`catalogs.foreign.detect_delta`). Every skip says why.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from lakewarden.catalogs.catalog import CatalogEntry, TableRef
from lakewarden.formats.delta import incremental
from lakewarden.formats.delta.catalog import open_timeline
from lakewarden.formats.delta.facts import DeltaFacts, read_facts
from lakewarden.formats.delta.log_files import EXPIRED_LOG_CLEANUP, interval_hours
from lakewarden.formats.delta.native_rewrite import plan_ineligible
from lakewarden.formats.delta.timeline import DeltaTimeline
from lakewarden.health.files_per_lookup import files_per_lookup
from lakewarden.kinds import delta_pins, delta_stats, delta_ttl
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

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

KINDS = frozenset({"compaction", "zorder", "clustering", "clean", "ttl", "stats"})
AUTO_COMPACT = "delta.autoOptimize.autoCompact"
RETENTION = "delta.deletedFileRetentionDuration"
DEFAULT_RETENTION_HOURS = 168.0  # Delta's default: interval 1 week


def _on(value: Any) -> bool:
    return str(value).strip().lower() == "true"


def _names(keys: list[str]) -> str:
    shown = ", ".join(k or "(unpartitioned)" for k in keys[:5])
    return shown + (f" and {len(keys) - 5} more" if len(keys) > 5 else "")


def compaction_verdict(policy: CompactionPolicy, facts: DeltaFacts) -> tuple[Verdict, list[str]]:
    """Is a bin-pack due, and in which partitions (their keys)?"""
    small = {k: p.small_files for k, p in facts.partitions.items()}
    due = sorted(k for k, n in small.items() if n >= policy.min_input_files)
    in_due = sum(small[k] for k in due)
    metrics = {
        "files": facts.files,
        "small_files": facts.small_files,
        "small_file_threshold": facts.small_file_threshold,
        "partitions_due": len(due),
        "small_files_in_due_partitions": in_due,
    }
    if not policy.enabled:
        return Verdict(False, "compaction is disabled by policy", metrics), []
    if _on(facts.configuration.get(AUTO_COMPACT)):
        why = f"its table property {AUTO_COMPACT}=true: the writer compacts; lakewarden does "
        return Verdict(False, why + "not fight it", metrics), []
    other = facts.other_optimizers.get("compaction") or facts.other_optimizers.get("optimize")
    if other is not None:
        return Verdict(False, other.evidence, metrics), []
    if not due:
        most = max(small.items(), key=lambda kv: kv[1], default=("", 0))
        return Verdict(
            False,
            f"no partition has min_input_files {policy.min_input_files} small files (under "
            f"{facts.small_file_threshold} bytes; most: {most[1]} in {_names([most[0]])})",
            metrics,
        ), []
    if in_due < policy.min_small_files:
        return Verdict(
            False,
            f"{in_due} small files in {len(due)} partition(s) with min_input_files "
            f"{policy.min_input_files} < min_small_files {policy.min_small_files}",
            metrics,
        ), []
    reason = (
        f"{in_due} small files (under {facts.small_file_threshold} bytes) in {len(due)} "
        f"partition(s) >= min_small_files {policy.min_small_files}: {_names(due)}"
    )
    return Verdict(True, reason, metrics, {"files_removed_estimate": in_due}), due


def purge_verdict(policy: CompactionPolicy, facts: DeltaFacts) -> tuple[Verdict, list[str]]:
    """Is a `REORG … APPLY (PURGE)` due, and in which partitions: those with a file whose
    deletion vector hides at least `delete_ratio_threshold` of its rows (the log's
    deletion-vector cardinalities)."""
    share = policy.delete_ratio_threshold
    hollow = {
        k: n
        for k, files in facts.partition_files.items()
        if (n := sum(1 for f in files if f.records and f.deleted_records / f.records >= share))
    }
    due = sorted(hollow)
    metrics = {
        "deletion_vector_files": facts.deletion_vector_files,
        "deleted_rows": facts.deleted_rows,
        "files_to_purge": sum(hollow.values()),
        "partitions_to_purge": len(due),
    }
    if not policy.enabled:
        return Verdict(False, "compaction is disabled by policy", metrics), []
    if "optimize" in facts.other_optimizers:
        return Verdict(False, facts.other_optimizers["optimize"].evidence, metrics), []
    if not due:
        why = (
            f"no file's deletion vector hides delete_ratio_threshold {share:g} of its rows "
            f"({facts.deletion_vector_files} file(s) with deletion vectors, "
            f"{facts.deleted_rows} rows hidden)"
        )
        return Verdict(False, why, metrics), []
    reason = (
        f"{sum(hollow.values())} file(s) whose deletion vectors hide >= delete_ratio_threshold "
        f"{share:g} of their rows in {len(due)} partition(s): {_names(due)}"
    )
    return Verdict(True, reason, metrics), due


def compaction_and_purge(
    policy: CompactionPolicy, facts: DeltaFacts
) -> tuple[Verdict, list[str] | None, list[str] | None]:
    """Compaction's verdict on a Delta table: a bin-pack (OPTIMIZE) and a purge (REORG)
    judged apart, and the partitions each runs on (None: that command is not due)."""
    binpack, packed = compaction_verdict(policy, facts)
    purge, purged = purge_verdict(policy, facts)
    metrics = {**binpack.metrics, **purge.metrics}
    if not binpack.needed and not purge.needed:
        return Verdict(False, f"{binpack.reason}; purge: {purge.reason}", metrics), None, None
    said = [f"OPTIMIZE: {binpack.reason}"] if binpack.needed else []
    said += [f"REORG … APPLY (PURGE): {purge.reason}"] if purge.needed else []
    verdict = Verdict(True, "; ".join(said), metrics, binpack.expected_gain)
    return verdict, (packed if binpack.needed else None), (purged if purge.needed else None)


def zorder_verdict(policy: ZOrderPolicy, facts: DeltaFacts) -> tuple[Verdict, list[str]]:
    """Is a Z-order due, and in which partitions: where a lookup on the columns opens more
    than `max_files_per_lookup` files."""
    cols = policy.columns
    lookups = {k: files_per_lookup(files, cols) for k, files in facts.partition_files.items()}
    due = sorted(k for k, n in lookups.items() if n is not None and n > policy.max_files_per_lookup)
    worst = max((n for n in lookups.values() if n is not None), default=None)
    metrics = {"columns": cols, "max_files_per_lookup_seen": worst, "partitions_due": len(due)}
    if not policy.enabled:
        return Verdict(False, "zorder is disabled by policy", metrics), []
    if policy.curve != "z-order":
        return Verdict(False, f"curve {policy.curve} is Hudi's only: Delta Z-orders", metrics), []
    if facts.clustering_columns:
        return Verdict(False, clustered_said(facts), metrics), []
    if "optimize" in facts.other_optimizers:
        return Verdict(False, facts.other_optimizers["optimize"].evidence, metrics), []
    missing = [c for c in cols if c not in facts.columns]
    if missing:
        why = f"column(s) {', '.join(missing)} not in the table (it has {', '.join(facts.columns)})"
        return Verdict(False, why, metrics), []
    parts = [c for c in cols if c in facts.partition_columns]
    if parts:
        why = f"{', '.join(parts)}: partition column(s), which Delta's ZORDER BY refuses"
        return Verdict(False, why, metrics), []
    if worst is None:
        return Verdict(False, f"no file has min/max stats for {', '.join(cols)}", metrics), []
    if not due:
        return Verdict(
            False,
            f"a lookup on {', '.join(cols)} opens at most {worst} files <= "
            f"max_files_per_lookup {policy.max_files_per_lookup:g}",
            metrics,
        ), []
    reason = (
        f"a lookup on {', '.join(cols)} opens up to {worst} files > max_files_per_lookup "
        f"{policy.max_files_per_lookup:g} in {len(due)} partition(s): {_names(due)}"
    )
    return Verdict(True, reason, metrics), due


def clustered_said(facts: DeltaFacts) -> str:
    """Why a clustered table is never Z-ordered, and what runs instead."""
    return (
        f"the table declares liquid clustering (CLUSTER BY {', '.join(facts.clustering_columns)})"
        ": Delta refuses ZORDER BY on it; the clustering kind runs OPTIMIZE, which clusters it"
    )


def clustering_verdict(policy: ClusteringPolicy, facts: DeltaFacts) -> Verdict:
    """Is an `OPTIMIZE` of a clustered table due: a lookup on its clustering columns opens
    more than `max_files_per_lookup` files (the files' min/max stats)? A table without
    clustering columns is the zorder kind's."""
    cols = facts.clustering_columns
    lookups = [files_per_lookup(files, cols) for files in facts.partition_files.values()]
    worst = max((n for n in lookups if n is not None), default=None)
    metrics = {"clustering_columns": cols, "max_files_per_lookup_seen": worst}
    if not policy.enabled:
        return Verdict(False, "clustering is disabled by policy", metrics)
    if not cols:
        why = (
            "the table declares no clustering columns (CLUSTER BY) and Delta has no sort "
            "rewrite: the zorder kind Z-orders it (OPTIMIZE … ZORDER BY), or cluster it "
            "with ALTER TABLE … CLUSTER BY (columns)"
        )
        return Verdict(False, why, metrics)
    if "optimize" in facts.other_optimizers:
        return Verdict(False, facts.other_optimizers["optimize"].evidence, metrics)
    if policy.columns and policy.columns != cols:
        why = (
            f"the policy's columns {', '.join(policy.columns)} are not the table's clustering "
            f"columns {', '.join(cols)}: Delta's OPTIMIZE clusters by the table's own (ALTER "
            "TABLE … CLUSTER BY changes them)"
        )
        return Verdict(False, why, metrics)
    if worst is None:
        return Verdict(False, f"no file has min/max stats for {', '.join(cols)}", metrics)
    if worst <= policy.max_files_per_lookup:
        return Verdict(
            False,
            f"a lookup on the clustering columns {', '.join(cols)} opens at most {worst} "
            f"files <= max_files_per_lookup {policy.max_files_per_lookup:g}",
            metrics,
        )
    reason = (
        f"OPTIMIZE (liquid clustering by {', '.join(cols)}; never ZORDER BY on a clustered "
        f"table): a lookup on them opens up to {worst} files > max_files_per_lookup "
        f"{policy.max_files_per_lookup:g}"
    )
    return Verdict(True, reason, metrics)


def stats_facts(timeline: DeltaTimeline) -> DeltaFacts:
    """The facts the stats kind reads (its files' statistics; sizes play no part)."""
    return read_facts(
        timeline, target_file_size=1 << 27, small_file_ratio=1.0, files=incremental.shared().files
    )


def event_verdicts(
    session: Session, table_id: int, policy: Policy, timeline: DeltaTimeline
) -> dict[str, Verdict]:
    """The verdicts of the event-driven kinds that run on a Delta table when its log moved
    (compaction, Z-order, clustering, stats: a writer's commit may add files without
    statistics), from its log as just read (no JVM); clean is swept by time."""
    out: dict[str, Verdict] = {}
    compaction = policy.compaction
    if compaction.enabled:
        facts = read_facts(
            timeline,
            target_file_size=compaction.target_file_size_bytes,
            small_file_ratio=compaction.small_file_ratio,
            files=incremental.shared().files,
        )
        out["compaction"] = compaction_and_purge(compaction, facts)[0]
    else:
        out["compaction"] = Verdict(False, "compaction is disabled by policy")
    zorder = policy.zorder
    if zorder.enabled:
        facts = read_facts(
            timeline,
            target_file_size=zorder.target_file_size_bytes,
            small_file_ratio=1.0,
            files=incremental.shared().files,
        )
        out["zorder"] = zorder_verdict(zorder, facts)[0]
    else:
        out["zorder"] = Verdict(False, "zorder is disabled by policy")
    clustering = policy.clustering
    if clustering.enabled:
        facts = read_facts(
            timeline,
            target_file_size=clustering.target_file_size_bytes,
            small_file_ratio=1.0,
            files=incremental.shared().files,
        )
        out["clustering"] = clustering_verdict(clustering, facts)
    else:
        out["clustering"] = Verdict(False, "clustering is disabled by policy")
    if policy.stats.enabled:
        facts = stats_facts(timeline)
        out["stats"] = delta_stats.stats_verdict(policy.stats, facts)[0]
    else:
        out["stats"] = Verdict(False, "stats is disabled by policy")
    return out


def retention_hours(facts: DeltaFacts) -> float:
    """Delta's own retention check for this table: its `delta.deletedFileRetentionDuration`
    (`interval 7 days`), else a week."""
    return interval_hours(facts.configuration.get(RETENTION), DEFAULT_RETENTION_HOURS)


def retain_hours(
    policy: CleanPolicy, facts: DeltaFacts, held: delta_pins.Hold | None = None
) -> float:
    """The retention a VACUUM keeps: the policy's, never below Delta's own check without
    the policy's consent (`allow_below_safety_floors`), nor below what a ready partition's
    pinned version needs while its pin is kept (`held`: readiness, issue 29)."""
    wanted = policy.max_snapshot_age_hours
    retain = wanted if policy.allow_below_safety_floors else max(wanted, retention_hours(facts))
    return max(retain, held.hours) if held is not None else retain


def clean_verdict(
    policy: CleanPolicy, facts: DeltaFacts, expired: int, held: delta_pins.Hold | None = None
) -> Verdict:
    """Is a VACUUM due (`retain_hours`, or longer while `held` for a ready partition's
    pinned version)? `expired`: files the log says were removed longer ago than that
    (delta-rs' dry run)."""
    floor, wanted = retention_hours(facts), policy.max_snapshot_age_hours
    retain = retain_hours(policy, facts, held)
    metrics = {"retain_hours": retain, "delta_retention_hours": floor, "expired_files": expired}
    if not policy.enabled:
        return Verdict(False, "clean is disabled by policy", metrics)
    if "vacuum" in facts.other_optimizers:
        return Verdict(False, facts.other_optimizers["vacuum"].evidence, metrics)
    why = f"RETAIN {retain:g} HOURS"
    if held is not None and retain == held.hours:  # readiness (issue 29): a pinned version
        why += f" ({held.reason})"
    if retain < floor:
        why += (
            f", below Delta's retention check ({floor:g} h): the policy consents "
            "(allow_below_safety_floors)"
        )
    elif wanted < floor:
        why += (
            f": the policy's max_snapshot_age_hours {wanted:g} is below Delta's retention "
            f"check ({floor:g} h), which holds without allow_below_safety_floors"
        )
    if expired == 0:
        return Verdict(False, f"no file was removed longer ago than {why}", metrics)
    return Verdict(True, f"{expired} removed file(s) to delete, {why}", metrics)


def log_verdict(facts: DeltaFacts, now_ms: int) -> Verdict:
    """Are old log files due to go: those past the table's `delta.logRetentionDuration`
    before a checkpoint as old (delta-rs' `cleanup_metadata()`), or old commits no
    checkpoint follows yet (a checkpoint at the head first, so that a later clean can)?"""
    log = facts.log
    if log is None:
        return Verdict(False, "the log was not listed")
    removable = log.removable(now_ms)
    waiting = log.checkpoint_needed(now_ms, facts.version)
    hours = log.retention_hours
    metrics = {
        "log_files": len(log.files),
        "log_retention_hours": hours,
        "removable_log_files": len(removable),
        "commits_waiting_for_a_checkpoint": len(waiting),
        "oldest_commit_age_s": log.oldest_commit_age_s(now_ms),
    }
    if not log.cleanup_enabled:
        why = f"the table's {EXPIRED_LOG_CLEANUP} is false: its log is kept whole"
        return Verdict(False, why, metrics)
    said = []
    if removable:
        said.append(
            f"{len(removable)} log file(s) older than the table's log retention ({hours:g} h) "
            "before a checkpoint as old: cleanup_metadata removes them"
        )
    if waiting:
        said.append(
            f"{len(waiting)} commit(s) older than the log retention ({hours:g} h) with no "
            f"checkpoint after them: a checkpoint at version {facts.version} first"
        )
    if not said:
        why = f"no log file is older than the table's log retention ({hours:g} h) and removable"
        return Verdict(False, why, metrics)
    return Verdict(True, "; ".join(said), metrics)


def clean_and_log(
    policy: CleanPolicy,
    facts: DeltaFacts,
    expired: int,
    now_ms: int,
    held: delta_pins.Hold | None = None,
) -> tuple[Verdict, bool, bool]:
    """Clean's verdict on a Delta table: a VACUUM (`clean_verdict`, `held` longer for a
    ready partition's pinned version) and the log's cleanup (`log_verdict`) judged apart;
    and whether each is due."""
    vacuum, log = clean_verdict(policy, facts, expired, held), log_verdict(facts, now_ms)
    metrics = {**vacuum.metrics, "log": log.metrics}
    if not policy.enabled:
        return Verdict(False, vacuum.reason, metrics), False, False
    reason = f"VACUUM: {vacuum.reason}; log: {log.reason}"
    return Verdict(vacuum.needed or log.needed, reason, metrics), vacuum.needed, log.needed


def expired_files(timeline: DeltaTimeline, hours: float) -> int:
    """Files the table no longer references, removed more than `hours` ago (delta-rs'
    VACUUM dry run, which reads the log's remove actions; it deletes nothing). delta-rs
    takes whole hours: the count is of files removed `floor(hours)` ago, so a plan may
    find a VACUUM deletes less than it counted, never that one was needed and skipped."""
    table = timeline.open_table()
    return len(
        table.vacuum(
            retention_hours=math.floor(hours), dry_run=True, enforce_retention_duration=False
        )
    )


def _values(facts: DeltaFacts, keys: list[str] | None) -> list[dict[str, Any]] | None:
    """The partitions' values for a WHERE ([] : the whole table, unpartitioned)."""
    if keys is None:
        return None
    return [facts.partition_values[k] for k in keys] if facts.partition_columns else []


def context(session: Session, table_id: int) -> dict[str, Any]:
    """What the Delta planners read from the database: the ready partitions' pinned
    versions a VACUUM must keep readable (`kinds.delta_pins`)."""
    return {delta_pins.CONTEXT_KEY: ready_pins(session, table_id, _now())}


def _now() -> datetime:
    return datetime.now(UTC)


def plan(
    kind: str, section: KindPolicy, entry: CatalogEntry, ref: TableRef, context: dict[str, Any]
) -> PlanOutcome:
    """A Delta table's plan for `kind` (no JVM), or why not."""
    if kind not in KINDS:
        return PlanOutcome(None, f"{kind} does not run on Delta tables yet (issue 29)")
    timeline = open_timeline(entry, ref)
    if isinstance(section, TTLPolicy):
        return delta_ttl.plan(section, timeline, datetime.now(UTC))
    if isinstance(section, CompactionPolicy):
        facts = read_facts(
            timeline,
            target_file_size=section.target_file_size_bytes,
            small_file_ratio=section.small_file_ratio,
            files=incremental.shared().files,
        )
        found, packed, purged = compaction_and_purge(section, facts)
        due = packed or []
        extra: dict[str, Any] = {
            "target_file_size_bytes": facts.target_file_size,
            "min_file_size_bytes": facts.small_file_threshold,
            "optimize": packed is not None,
            # the partitions a REORG … APPLY (PURGE) runs on (null: no purge)
            "purge_partitions": _values(facts, purged),
            # a plain copy rewritten by pyarrow, committed by delta-rs
            # (lakewarden.formats.delta.native_rewrite); false: Spark's OPTIMIZE
            "native_rewrite": section.native_rewrite,
        }
    elif isinstance(section, ZOrderPolicy):
        facts = read_facts(
            timeline,
            target_file_size=section.target_file_size_bytes,
            small_file_ratio=1.0,
            files=incremental.shared().files,
        )
        found, due = zorder_verdict(section, facts)
        extra = {"zorder": section.columns, "target_file_size_bytes": facts.target_file_size}
    elif isinstance(section, ClusteringPolicy):
        facts = read_facts(
            timeline,
            target_file_size=section.target_file_size_bytes,
            small_file_ratio=1.0,
            files=incremental.shared().files,
        )
        found, due = clustering_verdict(section, facts), []
        extra = {"clustering": facts.clustering_columns}
        extra["target_file_size_bytes"] = facts.target_file_size
    elif isinstance(section, CleanPolicy):
        facts = read_facts(timeline, target_file_size=1 << 27, small_file_ratio=1.0)
        # readiness (issue 29): VACUUM keeps what a ready partition's pinned version reads
        held = delta_pins.hold(context.get(delta_pins.CONTEXT_KEY) or [], timeline, _now())
        retain = retain_hours(section, facts, held)
        now_ms = int(_now().timestamp() * 1000)
        found, vacuum, log = clean_and_log(
            section, facts, expired_files(timeline, retain), now_ms, held
        )
        below = retain < retention_hours(facts)
        due, extra = [], {"retain_hours": retain, "below_retention_check": below}
        waiting = facts.log is not None and facts.log.checkpoint_needed(now_ms, facts.version)
        # what the job runs: VACUUM, then the log's cleanup (a checkpoint first if needed)
        extra.update(vacuum=vacuum, log_cleanup=log, checkpoint=bool(log and waiting))
        if held is not None:
            extra["readiness_hold"] = vars(held)
    elif isinstance(section, StatsPolicy):
        facts = stats_facts(timeline)
        found, due = delta_stats.stats_verdict(section, facts)
        extra = {"action": "recompute_stats", "files_without_stats": facts.files_without_stats}
    else:
        raise TypeError(f"not a Delta kind's policy section: {type(section).__name__}")
    how = incremental.shared().last.get(timeline.path)
    said = how.explain() if how is not None and kind != "clean" else ""
    reason = f"{found.reason} ({said})" if said else found.reason
    if not found.needed:
        return PlanOutcome(None, reason)
    partitioned = bool(facts.partition_columns) and kind != "clean"
    plan = {
        "format": "delta",
        "path": facts.path,
        "version": facts.version,
        # null: the whole table (unpartitioned, or clean)
        "partitions": [facts.partition_values[k] for k in due] if partitioned else None,
        "files_before": facts.files,
        **extra,
        "metrics": found.metrics,
    }
    if kind == "compaction":
        # run on the scheduler's thread with no JVM, so dispatched into its session room,
        # not an application's (it may still turn out Spark's when it runs)
        plan["without_spark"] = plan_ineligible(plan) is None
    return PlanOutcome(plan, reason)
