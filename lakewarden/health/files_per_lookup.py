"""How well files are laid out for lookups on some columns, from their min/max bounds alone.

`files_per_lookup` is the average number of files a point lookup on `columns` must open:
a file must be opened when every column's value lies within its [lower, upper] bounds.
Probes are the files' own lower and upper corners (each file contains its corners, so the
answer is at least 1). Sorted or Z-ordered files have small, disjoint boxes (close to 1);
randomly written files each span the whole range (close to the number of files).
"""

from __future__ import annotations

from typing import Any

from lakewarden.metadata import DataFile

MAX_PROBES = 256


def _box(f: DataFile, columns: list[str]) -> list[tuple[Any, Any] | None]:
    return [f.bounds.get(c) for c in columns]


def _contains(box: list[tuple[Any, Any] | None], point: list[Any]) -> bool:
    for bound, value in zip(box, point, strict=True):
        if bound is None or value is None:
            continue  # no metrics for this column: a lookup cannot skip the file
        lo, hi = bound
        try:
            if value < lo or value > hi:
                return False
        except TypeError:
            continue
    return True


def files_per_lookup(files: list[DataFile], columns: list[str]) -> float | None:
    """None when no file has bounds for the columns (nothing can be said)."""
    if not files or not columns:
        return None
    boxes = [_box(f, columns) for f in files]
    probes: list[list[Any]] = []
    for box in boxes:
        if all(b is None for b in box):
            continue
        probes.append([b[0] if b else None for b in box])
        probes.append([b[1] if b else None for b in box])
    if not probes:
        return None
    step = max(1, len(probes) // MAX_PROBES)
    sample = probes[::step]
    total = sum(sum(1 for box in boxes if _contains(box, p)) for p in sample)
    return round(total / len(sample), 2)
