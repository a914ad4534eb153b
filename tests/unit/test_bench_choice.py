"""Which figures a benchmark run measures: `--only`'s, else all; the smoke run (the suite's)
leaves out NOT_IN_SMOKE's, whose servers alone outlast its budget, unless named."""

from __future__ import annotations

from benchmarks.__main__ import FIGURES, NOT_IN_SMOKE, chosen


def test_the_smoke_run_leaves_out_only_what_is_too_slow_for_it() -> None:
    assert {"B21", "B22", "B23", "B27", "B37", "B43", "B44", "B45"} == NOT_IN_SMOKE
    assert set(FIGURES) >= NOT_IN_SMOKE
    assert chosen("", smoke=False) == list(FIGURES)
    assert chosen("", smoke=True) == [
        i for i in FIGURES if i not in ("B21", "B22", "B23", "B27", "B37", "B43", "B44", "B45")
    ]
    assert chosen("b22, B1", smoke=True) == ["B22", "B1"]  # named: measured even in smoke
