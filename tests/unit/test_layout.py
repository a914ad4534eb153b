"""files_per_lookup on synthetic layouts: sorted, z-ordered-like and random."""

from __future__ import annotations

import random

from lakewarden.health.files_per_lookup import files_per_lookup
from lakewarden.metadata import DataFile


def _file(i: int, **bounds: tuple[int, int]) -> DataFile:
    return DataFile(f"f{i}", 100, 10, 0, (), bounds=bounds)


def test_disjoint_sorted_files_open_one_file_per_lookup() -> None:
    files = [_file(i, a=(i * 10, i * 10 + 9)) for i in range(20)]
    assert files_per_lookup(files, ["a"]) == 1.0


def test_random_files_open_almost_all_files() -> None:
    rng = random.Random(1)
    files = [_file(i, a=(rng.randint(0, 5), rng.randint(995, 1000))) for i in range(20)]
    lookups = files_per_lookup(files, ["a"])
    assert lookups is not None and lookups >= 10  # each file spans nearly the whole range


def test_two_columns_grid_beats_one_sorted_column_for_two_column_lookups() -> None:
    # Sorted by a only: each file spans all of b; a 2-D grid (what z-order approximates)
    # has small boxes in both dimensions.
    by_a = [_file(i, a=(i * 10, i * 10 + 9), b=(0, 99)) for i in range(16)]
    grid = [
        _file(i * 4 + j, a=(i * 40, i * 40 + 39), b=(j * 25, j * 25 + 24))
        for i in range(4)
        for j in range(4)
    ]
    assert files_per_lookup(by_a, ["a", "b"]) == 1.0
    assert files_per_lookup(grid, ["a", "b"]) == 1.0
    overlapping = [_file(i, a=(0, 159), b=(i * 6, i * 6 + 5)) for i in range(16)]
    assert files_per_lookup(overlapping, ["a"]) == 16.0


def test_no_bounds_says_nothing() -> None:
    assert files_per_lookup([_file(0)], ["a"]) is None
    assert files_per_lookup([], ["a"]) is None
