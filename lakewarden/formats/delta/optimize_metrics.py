"""The `operationMetrics` Delta's own OPTIMIZE records in its commit (delta-spark 3.3.3's
`OptimizeExecutor.createMetrics`: files and bytes added and removed, the added files' size
quartiles, the deletion vectors removed), from a rewrite's add and remove actions, so that
`DESCRIBE HISTORY` (and every tool that reads a commit's metrics) shows a lakewarden
rewrite committed by Delta's transaction as it shows Delta's own."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def optimize_metrics(
    added: Sequence[Mapping[str, Any]], removed: Sequence[Mapping[str, Any]]
) -> dict[str, int]:
    """{metric: value} for the add actions `added` and the remove actions `removed` (the
    log's JSON: `size`, a remove's `deletionVector`), named and computed as Delta's OPTIMIZE
    does (quartiles: the sorted sizes at count/4, count/2, 3*count/4)."""
    sizes = sorted(int(a["size"]) for a in added)
    vectors = [r["deletionVector"] for r in removed if r.get("deletionVector")]
    out = {
        "numAddedFiles": len(added),
        "numRemovedFiles": len(removed),
        "numAddedBytes": sum(sizes),
        "numRemovedBytes": sum(int(r.get("size") or 0) for r in removed),
        "numDeletionVectorsRemoved": len(vectors),
        "numDeletionVectorRowsRemoved": sum(int(v.get("cardinality") or 0) for v in vectors),
        "numDeletionVectorBytesRemoved": sum(int(v.get("sizeInBytes") or 0) for v in vectors),
    }
    if sizes:  # Delta's FileSizeStatsWithHistogram.create
        n = len(sizes)
        out.update(
            minFileSize=sizes[0],
            p25FileSize=sizes[n // 4],
            p50FileSize=sizes[n // 2],
            p75FileSize=sizes[n * 3 // 4],
            maxFileSize=sizes[-1],
        )
    return out
