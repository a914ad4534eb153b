"""The dashboard's pure parts: SVG plots and where a policy value comes from."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from services.api.ui.pages import policy_sources
from services.api.ui.svg import Bar, bar_chart, line_chart


def test_a_bar_chart_draws_every_bar_and_escapes_labels() -> None:
    svg = str(bar_chart([Bar("<1 MB", 3), Bar("1-8 MB", 0), Bar("<script>", 1)], "sizes"))
    assert svg.count('<rect class="bar"') == 3  # a zero is a bar too (of no height)
    assert 'data-value="0"' in svg and "<script>" not in svg and "&lt;script&gt;" in svg


def test_a_line_chart_places_points_within_its_window() -> None:
    end = datetime(2026, 1, 2, tzinfo=UTC)
    start = end - timedelta(hours=24)
    svg = str(line_chart({"compaction": [(start, 0.0), (end, 4.0)]}, start, end, "backlog"))
    assert 'data-series="compaction"' in svg
    xs = [float(p.split(",")[0]) for p in svg.split('points="')[1].split('"')[0].split()]
    assert 0 < xs[0] < xs[1] <= 640


def test_each_setting_says_where_it_comes_from() -> None:
    rows = policy_sources(
        {"compaction": {"enabled": True, "min_input_files": 5}, "ttl": {"column": None}},
        table={"compaction": {"min_input_files": 5}},
        namespace={"ttl": {"column": None}},
    )
    assert rows == [
        ("compaction.enabled", True, "default"),
        ("compaction.min_input_files", 5, "table"),
        ("ttl.column", None, "namespace"),
    ]
