"""The run report: what a user opens after a run.

Real runs through the real CLI (tiny smoke models, a few dozen rows), then what the
report says about them, read from the HTML file and from the page headless Chromium
renders.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from html import escape
from pathlib import Path
from xml.etree import ElementTree

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from toolkit.run.output.report import REPORT_FILE
from toolkit.run.output.report.charts import column_chart
from toolkit.run.output.report.report_data import (ColumnFigures, error_kind,
                                                  gather_report_data)
from toolkit.run.output.run_directory import RunDirectory


def toolkit(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    here = Path(sys.executable).with_name("toolkit")
    command = str(here) if here.exists() else shutil.which("toolkit") or "toolkit"
    result = subprocess.run([command, *args], capture_output=True, text=True, cwd=cwd,
                            timeout=600, env={**os.environ, "RAY_ADDRESS": ""})
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result


@pytest.fixture(scope="module")
def caption_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """vlm-caption's smoke run: 50 generated pictures, 2 broken on purpose."""
    folder = tmp_path_factory.mktemp("captions")
    result = toolkit("run", "vlm-caption", "--smoke", "--rows", "50", "--output", "out",
                     cwd=folder)
    return folder / "out", result.stdout


@pytest.fixture(scope="module")
def dates_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    folder = tmp_path_factory.mktemp("dates")
    result = toolkit("run", "date-reformat", "--smoke", "--rows", "60", "--output", "out",
                     cwd=folder)
    return folder / "out", result.stdout


@pytest.fixture(scope="module")
def industry_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """text-industry's smoke run: a prompt job whose answer is one of nine declared
    industries, from a tiny random-weight model that only ever picks a few of them."""
    folder = tmp_path_factory.mktemp("industry")
    toolkit("run", "text-industry", "--smoke", "--rows", "40", "--output", "out", cwd=folder)
    return folder / "out"


def sample_header(html: str) -> list[str]:
    """The sample table's column names, left to right."""
    table = html[html.index("<h2>Sample rows</h2>"):]
    header = table[table.index("<tr>"):table.index("</tr>")]
    return re.findall(r"<th[^>]*>([^<]*)</th>", header)


def summary_of(output: Path) -> dict:
    return json.loads((output / "_summary.json").read_text())


def stat(html: str, name: str) -> str:
    """The number in the header card's ``name`` box (rows-in, rows-written, ...)."""
    match = re.search(rf'id="{name}">([^<]*)<', html)
    assert match, name
    return match.group(1)


def test_a_finished_run_writes_its_report_and_prints_the_path(dates_run):
    output, printed = dates_run
    assert "  report:        out/_report.html" in printed.splitlines()
    assert (output / REPORT_FILE).is_file()
    # The toolkit's own file: a rerun with --overwrite deletes it, nothing refuses it.
    manifest = json.loads((output / "_manifest.json").read_text())
    assert REPORT_FILE in manifest["made"]
    # Run again: nothing to do, and the summary still says where the report is.
    again = toolkit("run", "date-reformat", "--smoke", "--rows", "60", "--output", "out",
                    cwd=output.parent).stdout
    assert "Already complete" in again
    assert "  report:        out/_report.html" in again.splitlines()


def test_the_report_counts_are_the_summarys(caption_run, dates_run):
    for output, _ in (caption_run, dates_run):
        html = (output / REPORT_FILE).read_text()
        summary = summary_of(output)
        assert stat(html, "rows-in") == f"{summary['rows_in']:,}"
        assert stat(html, "rows-written") == f"{summary['rows_written']:,}"
        assert stat(html, "rows-ok") == f"{summary['rows_ok']:,}"
        assert stat(html, "error-rows") == f"{summary['error_rows']:,}"


def test_date_reformat_shows_its_accuracy(dates_run):
    output, _ = dates_run
    html = (output / REPORT_FILE).read_text()
    accuracy = summary_of(output)["figures"]["accuracy"]
    assert re.search(r'class="label">accuracy</div><div class="value">'
                     + re.escape(f"{accuracy:,.3f}" if accuracy >= 1 or accuracy == 0
                                 else f"{accuracy:.4g}"), html)


def test_the_data_behind_the_report(caption_run):
    output, _ = caption_run
    data = gather_report_data(RunDirectory(str(output)))
    summary = summary_of(output)
    assert data.job == "vlm-caption" and data.engine == "transformers"
    assert data.fingerprint == json.loads((output / "_manifest.json").read_text())["fingerprint"]
    assert "generated_caption" in data.result_columns
    # Every error row is in exactly one kind (the two pictures are broken differently:
    # one truncated, one not an image at all), each with the ids of its rows.
    assert summary["error_rows"] == 2
    assert sum(kind.count for kind in data.error_kinds) + data.other_error_rows == 2
    assert sorted(kind.message.split(": ", 2)[-1][:26] for kind in data.error_kinds) == [
        "image data is corrupt or t", "not a recognised image for"]
    assert all(id.endswith(".jpg") for kind in data.error_kinds for id in kind.example_ids)
    # Rows over the run end at every row written.
    assert data.writes[-1].rows == summary["rows_written"]
    assert any(row["error"] for row in data.sample_rows)
    caption = next(c for c in data.columns if c.name == "generated_caption")
    assert caption.values + caption.nulls == summary["rows_written"]


def test_error_messages_group_by_kind():
    assert error_kind("cannot identify image file '/data/pics/img_0042.png' (row 17)") == \
        error_kind("cannot identify image file '/data/pics/img_0007.png' (row 3)")
    assert error_kind("request 9f8e7d6c5b4a failed after 3 retries") == \
        "request <id> failed after <n> retries"


def test_the_report_is_self_contained(caption_run):
    html = (caption_run[0] / REPORT_FILE).read_text()
    assert "<script" not in html.lower()
    assert not re.search(r'(src|href)\s*=\s*["\']?\s*(https?:)?//', html, re.I)
    assert not re.search(r"@import|url\(\s*['\"]?(https?:)?//", html, re.I)
    assert "<svg" in html  # the charts are inline
    assert len(html) < 2_000_000


def test_row_values_are_shown_as_text_not_markup(dates_run, tmp_path):
    """A hostile value in an input column is text on the page, not a script."""
    copy = tmp_path / "out"
    shutil.copytree(dates_run[0], copy)
    part = next(copy.glob("part-*.parquet"))
    table = pq.read_table(part)
    column = "First Name"
    names = table[column].to_pylist()
    names[0] = "<script>alert('x')</script>"
    table = table.set_column(table.schema.get_field_index(column), column, pa.array(names))
    pq.write_table(table, part)

    written = toolkit("report", str(copy), "-o", "page.html", cwd=tmp_path).stdout.strip()
    html = (tmp_path / written).read_text()
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in html
    assert "<script" not in html


def test_report_of_a_directory_without_a_finished_run_says_so(tmp_path):
    here = Path(sys.executable).with_name("toolkit")
    result = subprocess.run([str(here), "report", "nowhere"], capture_output=True, text=True,
                            cwd=tmp_path)
    assert result.returncode == 2
    assert "holds no _summary.json: no finished run" in result.stderr


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (CI: apt-get "
                    "install chromium; .ci/run does)")
def test_chromium_renders_a_visible_page_with_the_counts(caption_run, tmp_path):
    from PIL import Image

    output, _ = caption_run
    page = (output / REPORT_FILE).resolve().as_uri()
    shot = tmp_path / "report.png"
    browser = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
               f"--user-data-dir={tmp_path / 'profile'}"]
    subprocess.run([*browser, f"--screenshot={shot}", "--window-size=1280,2000", page],
                   capture_output=True, timeout=120, check=True)
    image = Image.open(shot).convert("RGB").resize((320, 500))
    colours = image.getcolors(maxcolors=320 * 500)  # [(pixels, (r, g, b)), ...]
    not_white = sum(count for count, rgb in colours if min(rgb) < 235)
    assert not_white > 0.05 * 320 * 500, "the page looks blank"
    assert len(colours) > 50, "the page has hardly any colours: no charts drawn?"

    dom = subprocess.run([*browser, "--dump-dom", page], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    text = re.sub(r"<[^>]+>", " ", dom)
    summary = summary_of(output)
    for label, key in (("rows in", "rows_in"), ("rows written", "rows_written"),
                       ("ok", "rows_ok"), ("error rows", "error_rows")):
        assert re.search(rf"{label}\s+{summary[key]:,}\b", text, re.I), label
    assert "generated_caption" in text


def test_checks_confidences_and_finish_reasons_are_shown_when_a_run_has_them(dates_run,
                                                                              tmp_path):
    """Columns and summary sections other jobs and engines add are picked up generically."""
    copy = tmp_path / "out"
    shutil.copytree(dates_run[0], copy)
    summary = summary_of(copy)
    # A generate job's built-in checks are in every summary; a user's own check too.
    assert set(summary["checks"]) == {"truncated", "empty", "invalid"}
    summary["checks"]["date_is_parseable"] = {"failed": 7, "rate": 0.1167}
    summary["samples"][0]["embedding"] = [0.6, 0.8]  # as a job with vectors shows them
    (copy / "_summary.json").write_text(json.dumps(summary))
    part = next(copy.glob("part-*.parquet"))
    table = pq.read_table(part)
    rows = table.num_rows
    table = table.append_column("resp_confidence", pa.array([i / rows for i in range(rows)]))
    finish = table.schema.get_field_index("finish_reason")
    table = table.set_column(finish, "finish_reason",
                             pa.array(["stop"] * (rows - 1) + ["length"]))
    table = table.append_column("embedding", pa.array([[0.6, 0.8, 0.0]] * rows))
    pq.write_table(table, part)

    data = gather_report_data(RunDirectory(str(copy)))
    assert data.checks["date_is_parseable"] == {"failed": 7, "rate": 0.1167}
    kinds = {column.name: column.kind for column in data.columns}
    assert kinds["resp_confidence"] == "confidence"
    assert kinds["finish_reason"] == "categories"
    finish = next(c for c in data.columns if c.name == "finish_reason")
    assert finish.categories == [("stop", rows - 1), ("length", 1)]
    embedding = next(c for c in data.columns if c.name == "embedding")
    assert (embedding.kind, embedding.dimension, embedding.mean_norm) == ("vector", 3, 1.0)

    toolkit("report", str(copy), cwd=tmp_path)
    html = (copy / REPORT_FILE).read_text()
    assert re.search(r"date_is_parseable</td><td class=\"num\">7</td>\s*"
                     r"<td class=\"num\">11.67%</td>", html)


def test_a_report_of_a_run_on_an_object_store(dates_run):
    """Object stores have no directories (as s3://): the same report, written there."""
    import fsspec
    import pyarrow.fs

    memory = fsspec.filesystem("memory")
    memory.store.clear()
    for path in dates_run[0].rglob("*"):
        if path.is_file():
            memory.pipe(f"/bucket/out/{path.relative_to(dates_run[0])}", path.read_bytes())
    fs = pyarrow.fs.PyFileSystem(pyarrow.fs.FSSpecHandler(memory))
    from toolkit.run.output.report import write_report

    written = write_report(RunDirectory("/bucket/out", filesystem=fs))
    assert written == "/bucket/out/_report.html"
    html = memory.cat("/bucket/out/_report.html").decode()
    assert stat(html, "rows-written") == f"{summary_of(dates_run[0])['rows_written']:,}"


def test_the_charts_need_no_plotting_library(dates_run, tmp_path):
    """A cluster image is the user's: the charts are drawn by the toolkit itself, so a
    Python without matplotlib still gets every chart."""
    script = (
        "import sys; sys.modules['matplotlib'] = None\n"  # as if it weren't installed
        "from toolkit.run.output.report import write_report\n"
        f"print(write_report({str(dates_run[0])!r}, 'page.html'))\n"
    )
    subprocess.run([sys.executable, "-c", script], cwd=tmp_path, check=True)
    html = (tmp_path / "page.html").read_text()
    assert "<svg" in html and "matplotlib" not in html
    assert stat(html, "rows-written") == f"{summary_of(dates_run[0])['rows_written']:,}"


def svgs(html: str) -> list[ElementTree.Element]:
    """Each inline chart, parsed as XML (a stray ``<`` or ``&`` would fail here)."""
    return [ElementTree.fromstring(svg)
            for svg in re.findall(r"<svg\b.*?</svg>", html, flags=re.S)]


def texts(svg: ElementTree.Element) -> list[str]:
    return ["".join(t.itertext()) for t in svg.iter("{http://www.w3.org/2000/svg}text")]


def test_charts_are_well_formed_svg_that_shows_user_labels_as_typed(dates_run, tmp_path):
    """A column named with markup characters and a dollar sign is a label, shown as typed;
    large values are written 12,000; the same run gives the same charts."""
    copy = tmp_path / "out"
    shutil.copytree(dates_run[0], copy)
    part = next(copy.glob("part-*.parquet"))
    table = pq.read_table(part)
    name = "price <$5 & up>"
    prices = [1_000.5 * i for i in range(table.num_rows)]  # 0 to about 59,000
    pq.write_table(table.append_column(name, pa.array(prices)), part)
    summary = summary_of(copy)
    summary["samples"][0][name] = prices[0]  # a result column of the job
    (copy / "_summary.json").write_text(json.dumps(summary))

    toolkit("report", str(copy), "-o", "page.html", cwd=tmp_path)
    html = (tmp_path / "page.html").read_text()
    card = html[html.index(f"<h3>{escape(name)}</h3>"):]
    chart = svgs(card[:card.index("</svg>") + 6])[0]
    labels = texts(chart)
    assert name in labels  # the x-axis label, unescaped once parsed
    assert {"10,000", "20,000", "50,000"} <= set(labels)
    assert "width" not in chart.attrib and chart.attrib["viewBox"]  # scales with its cell
    assert len(svgs(html)) >= 2 and "<script" not in html

    toolkit("report", str(copy), "-o", "again.html", cwd=tmp_path)
    assert re.findall(r"<svg\b.*?</svg>", (tmp_path / "again.html").read_text(), re.S) \
        == re.findall(r"<svg\b.*?</svg>", html, re.S)


def test_a_few_whole_numbers_get_a_bar_each_with_its_count_written_out():
    """Star ratings: a bar per value, the count above it and on the axis as 12,000."""
    stars = ColumnFigures(name="stars", kind="numbers", values=12_305, nulls=0,
                          sample=[5.0] * 12_000 + [4.0] * 300 + [1.0] * 5)
    chart = ElementTree.fromstring(column_chart(stars))
    labels = texts(chart)
    assert {"12,000", "300", "5"} <= set(labels)  # the counts above the bars
    assert {"1", "4", "5", "stars", "rows"} <= set(labels)
    assert "10,000" in labels and "10000" not in labels  # a tick of the count axis
    assert len(list(chart.iter("{http://www.w3.org/2000/svg}rect"))) == 3


def test_the_sample_table_shows_results_beside_the_id_and_inputs_after(industry_run):
    """A dozen input columns used to come first, pushing the results off-screen."""
    html = (industry_run / REPORT_FILE).read_text()
    data = gather_report_data(RunDirectory(str(industry_run)))
    header = sample_header(html)
    assert header[:3] == ["Index", "inferred_industry", "inferred_industry_confidence"]
    last_result = max(header.index(c) for c in data.result_columns)
    assert "Company" in data.input_columns
    assert all(header.index(c) > last_result for c in data.input_columns)


def test_every_declared_choice_is_charted_even_those_no_row_got(industry_run):
    """The chart of a choice column lists all nine industries: that no company was
    called a Law Firm is a finding, not a bar to leave out."""
    choices = json.loads((industry_run / "_manifest.json").read_text())["spec"]["output"]["choice"]
    assert summary_of(industry_run)["choices"] == {"inferred_industry": choices}
    data = gather_report_data(RunDirectory(str(industry_run)))
    column = next(c for c in data.columns if c.name == "inferred_industry")
    assert column.kind == "categories" and column.choices == choices
    counts = dict(column.categories)
    assert set(counts) == set(choices)
    assert 0 in counts.values(), "the tiny model gave every industry to some row?"
    assert sum(counts.values()) == column.values
    # On the page each is an HTML label (it wraps in the reader's font, never clipped).
    html = (industry_run / REPORT_FILE).read_text()
    for choice in choices:
        assert re.search(rf'class="bar-label[^"]*">{re.escape(choice)}</div>', html), choice


def test_free_text_gets_a_length_histogram_and_examples_not_a_bar_per_value(dates_run,
                                                                           tmp_path):
    """Twenty different replies over sixty rows: few enough distinct values to pass for
    labels, but sentences; drawn as their lengths, with a few shown in full."""
    copy = tmp_path / "out"
    shutil.copytree(dates_run[0], copy)
    part = next(copy.glob("part-*.parquet"))
    table = pq.read_table(part)
    replies = [f"Thank you for review {i % 20}: we are glad the order arrived on time."
               for i in range(table.num_rows)]
    pq.write_table(table.append_column("reply", pa.array(replies)), part)
    summary = summary_of(copy)
    summary["samples"][0]["reply"] = replies[0]  # a result column of the job
    (copy / "_summary.json").write_text(json.dumps(summary))

    data = gather_report_data(RunDirectory(str(copy)))
    reply = next(c for c in data.columns if c.name == "reply")
    assert reply.kind == "text" and reply.categories == []
    assert len(reply.sample) == table.num_rows  # one length a row: the histogram
    assert 1 <= len(reply.examples) <= 3 and reply.examples[0] in replies
    # Short labels are still bars.
    assert next(c for c in data.columns if c.name == "finish_reason").kind == "categories"

    toolkit("report", str(copy), cwd=tmp_path)
    html = (copy / REPORT_FILE).read_text()
    card = html[html.index("<h3>reply</h3>"):]
    card = card[:card.index("</p>")]
    assert "<svg" in card and "bar-label" not in card
    assert "free text: length in characters" in card
    assert f"<li>{replies[0]}</li>" in card


def test_a_vision_run_shows_each_sample_pictures_thumbnail_in_a_small_file(caption_run):
    """vlm-caption keeps each picture's path, not its bytes: the report draws the
    pictures it names beside their captions, small, inside the page."""
    output, _ = caption_run
    html = (output / REPORT_FILE).read_text()
    data = gather_report_data(RunDirectory(str(output)))
    header = sample_header(html)
    assert header[:3] == ["path", "image", "generated_caption"]
    thumbnails = re.findall(r'<img src="(data:image/(?:jpeg|png);base64,[^"]+)"', html)
    good_rows = [row for row in data.sample_rows if not row["error"]]
    assert len(thumbnails) == len(good_rows) == len(data.thumbnails)  # broken ones: none
    assert sum(len(t) for t in thumbnails) <= 200_000
    assert len(html) < 400_000


def test_thumbnails_come_from_a_local_parquet_input_when_the_output_dropped_the_bytes(
        tmp_path):
    """image-classify on a parquet file of encoded pictures: the output keeps the id
    only, so the pictures are read back from the input, for the sample rows only."""
    from PIL import Image

    from toolkit.run.output.report.thumbnails import sample_thumbnails

    def png(colour: str) -> bytes:
        import io
        buffer = io.BytesIO()
        Image.new("RGB", (300, 200), colour).save(buffer, "PNG")
        return buffer.getvalue()

    images = tmp_path / "images.parquet"
    pq.write_table(pa.table({"id": ["a", "b", "c"],
                             "jpg": [png("red"), b"not a picture", png("blue")]}), images)
    spec = {"data": {"input": str(images)}, "options": {"image_column": "jpg"}}
    rows = [{"id": "a", "label": "x"}, {"id": "b", "label": "y"}, {"id": "zz", "label": "z"}]
    thumbnails = sample_thumbnails(rows, "id", spec)
    assert list(thumbnails) == ["a"]  # "b" does not decode, "zz" is not in the input
    assert thumbnails["a"].startswith("data:image/jpeg;base64,")
    # An input that is not local, or gone, gives no thumbnails and no error.
    assert sample_thumbnails(rows, "id", {**spec, "data": {"input": "hf://some/set"}}) == {}
    assert sample_thumbnails(rows, "id", {**spec, "data": {"input": str(tmp_path / "x")}}) == {}


def test_the_top_cards_split_rows_written_into_ok_failed_a_check_and_errors(caption_run):
    """46 of 50 captions were cut off at max_tokens: they are not ok, and the cards say
    where every written row went."""
    output, _ = caption_run
    html = (output / REPORT_FILE).read_text()
    summary = summary_of(output)
    number = lambda name: int(stat(html, name).replace(",", ""))  # noqa: E731
    assert summary["check_failed_rows"] > 0
    assert number("rows-ok") == summary["rows_ok"]
    assert number("check-failed-rows") == summary["check_failed_rows"]
    assert number("rows-ok") + number("check-failed-rows") + number("error-rows") \
        == number("rows-written")
    assert re.search(rf'id="row-split">Of {summary["rows_written"]:,} rows written: '
                     rf'{summary["rows_ok"]:,} ok, {summary["check_failed_rows"]:,} failed a '
                     rf'check, {summary["error_rows"]:,} error rows', html)
    # Green only when every row is ok.
    assert not re.search(r'class="stat good"><div class="label">ok<', html)
