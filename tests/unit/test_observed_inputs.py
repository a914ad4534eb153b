"""Validation takes a rewrite's input sums from what its own read observed
(lakewarden.spark.validation.observed_inputs) only when the observed file groups are
exactly the files its commits removed, each once, each group in one partition; otherwise
it reads the inputs, so a commit that removed a file no group read is still checked. Its
output sums as the Arrow rewrite took them once written (`written_outputs`) stand only
when the commits added exactly those files, as written and unchanged since; otherwise
validation reads the outputs."""

from __future__ import annotations

import os
from pathlib import Path

from lakewarden.spark.arrow_rewrite import Written
from lakewarden.spark.binpack import Observed, ObservedGroup
from lakewarden.spark.validation import SpanFiles, Touched, observed_inputs, written_outputs


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


# --- the outputs' sums as the Arrow rewrite took them once written ----------------------


def _written(tmp_path: Path, *names: str) -> dict[str, Written]:
    """Output files on disk, each as `hash_written` would describe it (10 rows, 100 bytes)."""
    out = {}
    for name in names:
        path = tmp_path / name
        path.write_bytes(b"x" * 100)
        st = os.stat(path)
        out[str(path)] = Written(str(path), 100, 10, 7, (st.st_size, st.st_mtime_ns, st.st_ino))
    return out


def _span(written: dict[str, Written], **changes: object) -> SpanFiles:
    files = _files({"a1": 0})
    files.outputs = {loc: 0 for loc in written}
    files.output_entries = {loc: (100, 10) for loc in written}
    for key, value in changes.items():
        setattr(files, key, value)
    return files


def test_the_outputs_sums_as_written_stand_when_the_commit_holds_exactly_them(
    tmp_path: Path,
) -> None:
    written = _written(tmp_path, "o1", "o2")
    assert written_outputs([_span(written)], frozenset({0}), written) == {
        0: {loc: (10, 7) for loc in written}
    }


def test_any_doubt_about_the_outputs_means_they_are_read(tmp_path: Path) -> None:
    written = _written(tmp_path, "o1", "o2")
    o1, o2 = written
    doubts = {
        "a file written and summed that the commit does not hold": _span(
            written, outputs={o1: 0}, output_entries={o1: (100, 10)}
        ),
        "a file committed that was not summed": _span(
            written,
            outputs={o1: 0, o2: 0, "other": 0},
            output_entries={o1: (100, 10), o2: (100, 10), "other": (100, 10)},
        ),
        "a size other than written": _span(written, output_entries={o1: (101, 10), o2: (100, 10)}),
        "a record count other than summed": _span(
            written, output_entries={o1: (100, 11), o2: (100, 10)}
        ),
        "a delete file added by the span's commits": _span(written, added_delete_files=1),
    }
    for doubt, span in doubts.items():
        assert written_outputs([span], frozenset({0}), written) is None, doubt
    (tmp_path / "o2").write_bytes(b"y" * 100)  # the same size, rewritten since it was summed
    os.utime(tmp_path / "o2", ns=(0, 0))
    assert written_outputs([_span(written)], frozenset({0}), written) is None
    (tmp_path / "o2").unlink()
    assert written_outputs([_span(written)], frozenset({0}), written) is None
