"""Column statistics on a Hudi table (issue 32 §1): what Hudi keeps is its column-stats
index in the metadata table (`formats.hudi.column_stats`), per file each column's min, max
and null count, for data skipping. Once built, Hudi's writer updates it in every commit: it
is current while the metadata table holds the table's newest write, and lakewarden never
writes it in between.

Due when the table has a metadata table but no column-stats index: lakewarden builds it
with Hudi's async indexer (the job: `jobs.hudi`, `column_stats.build`), on the policy's
`columns` ([]: Hudi's default, the first 32). Never fight the writer; not due, saying why:
- a table without a metadata table (its writer has `hoodie.metadata.enable=false` and would
  delete one at its next commit);
- an index lakewarden built that is gone again (its writer has
  `hoodie.metadata.index.column.stats.enable=false`: each of its commits drops the index);
- an indexing someone else started and left pending;
- an index on other columns than the policy's (the writer keeps the columns it is set with);
- a table of version 6 (a Hudi 0.14 writer's): its metadata table is left to that writer.
`max_age_hours` is Iceberg's (the index is current with every commit): not read.
"""

from __future__ import annotations

from typing import Any

from lakewarden.formats.hudi.column_stats import IndexState
from lakewarden.kinds.base import PlanOutcome, Verdict
from lakewarden.policy.model import StatsPolicy

KIND = "stats"
BUILT = "hudi_indexing_instant"  # where a run records the indexing instant it scheduled
WRITER = (
    "set hoodie.metadata.enable=true and hoodie.metadata.index.column.stats.enable=true "
    "on the writer"
)


def verdict(policy: StatsPolicy, state: IndexState, ours: set[str]) -> tuple[Verdict, str | None]:
    """Is the column-stats index to build, and the indexing instant to resume (an earlier
    attempt's left pending), if any. `ours`: the indexing instants lakewarden's runs made."""
    metrics = state.summary()
    if not policy.enabled:
        return Verdict(False, "stats is disabled by policy", metrics), None
    if state.table_version < 8:
        why = (
            f"table version {state.table_version} (a Hudi 0.x writer's): its metadata table "
            "is left to its writer, lakewarden's Hudi 1.2 builds no index in it"
        )
        return Verdict(False, why, metrics), None
    if not state.metadata_table:
        why = (
            "the table has no metadata table: its writer writes with hoodie.metadata.enable="
            "false and would delete one lakewarden built at its next commit; " + WRITER
        )
        return Verdict(False, why, metrics), None
    if state.built:
        wanted = [c for c in policy.columns if state.columns and c not in state.columns]
        if wanted:
            why = (
                f"the column-stats index covers {state.columns}, not the policy's {wanted}: "
                "the writer keeps the columns it is set with (hoodie.metadata.index.column."
                "stats.column.list); set them there"
            )
            return Verdict(False, why, metrics), None
        if state.synced:
            why = (
                f"the column-stats index exists ({state.index_files} file(s), columns "
                f"{state.columns or 'Hudi default'}) and is current: the metadata table holds "
                f"the newest write {state.latest_write} (the writer updates it in every commit)"
            )
        else:
            why = (
                "the column-stats index exists; the metadata table does not hold the newest "
                f"write {state.latest_write} yet: the writer's next commit syncs it "
                "(lakewarden never writes it in between)"
            )
        return Verdict(False, why, metrics), None
    pending = state.pending_indexing
    mine = [i for i in pending if i in ours]
    if mine:
        why = f"lakewarden's indexing {mine[-1]} of the column-stats index is pending: resume it"
        return Verdict(True, why, metrics), mine[-1]
    if pending or state.inflight:
        why = f"an indexing someone else started is pending ({', '.join(pending) or 'inflight'})"
        return Verdict(False, why, metrics), None
    gone = [i for i in state.completed_indexing if i in ours]
    if gone:
        why = (
            f"the column-stats index lakewarden built (indexing {gone[-1]}) is gone: the "
            "writer's commits drop it (its hoodie.metadata.index.column.stats.enable is "
            "false), and lakewarden does not fight the writer; " + WRITER
        )
        return Verdict(False, why, metrics), None
    columns = list(policy.columns) or "Hudi's default (the first 32 columns)"
    why = (
        "the metadata table has no column-stats index: build it with Hudi's async indexer "
        f"on {columns} (the writer keeps it current only with "
        "hoodie.metadata.index.column.stats.enable=true)"
    )
    return Verdict(True, why, metrics), None


def plan(policy: StatsPolicy, state: IndexState, base_path: str, ours: set[str]) -> PlanOutcome:
    found, resume = verdict(policy, state, ours)
    if not found.needed:
        return PlanOutcome(None, found.reason)
    body: dict[str, Any] = {
        "format": "hudi",
        "base_path": base_path,
        "action": "build_column_stats",
        "columns": list(policy.columns),
        "resume_instant": resume,
        "metrics": found.metrics,
    }
    return PlanOutcome(body, found.reason)
