"""Clustering of a Hudi table (issue 28): Hudi's clustering rewrites file groups sorted by
the policy's columns, through Hudi's own `run_clustering` procedure in a Hudi-family
application (`lakewarden.jobs.hudi`), planned (`op => 'schedule'`) and recorded on the run
before it is executed, as compaction is.

Two policy sections, one Hudi service (`hoodie.layout.optimize.strategy`):
- `clustering` (`columns`: one or more): a linear sort by the columns (`linear`);
- `zorder` (`columns`: two or more): Hudi's space-filling curve, `curve`: `z-order`
  (default) or `hilbert`.
A partition is due when a point lookup on the columns opens more than
`max_files_per_lookup` of its latest base files (each file's min/max bounds from its
Parquet footer: `formats.hudi.layout`, no JVM). Hudi's plan takes base files under
`target_file_size_bytes` (its `small.file.limit`) and writes files of that size
(`target.file.max.bytes`). `min_changed_files` is Iceberg's and not read.

Never fight the writer: a writer that clusters (`hoodie.clustering.inline`, its schedule,
or `hoodie.clustering.async.enabled` true in hoodie.properties or its last write commit's
extraMetadata, or a completed clustering on the timeline no lakewarden run planned), or a
clustering someone else planned and left pending: skipped with that reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from lakewarden.formats.hudi.facts import HudiFacts
from lakewarden.formats.hudi.layout import base_files, table_columns
from lakewarden.formats.hudi.timeline import WRITE_ACTIONS, HudiTimeline
from lakewarden.health.files_per_lookup import files_per_lookup
from lakewarden.kinds.base import PlanOutcome, Verdict
from lakewarden.policy.model import ClusteringPolicy, ZOrderPolicy

KINDS = ("clustering", "zorder")
WRITER_CLUSTERS = (
    "hoodie.clustering.inline",
    "hoodie.clustering.schedule.inline",
    "hoodie.clustering.async.enabled",
)
# A pending clustering: `replacecommit` (table version 6) or `clustering` (8+).
PENDING_ACTIONS = frozenset({"replacecommit", "clustering"})


def _on(value: Any) -> bool:
    return str(value).strip().lower() == "true"


def strategy(kind: str, section: ClusteringPolicy | ZOrderPolicy) -> str:
    """Hudi's layout optimization strategy for the kind."""
    return section.curve if isinstance(section, ZOrderPolicy) else "linear"


def is_clustering(timeline: HudiTimeline, requested: str) -> bool:
    """A completed replacecommit that is a clustering (not an insert_overwrite)."""
    done = [i for i in timeline.completed() if i.requested == requested]
    return bool(done) and str(timeline.read_instant(done[-1]).get("operationType")) == "CLUSTER"


def writer_clusters(timeline: HudiTimeline, ours: Iterable[str]) -> str | None:
    """Why the table's writer (or Hudi's own job) clusters it, or None."""
    props: Mapping[str, Any] = timeline.properties
    for key in WRITER_CLUSTERS:
        if _on(props.get(key)):
            return f"its hoodie.properties set {key}=true: the writer clusters"
    done = timeline.completed()
    writes = [i for i in done if i.action in WRITE_ACTIONS]
    if writes:
        extra: Mapping[str, Any] = timeline.read_instant(writes[-1]).get("extraMetadata") or {}
        for key in WRITER_CLUSTERS:
            if _on(extra.get(key)):
                return (
                    f"its last write commit {writes[-1].requested} says {key}=true: the "
                    "writer clusters"
                )
    ours = set(ours)
    theirs = [
        i.requested
        for i in done
        if i.action == "replacecommit"
        and i.requested not in ours
        and is_clustering(timeline, i.requested)
    ]
    if theirs:
        return (
            f"clustering {theirs[-1]} on its timeline was not planned by lakewarden: the "
            "writer (inline or async) or Hudi's own job clusters it"
        )
    return None


def verdict(
    kind: str,
    section: ClusteringPolicy | ZOrderPolicy,
    facts: HudiFacts,
    timeline: HudiTimeline,
    ours: Iterable[str],
) -> Verdict:
    """Is a clustering due: does a lookup on the columns open too many base files?"""
    cols = section.columns
    how = strategy(kind, section)
    metrics: dict[str, Any] = {"columns": cols, "strategy": how, "base_files": facts.file_groups}
    if not section.enabled:
        return Verdict(False, f"{kind} is disabled by policy", metrics)
    ours = set(ours)
    foreign = [
        i.requested
        for i in timeline.pending()
        if i.action in PENDING_ACTIONS and i.requested not in ours
    ]
    if foreign:
        return Verdict(
            False,
            f"clustering {foreign[-1]} was planned by someone else and is pending: theirs to "
            "run (lakewarden never runs a plan it did not make)",
            metrics,
        )
    writer = writer_clusters(timeline, ours)
    if writer is not None:
        return Verdict(False, f"{writer}; lakewarden does not fight it", metrics)
    known = table_columns(timeline)
    missing = [c for c in cols if known is not None and c not in known]
    if missing:
        why = f"column(s) {', '.join(missing)} not in the table (it has {', '.join(known or [])})"
        return Verdict(False, why, metrics)
    lookups = {
        part: files_per_lookup(files, cols) for part, files in base_files(timeline, cols).items()
    }
    small = sum(1 for s in facts.base_file_sizes if s < section.target_file_size_bytes)
    due = sorted(
        p for p, n in lookups.items() if n is not None and n > section.max_files_per_lookup
    )
    worst = max((n for n in lookups.values() if n is not None), default=None)
    metrics.update(
        max_files_per_lookup_seen=worst,
        partitions_due=len(due),
        small_base_files=small,
        threshold_max_files_per_lookup=section.max_files_per_lookup,
    )
    if worst is None:
        return Verdict(False, f"no base file has min/max stats for {', '.join(cols)}", metrics)
    if not due:
        return Verdict(
            False,
            f"a lookup on {', '.join(cols)} opens at most {worst:g} base files <= "
            f"max_files_per_lookup {section.max_files_per_lookup:g}",
            metrics,
        )
    names = ", ".join(p or "(unpartitioned)" for p in due[:5])
    return Verdict(
        True,
        f"a lookup on {', '.join(cols)} opens up to {worst:g} base files > "
        f"max_files_per_lookup {section.max_files_per_lookup:g} in {len(due)} partition(s): "
        f"{names} ({small} base files under target_file_size_bytes); Hudi clustering, "
        f"{how} layout",
        metrics,
        {"files_per_lookup_before": worst},
    )


def plan(
    kind: str,
    section: ClusteringPolicy | ZOrderPolicy,
    facts: HudiFacts,
    timeline: HudiTimeline,
    ours: Iterable[str],
) -> PlanOutcome:
    """The job's plan (base path, columns, strategy, sizes), or why not. The clustering
    instant itself is planned by the job (Hudi's schedule), recorded on its run."""
    found = verdict(kind, section, facts, timeline, ours)
    if not found.needed:
        return PlanOutcome(None, found.reason)
    return PlanOutcome(
        {
            "format": "hudi",
            "base_path": facts.base_path,
            "head": facts.head,
            "columns": section.columns,
            "strategy": strategy(kind, section),
            "target_file_size_bytes": section.target_file_size_bytes,
            "metadata_table": bool(timeline.properties.get("hoodie.table.metadata.partitions")),
            "files_before": len(facts.base_file_sizes),
            "metrics": found.metrics,
        },
        found.reason,
    )
