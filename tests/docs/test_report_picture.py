"""The report's picture in the docs: a small PNG of a real report, shown where the
report is described, with the commands that make it again."""

from __future__ import annotations

from pathlib import Path

from PIL import Image

DOCS = Path(__file__).resolve().parents[2] / "docs"
PICTURE = DOCS / "images" / "report.png"


def test_the_report_picture_is_a_small_png_shown_in_jobs_md_and_made_in_development_md():
    with Image.open(PICTURE) as picture:
        assert picture.format == "PNG"
        assert picture.size == (1100, 1400)
    assert PICTURE.stat().st_size < 200_000
    assert "](images/report.png)" in (DOCS / "jobs.md").read_text()
    development = (DOCS / "development.md").read_text()
    assert "--screenshot=/tmp/pic/report.png" in development
    assert "save('docs/images/report.png'" in development
