"""Health and explain of a Hudi table (issue 28): what its file-system view and timeline
say (`lakewarden.formats.hudi.facts`), and what lakewarden would run on it and why.
Compaction, clustering (and zorder) and clean are lakewarden's kinds (their verdicts:
`lakewarden.kinds.hudi`, under the table's policy): explain says, per service, whether
it is due and why, or why not (the writer's own service, a disabled kind, ...)."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

from lakewarden.formats.hudi.facts import HudiFacts
from lakewarden.kinds.base import Verdict

MB = 1 << 20
# Base-file size buckets (upper bounds, MB): Hudi's small-file limit is 100 MB by default
# (hoodie.parquet.small.file.limit), its target 120 MB (hoodie.parquet.max.file.size).
SIZE_BUCKETS_MB = (16, 64, 100, 128)


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


def explain_services(verdicts: dict[str, Verdict]) -> list[dict[str, Any]]:
    """Per table service (compaction, clustering, zorder, clean): is there work, and why,
    or why not (lakewarden's verdict of the kind, `kinds.hudi.verdicts`)."""
    return [
        {
            "service": kind,
            "due": v.needed,
            "reason": f"{v.reason} (lakewarden's {kind} kind)",
            "metrics": v.metrics,
        }
        for kind, v in verdicts.items()
    ]


def hudi_health(facts: HudiFacts, verdicts: dict[str, Verdict]) -> dict[str, Any]:
    return {
        "facts": facts.summary(),
        "base_file_sizes": size_histogram(facts.base_file_sizes),
        "log_files_per_slice": slice_histogram(facts.log_files_per_slice),
        "services": explain_services(verdicts),
    }
