"""Health and explain of a Hudi table (issue 28): what its file-system view and timeline
say (`lakewarden.formats.hudi.facts`), and what lakewarden would run on it and why.
Compaction is lakewarden's (its verdict: `lakewarden.kinds.hudi_compaction`, under the
table's policy); clustering and clean are not yet, so explain says what is due and that
Hudi's own services (the writer's, or Hudi's standalone jobs) must do it for now."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

from lakewarden.formats.hudi.facts import HudiFacts
from lakewarden.kinds.base import Verdict

MB = 1 << 20
# Base-file size buckets (upper bounds, MB): Hudi's small-file limit is 100 MB by default
# (hoodie.parquet.small.file.limit), its target 120 MB (hoodie.parquet.max.file.size).
SIZE_BUCKETS_MB = (16, 64, 100, 128)
NOT_YET = "lakewarden does not run this Hudi table service yet (issue 28)"


def size_histogram(sizes: list[int]) -> dict[str, int]:
    """Base files per size bucket: `<16MB`, `16-64MB`, `64-100MB`, `100-128MB`, `>=128MB`."""
    edges = [0, *SIZE_BUCKETS_MB]
    labels = [f"<{hi}MB" if lo == 0 else f"{lo}-{hi}MB" for lo, hi in pairwise(edges)]
    out = dict.fromkeys([*labels, f">={SIZE_BUCKETS_MB[-1]}MB"], 0)
    for size in sizes:
        below = [i for i, hi in enumerate(SIZE_BUCKETS_MB) if size < hi * MB]
        out[labels[below[0]] if below else f">={SIZE_BUCKETS_MB[-1]}MB"] += 1
    return out


def slice_histogram(log_counts: list[int]) -> dict[str, int]:
    """File slices by how many log files a reader merges into each: `0`, `1`, ..., `8+`."""
    out: dict[str, int] = {}
    for n in sorted(log_counts):
        key = str(n) if n < 8 else "8+"
        out[key] = out.get(key, 0) + 1
    return out


def explain_services(facts: HudiFacts, compaction_verdict: Verdict) -> list[dict[str, Any]]:
    """Per table service: is there work, and who does it: compaction by lakewarden's
    verdict (`compaction_verdict`: why, and why not), the others not by lakewarden yet."""
    small = sum(1 for s in facts.base_file_sizes if s < SIZE_BUCKETS_MB[2] * MB)
    clustering = (
        f"{small} of {len(facts.base_file_sizes)} base files are under "
        f"{SIZE_BUCKETS_MB[2]} MB (Hudi's small-file limit); {NOT_YET}"
    )
    clean = f"{facts.timeline_length} completed instants on the active timeline; {NOT_YET}"
    return [
        {
            "service": "compaction",
            "due": compaction_verdict.needed,
            "reason": f"{compaction_verdict.reason} (lakewarden's compaction kind)",
        },
        {"service": "clustering", "due": small > 1, "reason": clustering},
        {"service": "clean", "due": False, "reason": clean},
    ]


def hudi_health(facts: HudiFacts, compaction_verdict: Verdict) -> dict[str, Any]:
    return {
        "facts": facts.summary(),
        "base_file_sizes": size_histogram(facts.base_file_sizes),
        "log_files_per_slice": slice_histogram(facts.log_files_per_slice),
        "services": explain_services(facts, compaction_verdict),
    }
