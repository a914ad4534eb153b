"""When a bin-pack group is read in several splits gathered into its one writing task
(lakewarden.spark.binpack.read_splits): only a group of one output file, big enough, with
more than one core, and only when the splits are smaller than the group's own split size."""

from __future__ import annotations

from lakewarden.spark.binpack import PARALLEL_READ_MIN_BYTES, SPLIT_FLOOR_BYTES, read_splits

MB = 1 << 20


def test_a_big_group_of_one_output_is_read_in_two_splits_a_core() -> None:
    assert read_splits(1, 60 * MB, 512 * MB, 2) == 15 * MB


def test_groups_that_already_write_in_parallel_or_are_small_are_read_as_before() -> None:
    assert read_splits(2, 600 * MB, 300 * MB, 2) is None  # a task per output file already
    assert read_splits(1, 60 * MB, 512 * MB, 1) is None  # one core: a shuffle for nothing
    assert read_splits(1, PARALLEL_READ_MIN_BYTES - 1, 512 * MB, 2) is None
    assert read_splits(1, 16 * MB, 3 * MB, 2) is None  # its own splits are smaller


def test_splits_are_never_below_the_floor() -> None:
    assert read_splits(1, 20 * MB, 512 * MB, 8) == SPLIT_FLOOR_BYTES
