"""Validation takes a rewrite's input sums from what its own read observed
(lakewarden.spark.validation.observed_inputs) only when the observed file groups are
exactly the files its commits removed, each once, each group in one partition; otherwise
it reads the inputs, so a commit that removed a file no group read is still checked."""

from __future__ import annotations

from lakewarden.spark.binpack import Observed, ObservedGroup
from lakewarden.spark.validation import SpanFiles, Touched, observed_inputs


def _files(inputs: dict[str, int]) -> SpanFiles:
    return SpanFiles(
        partitions=[Touched({"p": "a"}, None), Touched({"p": "b"}, None)],
        inputs=inputs,
        outputs={"out-a": 0, "out-b": 1},
        input_rows=0,
        input_bytes=0,
        output_bytes=0,
        respecified=False,
    )


def _observed(*groups: tuple[set[str], int, int], file_rows: int | None = None) -> Observed:
    return Observed(
        ("id",), tuple(ObservedGroup(frozenset(f), n, h, file_rows) for f, n, h in groups)
    )


SPAN = _files({"a1": 0, "a2": 0, "b1": 1})


def test_each_partition_sums_its_groups() -> None:
    observed = _observed(({"a1"}, 3, 10), ({"a2"}, 4, -2), ({"b1"}, 5, 7))
    assert observed_inputs(SPAN, observed) == [(7, 8), (5, 7)]


def test_a_removed_file_no_group_read_means_the_inputs_are_read() -> None:
    assert observed_inputs(SPAN, _observed(({"a1", "a2"}, 7, 8))) is None


def test_a_group_of_a_file_not_removed_means_the_inputs_are_read() -> None:
    observed = _observed(({"a1", "a2"}, 7, 8), ({"b1"}, 5, 7), ({"c1"}, 1, 1))
    assert observed_inputs(SPAN, observed) is None


def test_a_file_in_two_groups_means_the_inputs_are_read() -> None:
    observed = _observed(({"a1", "a2"}, 7, 8), ({"a2"}, 4, -2), ({"b1"}, 5, 7))
    assert observed_inputs(SPAN, observed) is None


def test_a_group_across_partitions_means_the_inputs_are_read() -> None:
    assert observed_inputs(SPAN, _observed(({"a1", "a2", "b1"}, 12, 15))) is None


def test_the_manifests_record_counts_stand_for_a_group_without_deletes() -> None:
    """A read that lost a row (the write copied what it read) shows as rows changed."""
    observed = _observed(({"a1", "a2"}, 6, 8), ({"b1"}, 6, 7), file_rows=7)
    assert observed_inputs(SPAN, observed) == [(7, 8), (7, 7)]
