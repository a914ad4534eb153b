"""Health and explain of a Delta table (issue 29): what its files and log say
(`lakewarden.formats.delta.facts`), and what lakewarden would run on it and why: OPTIMIZE
and REORG ... APPLY (PURGE) as its compaction judges them (`lakewarden.kinds.delta`); for a
checkpoint, what is due and that Delta's own commands must do it for now."""

from __future__ import annotations

from typing import Any

from lakewarden.formats.delta.facts import DeltaFacts
from lakewarden.kinds.delta import compaction_verdict, purge_verdict
from lakewarden.policy.model import CompactionPolicy

MB = 1 << 20
NOT_YET = "lakewarden does not run this Delta command yet (issue 29)"
# A checkpoint is due when this many versions were written since the last one (Delta
# writes one every `delta.checkpointInterval` commits, 10 by default).
CHECKPOINT_INTERVAL = 10


def size_histogram(sizes: list[int], target: int) -> dict[str, int]:
    """Live files by size against the target: `<1/16`, `1/16-1/4`, `1/4-3/4`, `3/4-1`,
    `>=1` (of the target file size)."""
    edges = [(target / 16, "<1/16"), (target / 4, "1/16-1/4"), (target * 3 / 4, "1/4-3/4")]
    edges.append((target, "3/4-1"))
    out = dict.fromkeys([label for _, label in edges] + [">=1"], 0)
    for size in sizes:
        out[next((label for hi, label in edges if size < hi), ">=1")] += 1
    return out


def explain_commands(
    facts: DeltaFacts, now_ms: int, compaction: CompactionPolicy
) -> list[dict[str, Any]]:
    """Per Delta command: is there work, and who does it."""
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
    checkpoint = (
        f"{since} version(s) since the last checkpoint"
        + (f" (version {facts.checkpoint_version}, {age:.0f} s old)" if age is not None else "")
        + f"; {facts.commit_files} commit files in the log; {NOT_YET}"
    )
    return [
        {"command": "optimize", "due": verdict.needed, "reason": optimize},
        {"command": "purge", "due": purged.needed, "reason": purge},
        {"command": "checkpoint", "due": since > CHECKPOINT_INTERVAL, "reason": checkpoint},
    ]


def delta_health(facts: DeltaFacts, now_ms: int, compaction: CompactionPolicy) -> dict[str, Any]:
    return {
        "facts": facts.summary(now_ms),
        "file_sizes": size_histogram(facts.file_sizes, facts.target_file_size),
        "commands": explain_commands(facts, now_ms, compaction),
    }
