"""The operationMetrics a staged Delta rewrite records, as Delta's OPTIMIZE computes them."""

from __future__ import annotations

from typing import Any

from lakewarden.formats.delta.optimize_metrics import optimize_metrics


def test_sizes_quartiles_and_deletion_vectors_as_deltas_optimize_counts_them() -> None:
    added = [{"size": s} for s in (40, 10, 30, 20, 50)]
    dv = {"storageType": "u", "sizeInBytes": 34, "cardinality": 3}
    removed: list[dict[str, Any]] = [
        {"size": 7, "deletionVector": dv},
        {"size": 8},
        {"size": 9, "deletionVector": dv},
    ]
    assert optimize_metrics(added, removed) == {
        "numAddedFiles": 5,
        "numRemovedFiles": 3,
        "numAddedBytes": 150,
        "numRemovedBytes": 24,
        "numDeletionVectorsRemoved": 2,
        "numDeletionVectorRowsRemoved": 6,
        "numDeletionVectorBytesRemoved": 68,
        # sorted 10 20 30 40 50: indexes 0, 5 // 4 = 1, 5 // 2 = 2, 15 // 4 = 3, 4
        "minFileSize": 10,
        "p25FileSize": 20,
        "p50FileSize": 30,
        "p75FileSize": 40,
        "maxFileSize": 50,
    }


def test_nothing_added_has_no_size_quartiles() -> None:
    got = optimize_metrics([], [{"size": 5}])
    assert got["numRemovedFiles"] == 1 and "minFileSize" not in got
