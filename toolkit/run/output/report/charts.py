"""Charts of a run report, drawn with matplotlib as inline SVG (no scripts, no network).

matplotlib is imported inside these functions: a run imports it only when it writes
its report, and ``toolkit --help`` never does. Figures are made with
``matplotlib.figure.Figure`` directly, not pyplot, so no GUI backend or global figure
state is involved (safe in Ray's driver and in threads).
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pydantic import BaseModel, Field

from toolkit.run.output.report.report_data import ColumnFigures, WritePoint

ACCENT = "#3b6fd8"
ERROR_RED = "#d0483e"
RATE_ORANGE = "#e08a1e"
#: Bars shown in a category chart; the rest are summed into one "(N others)" bar.
MAX_BARS = 12

_STYLE = {
    # Text stays text in the SVG (smaller, selectable) and takes the page's fonts.
    "svg.fonttype": "none",
    # DejaVu Sans ships with matplotlib, so text is measured the same everywhere;
    # the page's CSS shows it in the reader's system font.
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans"],
    "font.size": 10,
    # User values are labels: "$5" must not be read as TeX.
    "text.parse_math": False,
    "axes.edgecolor": "#c9ced6",
    "axes.labelcolor": "#4a5160",
    "xtick.color": "#4a5160",
    "ytick.color": "#4a5160",
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.color": "#eceff3",
    "axes.axisbelow": True,
    "svg.hashsalt": "toolkit-report",  # the same run gives the same file
}


@contextmanager
def _figure(height: float = 2.6) -> Iterator[tuple[Any, Any]]:
    import matplotlib

    with matplotlib.rc_context(_STYLE):
        from matplotlib.figure import Figure

        figure = Figure(figsize=(5.2, height), layout="constrained")
        yield figure, figure.add_subplot()


def _svg(figure: Any) -> str:
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", transparent=True, metadata={"Date": None})
    svg = buffer.getvalue()
    # Inline in HTML: no XML prolog or DOCTYPE; scales with its grid cell.
    svg = svg[svg.index("<svg"):]
    svg = re.sub(r"\s*<metadata>.*?</metadata>", "", svg, count=1, flags=re.S)
    return re.sub(r'<svg([^>]*?) width="[^"]*" height="[^"]*"', r'<svg\1', svg, count=1)


def column_chart(column: ColumnFigures) -> str | None:
    """An SVG chart fitting the column's type, or None where a sentence says it better
    or the page draws it (categories: :func:`category_bars`)."""
    if column.kind in ("numbers", "confidence", "text") and column.sample:
        return _histogram(column.sample, confidence=column.kind == "confidence",
                          xlabel="characters" if column.kind == "text" else column.name)
    return None


def _histogram(values: list[float], confidence: bool, xlabel: str) -> str:
    distinct = sorted(set(values))
    if len(distinct) <= MAX_BARS and all(float(v).is_integer() for v in distinct):
        return _discrete(values, distinct, xlabel)  # bins around a few integers mislead
    with _figure() as (figure, axes):
        low, high = min(values), max(values)
        if confidence:
            low, high = min(low, 0.0), max(high, 1.0)
        else:
            low, high, outside = _shown_range(values, low, high)
            if outside:
                axes.set_title(f"{outside:,} rows outside the range shown "
                               f"({min(values):,.4g} to {max(values):,.4g})",
                               fontsize=8.5, color="#5d6575", loc="left")
                values = [v for v in values if low <= v <= high]
        if all(float(v).is_integer() for v in values) and 0 < high - low <= 60:
            # Counts (tokens, characters): a bar per whole number, no empty slivers between.
            bins: Any = [x - 0.5 for x in range(int(low), int(high) + 2)]
        else:
            bins = 20 if high > low else 1
        axes.hist(values, bins=bins, range=(low, high) if high > low and isinstance(bins, int)
                  else None, color=ACCENT, edgecolor="white", linewidth=0.6)
        _thousands(axes.yaxis)
        axes.set_xlabel(xlabel)
        axes.set_ylabel("rows")
        return _svg(figure)


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
    counts = [values.count(v) for v in distinct]
    with _figure() as (figure, axes):
        bars = axes.bar([f"{v:g}" for v in distinct], counts, color=ACCENT, width=0.6)
        axes.bar_label(bars, labels=[f"{c:,}" for c in counts], padding=2, fontsize=9,
                       color="#4a5160")
        axes.set_ylim(0, max(counts) * 1.15)
        _thousands(axes.yaxis)
        axes.grid(axis="x", visible=False)
        axes.set_xlabel(xlabel)
        axes.set_ylabel("rows")
        return _svg(figure)


def throughput_chart(points: list[WritePoint]) -> str | None:
    """Rows written over the run and the rate between pieces, or None with too few pieces."""
    if len(points) < 3:
        return None
    seconds = [p.seconds for p in points]
    rows = [p.rows for p in points]
    with _figure(height=2.6) as (figure, axes):
        axes.fill_between(seconds, rows, step="post", color=ACCENT, alpha=0.12)
        axes.step(seconds, rows, where="post", color=ACCENT, linewidth=1.8)
        axes.set_xlabel("seconds since the run started")
        axes.set_ylabel("rows written", color=ACCENT)
        axes.set_ylim(bottom=0)
        axes.set_xlim(left=0)
        _thousands(axes.yaxis)
        windows = _rate_windows(points)
        if windows:
            rate_axes = axes.twinx()
            rate_axes.stairs([rate for _, _, rate in windows],
                             [windows[0][0], *[end for _, end, _ in windows]],
                             color=RATE_ORANGE, linewidth=1.4, baseline=None)
            rate_axes.set_ylabel("rows/s", color=RATE_ORANGE)
            rate_axes.set_ylim(bottom=0)
            rate_axes.grid(False)
            rate_axes.spines["right"].set_visible(True)
            _thousands(rate_axes.yaxis)
        return _svg(figure)


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


def _thousands(axis: Any) -> None:
    """At most 6 ticks, written 12,000 rather than 12000."""
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    axis.set_major_locator(MaxNLocator(6, integer=True))
    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.0f}"))


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
