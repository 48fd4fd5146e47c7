"""Charts of a run report as small inline SVG (no scripts, no network): what each chart
shows. How axes, ticks and text are drawn is :mod:`.svg`'s.

No plotting library: every run writes its report, and matplotlib's import and SVG
writer took about a second of it; these charts are a few bars and lines.
"""

from __future__ import annotations

import math
from bisect import bisect_right

from pydantic import BaseModel, Field

import toolkit.run.output.report.svg as svg
from toolkit.run.output.report.report_data import ColumnFigures, WritePoint

ACCENT = "#3b6fd8"
ERROR_RED = "#d0483e"
RATE_ORANGE = "#e08a1e"
#: Bars shown in a category chart; the rest are summed into one "(N others)" bar.
MAX_BARS = 12
#: Bins of a histogram of values that aren't a few whole numbers.
BINS = 20


def column_chart(column: ColumnFigures) -> str | None:
    """An SVG chart fitting the column's type, or None where a sentence says it better
    or the page draws it (categories: :func:`category_bars`)."""
    values = [v for v in column.sample if math.isfinite(v)]  # NaN and inf have no place
    if column.kind in ("numbers", "confidence", "text") and values:
        return _histogram(values, confidence=column.kind == "confidence",
                          xlabel="characters" if column.kind == "text" else column.name)
    return None


def _histogram(values: list[float], confidence: bool, xlabel: str) -> str:
    distinct = sorted(set(values))
    if len(distinct) <= MAX_BARS and all(float(v).is_integer() for v in distinct):
        return _discrete(values, distinct, xlabel)  # bins around a few integers mislead
    low, high = min(values), max(values)
    title = ""
    if confidence:
        low, high = min(low, 0.0), max(high, 1.0)
    else:
        low, high, outside = _shown_range(values, low, high)
        if outside:
            title = (f"{outside:,} rows outside the range shown "
                     f"({svg.value(min(values))} to {svg.value(max(values))})")
            values = [v for v in values if low <= v <= high]
    whole = all(float(v).is_integer() for v in values) and 0 < high - low <= 60
    if whole:
        # Counts (tokens, characters): a bar per whole number, no empty slivers between.
        edges = [x - 0.5 for x in range(int(low), int(high) + 2)]
    else:
        if high <= low:  # one value: a bar a unit wide around it
            low, high = low - 0.5, high + 0.5
        width = (high - low) / BINS
        edges = [low + i * width for i in range(BINS)] + [high]
    counts = _binned(values, edges)
    top = svg.ceiling(max(counts))
    plot = svg.Plot(x=(edges[0], edges[-1]), y=(0, top),
                    x_ticks=svg.x_ticks(edges[0], edges[-1], integer=whole),
                    y_ticks=svg.ticks(0, top, integer=True), x_label=xlabel,
                    y_label="rows", title=title)
    for left, right, rows in zip(edges, edges[1:], counts):
        if rows:  # a white gap between bars, as the page's category bars have
            x1, x2 = plot.x(left), plot.x(right)
            gap = min(0.6, (x2 - x1) / 4)
            plot.elements.append(svg.rect(x1 + gap, plot.y(rows), x2 - x1 - 2 * gap,
                                          plot.y(0) - plot.y(rows), ACCENT))
    return plot.svg(f"histogram of {xlabel}")


def _binned(values: list[float], edges: list[float]) -> list[int]:
    """Rows in each bin [edges[i], edges[i+1]); the last bin includes its right edge."""
    counts = [0] * (len(edges) - 1)
    for value in values:
        if edges[0] <= value <= edges[-1]:
            counts[min(len(counts) - 1, bisect_right(edges, value) - 1)] += 1
    return counts


def _shown_range(values: list[float], low: float,
                 high: float) -> tuple[float, float, int]:
    """The range a histogram shows: without far outliers (beyond 3 interquartile ranges,
    e.g. a few long documents among short reviews) when they would squeeze every other
    value into one or two bars. Returns (low, high, values left out)."""
    ordered = sorted(values)
    q1, q3 = ordered[len(ordered) // 4], ordered[(3 * len(ordered)) // 4]
    spread = q3 - q1
    if spread <= 0:
        return low, high, 0
    inner_low, inner_high = max(low, q1 - 3 * spread), min(high, q3 + 3 * spread)
    if (high - low) > 4 * (inner_high - inner_low):
        outside = sum(1 for v in values if v < inner_low or v > inner_high)
        return inner_low, inner_high, outside
    return low, high, 0


def _discrete(values: list[float], distinct: list[float], xlabel: str) -> str:
    """A bar per value with its count above it (the axis labels each bar, not a scale)."""
    counts = [values.count(v) for v in distinct]
    top = svg.ceiling(max(counts))
    room = max(top, max(counts) * 1.12)  # for the count above the tallest bar
    names = [f"{v:,.0f}" for v in distinct]
    positions = [float(i) for i in range(len(distinct))]
    plot = svg.Plot(x=(-0.6, len(distinct) - 0.4), y=(0, room), x_ticks=positions,
                    x_tick_text=names, y_ticks=svg.ticks(0, top, integer=True),
                    x_label=xlabel, y_label="rows")
    for i, rows in zip(positions, counts):
        x1, x2 = plot.x(i - 0.3), plot.x(i + 0.3)
        plot.elements.append(svg.rect(x1, plot.y(rows), x2 - x1, plot.y(0) - plot.y(rows),
                                      ACCENT))
        plot.elements.append(svg.text((x1 + x2) / 2, plot.y(rows) - 4, f"{rows:,}",
                                      size=11))
    return plot.svg(f"rows by {xlabel}")


def throughput_chart(points: list[WritePoint]) -> str | None:
    """Rows written over the run and the rate between pieces, or None with too few pieces."""
    if len(points) < 3:
        return None
    seconds = [p.seconds for p in points]
    rows = [p.rows for p in points]
    end = max(seconds[-1], 1e-9)
    top = svg.ceiling(max(rows))
    windows = _rate_windows(points)
    rate_top = svg.ceiling(max(rate for _, _, rate in windows)) if windows else 0.0
    plot = svg.Plot(
        x=(0, end), y=(0, top), x_ticks=svg.x_ticks(0, end),
        y_ticks=svg.ticks(0, top, integer=True),
        x_label="seconds since the run started", y_label="rows written", y_colour=ACCENT,
        right=(0, rate_top) if windows else None,
        right_ticks=svg.ticks(0, rate_top) if windows else (), right_label="rows/s",
        right_colour=RATE_ORANGE)
    # Rows written is a step: each piece's rows appear at once when it is written.
    steps = [(plot.x(seconds[0]), plot.y(rows[0]))]
    for i in range(1, len(points)):
        steps += [(plot.x(seconds[i]), plot.y(rows[i - 1])),
                  (plot.x(seconds[i]), plot.y(rows[i]))]
    fill = [(plot.x(seconds[0]), plot.y(0)), *steps, (plot.x(seconds[-1]), plot.y(0))]
    plot.elements.append(svg.path(fill, ACCENT, fill=ACCENT, opacity=0.12))
    plot.elements.append(svg.path(steps, ACCENT, width=1.8))
    if windows and plot.right is not None:
        rate = plot.right
        stairs = []
        for start, stop, value in windows:
            stairs += [(plot.x(start), rate(value)), (plot.x(stop), rate(value))]
        plot.elements.append(svg.path(stairs, RATE_ORANGE, width=1.4))
    return plot.svg("rows written over the run", vertical_grid=True)


def _rate_windows(points: list[WritePoint]) -> list[tuple[float, float, float]]:
    """(start, end, rows/s) over equal windows from the first written piece to the last
    (the start-up before it has no rows to rate), about 3 pieces a window and at most
    12 windows; [] for fewer than 6 pieces."""
    if len(points) < 7:
        return []
    count = min(12, (len(points) - 1) // 3)
    first, last = points[1].seconds, points[-1].seconds
    if last <= first:
        return []
    width = (last - first) / count
    windows = []
    for i in range(count):
        start, end = first + i * width, first + (i + 1) * width
        rows = sum(b.rows - a.rows for a, b in zip(points[1:], points[2:])
                   if start < b.seconds <= end or (i == 0 and b.seconds == start))
        windows.append((start, end, rows / width))
    return windows


class Bar(BaseModel):
    """One bar of a category chart, which the page draws as HTML: a label there wraps
    in the reader's own font, where an SVG's was measured in another and got clipped."""

    label: str
    rows: int
    percent: float = Field(description="Of the longest bar, 0 to 100.")
    declared: bool = Field(description="One of the column's declared choices.")


def category_bars(column: ColumnFigures) -> list[Bar]:
    """The bars of a categories column, most rows first: every declared choice (0 rows
    too), and at most MAX_BARS undeclared values, the rest summed into one bar."""
    declared = set(column.choices)
    shown = [(value, rows) for value, rows in column.categories if value in declared]
    others = [(value, rows) for value, rows in column.categories if value not in declared]
    room = max(0, MAX_BARS - len(shown))
    if len(others) > room:
        rest = others[room:]
        others = [*others[:room], (f"({len(rest)} others)", sum(rows for _, rows in rest))]
    bars = sorted([*shown, *others], key=lambda bar: -bar[1])  # stable: declared order on ties
    longest = max((rows for _, rows in bars), default=0) or 1
    return [Bar(label=_label(value), rows=rows, percent=round(100 * rows / longest, 2),
                declared=value in declared) for value, rows in bars]


def _label(value: str) -> str:
    value = " ".join(value.split()) or "(empty)"
    return value if len(value) <= 80 else value[:79] + "…"
