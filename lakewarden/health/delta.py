"""Health and explain of a Delta table (issue 29): what its files and log say
(`lakewarden.formats.delta.facts`), and what lakewarden would run on it and why
(`lakewarden.kinds.delta`): OPTIMIZE and REORG ... APPLY (PURGE) as its compaction judges
them; which layout command runs (a clustered table's OPTIMIZE, never ZORDER BY; else
OPTIMIZE … ZORDER BY); the log's cleanup (and the checkpoint it needs) as clean judges it;
the files without statistics as the stats kind judges them."""

from __future__ import annotations

from typing import Any

from lakewarden.formats.delta.facts import DeltaFacts
from lakewarden.kinds.delta import (
    clustered_said,
    clustering_verdict,
    compaction_verdict,
    log_verdict,
    purge_verdict,
    zorder_verdict,
)
from lakewarden.kinds.delta_stats import stats_verdict
from lakewarden.policy.model import Policy

MB = 1 << 20


def size_histogram(sizes: list[int], target: int) -> dict[str, int]:
    """Live files by size against the target: `<1/16`, `1/16-1/4`, `1/4-3/4`, `3/4-1`,
    `>=1` (of the target file size)."""
    edges = [(target / 16, "<1/16"), (target / 4, "1/16-1/4"), (target * 3 / 4, "1/4-3/4")]
    edges.append((target, "3/4-1"))
    out = dict.fromkeys([label for _, label in edges] + [">=1"], 0)
    for size in sizes:
        out[next((label for hi, label in edges if size < hi), ">=1")] += 1
    return out


def layout_command(facts: DeltaFacts, policy: Policy) -> dict[str, Any]:
    """Which command lays the table's files out, and whether it is due: a clustered table's
    OPTIMIZE (the clustering kind; Delta refuses ZORDER BY there), else OPTIMIZE … ZORDER BY
    (the zorder kind)."""
    if facts.clustering_columns:
        verdict = clustering_verdict(policy.clustering, facts)
        reason = f"{clustered_said(facts)}; lakewarden's clustering: {verdict.reason}"
        return {"command": "cluster", "due": verdict.needed, "reason": reason}
    zorder, _ = zorder_verdict(policy.zorder, facts)
    reason = f"no clustering columns (CLUSTER BY); lakewarden's zorder: {zorder.reason}"
    return {"command": "zorder", "due": zorder.needed, "reason": reason}


def explain_commands(facts: DeltaFacts, now_ms: int, policy: Policy) -> list[dict[str, Any]]:
    """Per Delta command: is there work, and who does it."""
    compaction = policy.compaction
    verdict, _ = compaction_verdict(compaction, facts)
    optimize = (
        f"{facts.small_files} of {facts.files} files are under {facts.small_file_threshold} "
        f"bytes (target {facts.target_file_size}); lakewarden's compaction: {verdict.reason}"
    )
    purged, _ = purge_verdict(compaction, facts)
    purge = (
        f"{facts.deletion_vector_files} files carry deletion vectors hiding "
        f"{facts.deleted_rows} rows; lakewarden's compaction: {purged.reason}"
        if facts.deletion_vector_files
        else "no file has a deletion vector"
    )
    since = facts.versions_since_checkpoint
    age = facts.checkpoint_age_s(now_ms)
    log = log_verdict(facts, now_ms)
    cleanup = (
        f"{since} version(s) since the last checkpoint"
        + (f" (version {facts.checkpoint_version}, {age:.0f} s old)" if age is not None else "")
        + f"; {facts.commit_files} commit files in the log; lakewarden's clean: {log.reason}"
    )
    stats, _ = stats_verdict(policy.stats, facts)
    return [
        {"command": "optimize", "due": verdict.needed, "reason": optimize},
        {"command": "purge", "due": purged.needed, "reason": purge},
        layout_command(facts, policy),
        {"command": "clean_log", "due": log.needed and policy.clean.enabled, "reason": cleanup},
        {
            "command": "compute_stats",
            "due": stats.needed,
            "reason": f"{facts.files_without_stats} of {facts.files} files have no statistics; "
            f"lakewarden's stats: {stats.reason}",
        },
    ]


def delta_health(facts: DeltaFacts, now_ms: int, policy: Policy) -> dict[str, Any]:
    return {
        "facts": facts.summary(now_ms),
        "file_sizes": size_histogram(facts.file_sizes, facts.target_file_size),
        "commands": explain_commands(facts, now_ms, policy),
    }
