"""Drawing primitives of the report's charts: a plot area with axes, "nice" ticks,
grid and text, written as a small inline SVG (no scripts, no network).

Hand-written rather than drawn by a plotting library: every run writes its report,
and importing and running matplotlib took about a second of it for three charts.
What a chart shows (which bars, which lines) is :mod:`.charts`'s; how an axis, a
tick or a label is drawn is this module's.

Text stays SVG ``<text>`` (selectable, shown in the page's font). The page's font
is not known here, so label widths are estimated (:func:`text_width`) with room to
spare, and long labels are shortened rather than clipped. Coordinates are rounded
to 0.1 so the same figures always give the same bytes.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from html import escape

#: The viewBox's size: about a grid cell's width in CSS pixels, so a font size here is
#: close to its size on the page (the SVG scales with its cell: no width/height).
WIDTH, HEIGHT = 480.0, 240.0
FONT_SIZE = 12.0
INK = "#4a5160"
MUTED = "#5d6575"
AXIS = "#c9ced6"
GRID = "#eceff3"
FONT = 'system-ui, -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif'


def text_width(text: str, size: float = FONT_SIZE) -> float:
    """A generous estimate of ``text``'s width in a proportional sans-serif font
    (digits and most letters are about 0.55 em; this errs wide so nothing is clipped)."""
    return len(text) * size * 0.6


def fit(text: str, width: float, size: float = FONT_SIZE) -> str:
    """``text`` shortened with an ellipsis to fit ``width``: a long column name as an
    axis label would otherwise run out of the picture."""
    most = max(4, int(width / (size * 0.6)))
    return text if len(text) <= most else text[:most - 1] + "…"


def number(value: float, step: float = 1.0) -> str:
    """A tick label: thousands separators (12,000) and only the decimals ``step`` needs
    (0.2, 0.25), never 12000.000001 from floating-point steps."""
    decimals = next((d for d in range(7) if (scaled := step * 10 ** d) >= 0.5
                     and abs(scaled - round(scaled)) < 1e-6 * scaled), None)
    if decimals is None:  # steps below a millionth: 2.5e-09
        return f"{value:.3g}"
    if round(value, decimals) == 0:
        value = 0.0  # never "-0.0" from a step's rounding error
    return f"{value:,.{decimals}f}"


def value(number_: float) -> str:
    """A data value in a sentence: 21,650 rather than 2.165e+04, 0.1234 for small ones."""
    return f"{number_:,.0f}" if abs(number_) >= 1000 else f"{number_:.4g}"


def _steps(span: float, integer: bool) -> Iterator[float]:
    """Nice steps, smallest first: 1, 2, 2.5 and 5 times powers of ten; for whole numbers
    (counts: no 2.5 rows) 1, 2, 3 and 5 times (1,346 rows: 0 to 1,500 by 300)."""
    finite = span > 0 and math.isfinite(span)
    power = 10.0 ** math.floor(math.log10(span / 100)) if finite else 1.0
    while True:
        for factor in (1, 2, 2.5, 3, 5) if integer else (1, 2, 2.5, 5):
            step = factor * power
            if not integer or (step >= 1 and step.is_integer()):
                yield step
        power *= 10


def _multiples(low: float, high: float, step: float) -> list[float]:
    first = math.ceil(low / step - 1e-9)
    last = math.floor(high / step + 1e-9)
    digits = max(0, 3 - math.floor(math.log10(step)))  # 0.30000000000000004 -> 0.3
    return [round(k * step, digits) for k in range(first, last + 1)]


def ticks(low: float, high: float, most: int = 6, integer: bool = False) -> list[float]:
    """Nice tick values from ``low`` to ``high`` (both inside), as many as fit in
    ``most``; whole numbers only where ``integer``."""
    if high <= low:
        return [low]
    return next(values for step in _steps(high - low, integer)
                if len(values := _multiples(low, high, step)) <= most)


def x_ticks(low: float, high: float, integer: bool = False) -> list[float]:
    """:func:`ticks` for an x-axis: fewer where the labels of 6 would touch (values in
    the millions are wide)."""
    for most in range(6, 1, -1):
        values = ticks(low, high, most, integer)
        widest = max((text_width(number(v, _step(values))) for v in values), default=0)
        if (widest + 12) * len(values) <= WIDTH - 100:
            return values
    return values


def ceiling(high: float, most: int = 6) -> float:
    """The top of a count axis from 0: the first nice tick at or above ``high`` (a grid
    line at the top and the tallest bar under it), with at most ``most`` ticks."""
    if high <= 0:
        return 1.0
    return next(top for step in _steps(high, integer=True)
                if (top := math.ceil(high / step - 1e-9) * step) / step + 1 <= most)


def _n(value: float) -> str:
    text = f"{value:.1f}"
    return text[:-2] if text.endswith(".0") else text


def text(x: float, y: float, content: str, *, anchor: str = "middle",
         size: float = FONT_SIZE, colour: str = INK, rotate: bool = False,
         weight: str | None = None) -> str:
    """A ``<text>`` element; ``content`` is escaped (a column called ``<$5 & up>``
    shows as typed). ``rotate`` turns it to read upwards (a y-axis label)."""
    extra = f' transform="rotate(-90 {_n(x)} {_n(y)})"' if rotate else ""
    extra += f' font-weight="{weight}"' if weight else ""
    fill = f' fill="{colour}"' if colour != INK else ""
    font = f' font-size="{_n(size)}"' if size != FONT_SIZE else ""
    return (f'<text x="{_n(x)}" y="{_n(y)}" text-anchor="{anchor}"{fill}{font}{extra}>'
            f"{escape(content)}</text>")


def line(x1: float, y1: float, x2: float, y2: float, colour: str,
         width: float = 1.0) -> str:
    return (f'<line x1="{_n(x1)}" y1="{_n(y1)}" x2="{_n(x2)}" y2="{_n(y2)}" '
            f'stroke="{colour}" stroke-width="{_n(width)}"/>')


def rect(x: float, y: float, width: float, height: float, colour: str) -> str:
    return (f'<rect x="{_n(x)}" y="{_n(y)}" width="{_n(max(width, 0))}" '
            f'height="{_n(max(height, 0))}" fill="{colour}"/>')


def path(points: Sequence[tuple[float, float]], colour: str, width: float = 1.0,
         fill: str | None = None, opacity: float | None = None) -> str:
    """A polyline through ``points`` (closed and filled where ``fill``)."""
    d = " ".join(f"{'M' if i == 0 else 'L'}{_n(x)} {_n(y)}" for i, (x, y) in enumerate(points))
    if fill:
        alpha = f' fill-opacity="{opacity}"' if opacity is not None else ""
        return f'<path d="{d} Z" fill="{fill}"{alpha} stroke="none"/>'
    return (f'<path d="{d}" fill="none" stroke="{colour}" stroke-width="{_n(width)}" '
            f'stroke-linejoin="round"/>')


def document(elements: Sequence[str], label: str) -> str:
    """The ``<svg>`` element of a chart: a viewBox and no width/height, so it scales
    with its grid cell; ``label`` is what a screen reader says."""
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_n(WIDTH)} {_n(HEIGHT)}" '
            f'role="img" aria-label="{escape(label)}" font-family="{escape(FONT)}" '
            f'font-size="{_n(FONT_SIZE)}" fill="{INK}">\n' + "\n".join(elements) + "\n</svg>")


class Axis:
    """One axis's scale: data values ``low`` .. ``high`` onto pixels ``start`` .. ``end``
    (``end`` < ``start`` for a y-axis, which grows upwards)."""

    def __init__(self, low: float, high: float, start: float, end: float) -> None:
        self.low, self.high = low, high if high > low else low + 1
        self.start, self.end = start, end

    def __call__(self, value: float) -> float:
        return self.start + (value - self.low) / (self.high - self.low) * (self.end - self.start)


class Plot:
    """A chart's plot area: margins sized to the tick labels, then axes, grid and labels
    drawn around what the chart adds in :attr:`elements`.

    Args:
        x: (low, high) of the x-axis data; ``y`` and ``right`` likewise for the left
            and the optional right-hand y-axes (``right`` for a second quantity).
        y_ticks, right_ticks, x_ticks: the tick values (see :func:`ticks`).
        title: a small line above the plot (e.g. what was left out).
    """

    def __init__(self, *, x: tuple[float, float], y: tuple[float, float],
                 x_ticks: Sequence[float], y_ticks: Sequence[float], x_label: str,
                 y_label: str, right: tuple[float, float] | None = None,
                 right_ticks: Sequence[float] = (), right_label: str = "",
                 y_colour: str = INK, right_colour: str = INK, title: str = "",
                 x_tick_text: Sequence[str] | None = None) -> None:
        self.y_text = [number(v, _step(y_ticks)) for v in y_ticks]
        self.right_text = [number(v, _step(right_ticks)) for v in right_ticks]
        self.x_text = list(x_tick_text) if x_tick_text is not None else [
            number(v, _step(x_ticks)) for v in x_ticks]
        # Room for the widest tick label, the tick and the rotated axis label; without a
        # right-hand axis, for half the last x tick's label, centred on the plot's edge.
        label_room = 8 + FONT_SIZE * 1.3 + 6
        left = label_room + max((text_width(t) for t in self.y_text), default=0)
        if right:
            right_room = label_room + max((text_width(t) for t in self.right_text), default=0)
        else:
            right_room = 12 + (text_width(self.x_text[-1]) / 2 if self.x_text else 0)
        top = 10 + (FONT_SIZE * 1.4 if title else 0)
        bottom = FONT_SIZE * 3.1 + 6
        self.x = Axis(*x, left, WIDTH - right_room)
        self.y = Axis(*y, HEIGHT - bottom, top)
        self.right = Axis(*right, HEIGHT - bottom, top) if right else None
        self.x_ticks, self.y_ticks = list(x_ticks), list(y_ticks)
        self.right_ticks = list(right_ticks)
        self.labels = (x_label, y_label, right_label)
        self.colours = (y_colour, right_colour)
        self.title = title
        self.elements: list[str] = []

    def grid(self, vertical: bool = False) -> list[str]:
        """Light lines at the left axis's ticks (and the x-axis's), under the data."""
        left, right = self.x.start, self.x.end
        lines = [line(left, self.y(v), right, self.y(v), GRID) for v in self.y_ticks]
        if vertical:
            lines += [line(self.x(v), self.y.start, self.x(v), self.y.end, GRID)
                      for v in self.x_ticks]
        return lines

    def svg(self, label: str, vertical_grid: bool = False) -> str:
        """The chart: grid, then the data, then axes and text on top."""
        x, y = self.x, self.y
        x_label, y_label, right_label = self.labels
        y_colour, right_colour = self.colours
        out = [*self.grid(vertical_grid), *self.elements,
               line(x.start, y.start, x.end, y.start, AXIS),
               line(x.start, y.start, x.start, y.end, AXIS)]
        # Smaller labels where they would touch (a dozen bars named in the millions).
        room = min((abs(x(b) - x(a)) for a, b in zip(self.x_ticks, self.x_ticks[1:])),
                   default=WIDTH) - 4
        widest = max((len(t) for t in self.x_text), default=1)
        size = max(8.0, min(FONT_SIZE, room / (0.6 * widest)))
        every = math.ceil(0.6 * widest * size / max(room, 1))  # then every 2nd, 3rd...
        for i, (value, label_text) in enumerate(zip(self.x_ticks, self.x_text)):
            out.append(line(x(value), y.start, x(value), y.start + 4, AXIS))
            if i % every == 0:
                out.append(text(x(value), y.start + 6 + FONT_SIZE * 0.85, label_text,
                                size=size))
        for value, label_text in zip(self.y_ticks, self.y_text):
            out.append(line(x.start - 4, y(value), x.start, y(value), AXIS))
            out.append(text(x.start - 6, y(value) + FONT_SIZE * 0.35, label_text, anchor="end"))
        middle = (y.start + y.end) / 2
        out.append(text((x.start + x.end) / 2, HEIGHT - 6,
                        fit(x_label, x.end - x.start)))
        out.append(text(8 + FONT_SIZE * 0.85, middle, fit(y_label, y.start - y.end),
                        rotate=True, colour=y_colour))
        if self.right is not None:
            out.append(line(x.end, y.start, x.end, y.end, AXIS))
            for value, label_text in zip(self.right_ticks, self.right_text):
                out.append(line(x.end, self.right(value), x.end + 4, self.right(value), AXIS))
                out.append(text(x.end + 6, self.right(value) + FONT_SIZE * 0.35, label_text,
                                anchor="start"))
            out.append(text(WIDTH - 8, middle, fit(right_label, y.start - y.end),
                            rotate=True, colour=right_colour))
        if self.title:
            out.append(text(x.start, FONT_SIZE + 2, fit(self.title, WIDTH - x.start, 10.5),
                            anchor="start", size=10.5, colour=MUTED))
        return document(out, label)


def _step(values: Sequence[float]) -> float:
    return values[1] - values[0] if len(values) > 1 else 1.0
