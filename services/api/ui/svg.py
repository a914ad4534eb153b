"""Plots as server-rendered SVG: no chart library, nothing to load, readable without JS.
Pure functions of their data; every label is escaped (markupsafe)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from markupsafe import Markup, escape

WIDTH, HEIGHT = 640, 200
PAD_LEFT, PAD_BOTTOM, PAD_TOP = 48, 36, 10
# One colour per series, in order (kinds, states); colour-blind safe (Okabe-Ito).
PALETTE = ("#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#f0e442")


@dataclass(frozen=True)
class Bar:
    label: str
    value: float
    title: str = ""  # the tooltip; the label and value when empty


def _number(value: float) -> str:
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.2f}"


def _frame(body: str, label: str, css_class: str) -> Markup:
    return Markup(
        f'<svg class="plot {css_class}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-label="{escape(label)}" xmlns="http://www.w3.org/2000/svg">{body}</svg>'
    )


def _axis(top: float) -> str:
    """The y axis from 0 to `top`, with its two labels."""
    x, bottom = PAD_LEFT, HEIGHT - PAD_BOTTOM
    return (
        f'<line class="axis" x1="{x}" y1="{PAD_TOP}" x2="{x}" y2="{bottom}"/>'
        f'<line class="axis" x1="{x}" y1="{bottom}" x2="{WIDTH}" y2="{bottom}"/>'
        f'<text class="tick" x="{x - 4}" y="{PAD_TOP + 8}" text-anchor="end">{_number(top)}</text>'
        f'<text class="tick" x="{x - 4}" y="{bottom}" text-anchor="end">0</text>'
    )


def bar_chart(bars: Sequence[Bar], label: str) -> Markup:
    """One `rect.bar` per bar (even at zero height: a test counts them), labelled below."""
    top = max((b.value for b in bars), default=0) or 1
    plot_w, plot_h = WIDTH - PAD_LEFT, HEIGHT - PAD_BOTTOM - PAD_TOP
    slot = plot_w / max(len(bars), 1)
    parts = [_axis(top)]
    for i, b in enumerate(bars):
        h = plot_h * b.value / top
        x = PAD_LEFT + i * slot + slot * 0.1
        y = HEIGHT - PAD_BOTTOM - h
        tip = escape(b.title or f"{b.label}: {_number(b.value)}")
        parts.append(
            f'<rect class="bar" data-label="{escape(b.label)}" data-value="{_number(b.value)}" '
            f'x="{x:.1f}" y="{y:.1f}" width="{slot * 0.8:.1f}" height="{h:.1f}">'
            f"<title>{tip}</title></rect>"
            f'<text class="label" x="{x + slot * 0.4:.1f}" y="{HEIGHT - PAD_BOTTOM + 14}" '
            f'text-anchor="middle">{escape(b.label)}</text>'
        )
        if b.value:
            parts.append(
                f'<text class="value" x="{x + slot * 0.4:.1f}" y="{y - 2:.1f}" '
                f'text-anchor="middle">{_number(b.value)}</text>'
            )
    return _frame("".join(parts), label, "bars")


def line_chart(
    series: Mapping[str, Sequence[tuple[datetime, float]]],
    start: datetime,
    end: datetime,
    label: str,
    unit: str = "",
) -> Markup:
    """One `polyline.series` per named series over [start, end], with a legend; points at
    their time (x) and value (y, from 0)."""
    top = max((v for points in series.values() for _, v in points), default=0) or 1
    span = (end - start).total_seconds() or 1
    plot_w, plot_h = WIDTH - PAD_LEFT - 10, HEIGHT - PAD_BOTTOM - PAD_TOP
    parts = [_axis(top)]
    for i, (name, points) in enumerate(series.items()):
        colour = PALETTE[i % len(PALETTE)]
        xy = [
            (
                PAD_LEFT + plot_w * (t - start).total_seconds() / span,
                HEIGHT - PAD_BOTTOM - plot_h * v / top,
            )
            for t, v in points
        ]
        coords = " ".join(f"{x:.1f},{y:.1f}" for x, y in xy)
        parts.append(
            f'<polyline class="series" data-series="{escape(name)}" points="{coords}" '
            f'fill="none" stroke="{colour}" stroke-width="2"/>'
        )
        parts.extend(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="{colour}"/>' for x, y in xy)
        parts.append(
            f'<text class="legend" x="{PAD_LEFT + 8 + 110 * i}" y="{HEIGHT - 6}" '
            f'fill="{colour}">{escape(name)}</text>'
        )
    parts.append(
        f'<text class="tick" x="{PAD_LEFT}" y="{HEIGHT - PAD_BOTTOM + 14}">'
        f"{start:%m-%d %H:%M}</text>"
        f'<text class="tick" x="{WIDTH - 10}" y="{HEIGHT - PAD_BOTTOM + 14}" '
        f'text-anchor="end">{end:%H:%M} UTC{escape(" · " + unit if unit else "")}</text>'
    )
    return _frame("".join(parts), label, "lines")
