"""The report's HTML: one self-contained file (inline CSS and SVG, system fonts, no
scripts), rendered by Jinja2 with autoescaping on: row values are user data."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from toolkit.run.output.report.charts import category_bars, column_chart, throughput_chart
from toolkit.run.output.report.report_data import ReportData

TEMPLATE = "report.html.j2"


def render_page(data: ReportData) -> str:
    """The report of ``data`` as one HTML document."""
    import jinja2
    from markupsafe import Markup

    environment = jinja2.Environment(
        # The template beside this module, found without importing a package by name.
        loader=jinja2.FileSystemLoader(Path(__file__).parent),
        autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters["num"] = _number
    # The only markup not escaped: SVG that charts.py wrote (it escapes every label).
    charts = [(column, Markup(svg) if (svg := column_chart(column)) else None,
               category_bars(column) if column.kind == "categories" else [])
              for column in data.columns]
    throughput = throughput_chart(data.writes)
    summary = data.summary
    return environment.get_template(TEMPLATE).render(
        data=data, summary=summary, charts=charts,
        throughput=Markup(throughput) if throughput else None,
        steady_rate=_steady_rate(data),
        # What the run produced first, beside the id (and the picture): with a dozen
        # input columns first, the results were off-screen to the right.
        sample_columns=[data.id_column, *data.result_columns,
                        *_filled([data.check_column, "error"], data), *data.input_columns],
    )


def _filled(columns: list[str | None], data: ReportData) -> list[str]:
    """Those of ``columns`` some sample row has a value in: an empty error column
    would only push the inputs further right."""
    return [c for c in columns if c and any(row.get(c) for row in data.sample_rows)]


def _number(value: Any, digits: int = 1) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.{digits}f}" if abs(value) >= 1 or value == 0 else f"{value:.4g}"
    return str(value)


def _steady_rate(data: ReportData) -> float | None:
    """Rows/s from the first written piece to the last: the rate once rows came,
    without the start-up (starting Ray, loading the model) the run's average includes."""
    points = data.writes[1:]
    if len(points) < 2 or points[-1].seconds <= points[0].seconds:
        return None
    return (points[-1].rows - points[0].rows) / (points[-1].seconds - points[0].seconds)
