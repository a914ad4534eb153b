"""Column statistics on a Delta table (issue 32 §1): what Delta keeps is each file's
statistics in its add action (`stats`: numRecords, min/max and null counts of the first
`delta.dataSkippingNumIndexedCols` columns, or `delta.dataSkippingStatsColumns`), which
data skipping and engines' planners read. A writer with statistics collection off
(`spark.databricks.delta.stats.collect=false`, or one that writes none) leaves files
without them: no skipping on those files.

The stats kind finds the live files without statistics (the log's add actions, no JVM) and
recomputes them, in the partitions that hold such files only, with Delta's own
`StatisticsCollection.recompute` (`formats.delta.jobs.recompute_stats`): it reads those
files (only those) and commits them again with statistics (`COMPUTE STATS`, dataChange
false: readers and streams see no new data). Delta 3.3.3 has no SQL for it (`ANALYZE TABLE
… COMPUTE DELTA STATISTICS` is refused by its parser), and its recompute refuses a table
whose protocol allows deletion vectors: such a table is skipped, saying so. The policy's
`columns` and `max_age_hours` are Iceberg's (Delta's own table properties choose the
columns; a file's statistics never age): not read.
"""

from __future__ import annotations

from lakewarden.formats.delta.facts import DeltaFacts
from lakewarden.kinds.base import Verdict
from lakewarden.policy.model import StatsPolicy

KIND = "stats"
DELETION_VECTORS = "deletionVectors"


def _names(keys: list[str]) -> str:
    shown = ", ".join(k or "(unpartitioned)" for k in keys[:5])
    return shown + (f" and {len(keys) - 5} more" if len(keys) > 5 else "")


def stats_verdict(policy: StatsPolicy, facts: DeltaFacts) -> tuple[Verdict, list[str]]:
    """Are statistics to recompute, and in which partitions (their keys): those with a
    live file whose add action has none."""
    missing = {k: p.files_without_stats for k, p in facts.partitions.items()}
    due = sorted(k for k, n in missing.items() if n)
    lacking = sum(missing.values())
    metrics = {
        "files": facts.files,
        "files_without_stats": lacking,
        "partitions_due": len(due),
    }
    if not policy.enabled:
        return Verdict(False, "stats is disabled by policy", metrics), []
    if not lacking:
        why = (
            f"statistics are fresh: all {facts.files} live file(s) carry Delta's statistics "
            "(written with each file's commit)"
        )
        return Verdict(False, why, metrics), []
    if DELETION_VECTORS in facts.reader_features:
        why = (
            f"{lacking} of {facts.files} file(s) have no statistics, but the table's protocol "
            "allows deletion vectors, and Delta 3.3.3's StatisticsCollection.recompute "
            "refuses such a table (statsRecomputeNotSupportedOnDvTables); a rewrite of those "
            "files (OPTIMIZE) writes theirs anew"
        )
        return Verdict(False, why, metrics), []
    reason = (
        f"{lacking} of {facts.files} live file(s) have no statistics (their writer collected "
        f"none) in {len(due)} partition(s): {_names(due)}; Delta's StatisticsCollection"
        ".recompute rereads those partitions' files and commits their statistics"
    )
    return Verdict(True, reason, metrics, {"files_with_stats_after": facts.files}), due
