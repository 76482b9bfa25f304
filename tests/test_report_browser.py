"""The HTML report as a reader sees it: rendered by a real headless Chromium (Debian's
`chromium`, installed by `make test-tools` where it runs as root with apt-get; this test
skips and says so elsewhere). A script run in the page after it loads checks that nothing
makes the page wider than the window (wide tables scroll inside their own box) and that
every figure loaded; a full-page screenshot is written beside the report.

``screenshot(report_html, out_png)`` writes a full-page screenshot of any report; from the
repository root::

    .venv/bin/python -m tests.test_report_browser results/pfld-adult/_report/report.html \
        results/pfld-adult/_report/screenshot.png
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from PIL import Image

from fairdp.analysis import ReportOptions, write_report
from tests.conftest import REPO
from tests.test_analysis_report import synthetic_results

BROWSER = next((b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)
pytestmark = pytest.mark.skipif(BROWSER is None, reason="needs a headless Chromium: apt-get install chromium "
                                                        "(make test-tools does it as root)")
WIDTH, HEIGHT = 1280, 900
CHECK = """<pre id="fairdp-check"></pre><script>
window.addEventListener('load', () => {
  const view = document.documentElement.clientWidth;
  const wide = [];
  for (const el of document.body.querySelectorAll('*')) {
    if (el.closest('.scroll') && !el.classList.contains('scroll')) continue;  // scrolls in its box
    const r = el.getBoundingClientRect();
    if (r.right > view + 1) wide.push(el.tagName + (el.id ? '#' + el.id : '') + ' ' + Math.round(r.right));
  }
  const imgs = [...document.images];
  document.getElementById('fairdp-check').textContent = JSON.stringify({
    view: view, pageWidth: document.documentElement.scrollWidth, wide: wide.slice(0, 20),
    images: imgs.length, broken: imgs.filter(i => !(i.complete && i.naturalWidth > 0)).length,
    scrolling: [...document.querySelectorAll('.scroll')].filter(d => d.scrollWidth > d.clientWidth).length});
});
</script>"""


SIZE = """<pre id="fairdp-size"></pre><script>
window.addEventListener('load', () => {
  document.getElementById('fairdp-size').textContent = JSON.stringify({
    width: document.documentElement.scrollWidth, height: document.documentElement.scrollHeight});
});
</script>"""
# Chromium draws a window taller than about 50,000 px only in part ("tile memory limits
# exceeded"): a long report is shot in slices of this height and stitched.
SLICE_HEIGHT = 8000


def _chromium(*args: str, timeout: float = 120, size: tuple[int, int] = (WIDTH, HEIGHT)) -> subprocess.CompletedProcess:
    return subprocess.run([BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           f"--window-size={size[0]},{size[1]}", *args], capture_output=True, text=True,
                          timeout=timeout)


def _with(page: str, html: str) -> str:
    """``page`` with ``html`` added at the end of its body."""
    return page.replace("</body>", html + "\n</body>") if "</body>" in page else page + html


def _read(report_html: Path) -> str:
    """The page, its relative links (figures, other pages) resolved from its own folder when a
    copy of it is opened from elsewhere."""
    page = Path(report_html).read_text(encoding="utf-8")
    base = f'<base href="{Path(report_html).resolve().parent.as_uri()}/">'
    return page.replace("<head>", "<head>" + base, 1) if "<head>" in page else base + page


def page_height(report_html: Path, width: int = WIDTH) -> int:
    """The height in CSS pixels of ``report_html`` laid out in a window ``width`` wide."""
    page = _read(report_html)
    with tempfile.TemporaryDirectory() as tmp:
        measured = Path(tmp) / "measured.html"
        measured.write_text(_with(page, SIZE), encoding="utf-8")
        dom = _chromium("--virtual-time-budget=10000", "--dump-dom", measured.as_uri(), size=(width, HEIGHT))
    found = re.search(r'<pre id="fairdp-size">(.*?)</pre>', dom.stdout, flags=re.S)
    if not found or not found.group(1):
        raise RuntimeError(f"chromium did not lay out {report_html}: {dom.stderr[-2000:]}")
    return int(json.loads(found.group(1).replace("&quot;", '"'))["height"])


def screenshot(report_html: str | Path, out_png: str | Path, width: int = WIDTH, scale: float = 1.0) -> Path:
    """Write a full-page screenshot of ``report_html`` (a report's page, its figures beside it) as the
    PNG ``out_png``: the page laid out ``width`` CSS pixels wide, every pixel of its height,
    at ``scale`` device pixels per CSS pixel (0.5 halves each side, for a smaller file).
    Shot in slices of ``SLICE_HEIGHT`` (the page shifted up under the window), stitched."""
    if BROWSER is None:
        raise RuntimeError("needs a headless Chromium: apt-get install chromium")
    report_html, out_png = Path(report_html), Path(out_png)
    page = _read(report_html)
    height = page_height(report_html, width)
    out = Image.new("RGB", (round(width * scale), round(height * scale)), "white")
    with tempfile.TemporaryDirectory() as tmp:
        for top in range(0, height, SLICE_HEIGHT):
            rows = min(SLICE_HEIGHT, height - top)
            part, shot = Path(tmp) / f"part{top}.html", Path(tmp) / f"part{top}.png"
            # the body drawn `top` pixels higher: the window shows the page from `top` down
            part.write_text(_with(page, f"<style>body{{position:relative;top:-{top}px}}</style>"), encoding="utf-8")
            done = _chromium(f"--force-device-scale-factor={scale}", f"--screenshot={shot}", part.as_uri(),
                             size=(width, rows), timeout=300)
            if not shot.exists():
                raise RuntimeError(f"chromium wrote no screenshot of {report_html}: {done.stderr[-2000:]}")
            with Image.open(shot) as image:
                out.paste(image.convert("RGB"), (0, round(top * scale)))
    out_png.parent.mkdir(parents=True, exist_ok=True)
    out.save(out_png, optimize=True)
    return out_png


def page_check(page_html: Path) -> dict:
    """What Chromium lays out for ``page_html`` in a 1280-wide window: the elements reaching past
    its right edge (outside scrolling boxes), the page's width, its images and how many did not
    load, and how many tables scroll (their columns cut at the window's edge)."""
    with tempfile.TemporaryDirectory() as tmp:
        checked = Path(tmp) / "checked.html"
        checked.write_text(_with(_read(page_html), CHECK), encoding="utf-8")
        dom = _chromium("--virtual-time-budget=10000", "--dump-dom", checked.as_uri())
    found = re.search(r'<pre id="fairdp-check">(.*?)</pre>', dom.stdout, flags=re.S)
    assert found and found.group(1), dom.stderr[-2000:]
    return json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))


def _pages(report: Path) -> list[Path]:
    return [report / "report.html", *sorted((report / "pages").glob("*.html"))]


def test_every_page_of_a_report_fits_the_window_and_every_figure_loads_in_chromium(tmp_path):
    results = synthetic_results()
    report = tmp_path / "report"
    write_report(results, report, ReportOptions(rt=1.0, rts=(0, 1, 3)))
    # the first page, the widest tables' pages and a figure's (every page of every committed report: slow set)
    checked = [report / "report.html", *(report / "pages" / f"{name}.html" for name in (
        "selected-configurations", "relaxation-threshold-sweep", "differences-the-intervals-support",
        "pareto-fronts"))]
    for page in checked:
        result = page_check(page)
        assert result["wide"] == [] and result["pageWidth"] <= result["view"], (page.name, result)
        assert result["scrolling"] == 0 and result["broken"] == 0, (page.name, result)
        assert result["images"] == page.read_text(encoding="utf-8").count("<img "), (page.name, result)
    assert page_check(report / "report.html")["images"] == 1  # the headline figure
    shot = screenshot(report / "report.html", report / "screenshot.png")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# report.html of each committed report before it became a first page and linked pages (bytes)
ONE_FILE_REPORTS = {"demo-reference": 596_588, "federate-adult": 668_424, "pfld-adult": 1_883_151,
                    "pfld-compas": 2_145_720, "pfld-adult-sensitivity": 2_224_589}
COMMITTED = sorted(p.parent for p in (REPO / "results").glob("*/_report/report.html"))


@pytest.mark.parametrize("report", COMMITTED, ids=lambda p: p.parent.name)
def test_a_committed_reports_first_page_reads_in_three_screens_and_its_pages_weigh_a_third(report):
    """The pfld-adult report.md was 1,854 lines and its report.html 1.8 MB: now the first page is
    at most three 1280 x 900 screens and 400 Markdown lines, and the HTML pages together weigh
    at most a third of the one file they replace (the figures are files beside them)."""
    assert page_height(report / "report.html") <= 3 * HEIGHT
    assert (report / "report.md").read_text(encoding="utf-8").count("\n") <= 400
    weight = sum(p.stat().st_size for p in _pages(report))
    # a report made after the split had no one file: held to the largest one's third
    assert weight <= ONE_FILE_REPORTS.get(report.parent.name, max(ONE_FILE_REPORTS.values())) / 3, weight
    with Image.open(report / "screenshot.png") as shot:  # the committed screenshot is the first page's
        assert shot.size[0] == WIDTH // 2 and shot.size[1] <= 3 * HEIGHT // 2


@pytest.mark.slow  # a Chromium start per page of every committed report
@pytest.mark.parametrize("report", COMMITTED, ids=lambda p: p.parent.name)
def test_no_page_of_a_committed_report_is_cut_at_1280_pixels(report):
    for page in _pages(report):
        result = page_check(page)
        assert result["wide"] == [] and result["scrolling"] == 0 and result["broken"] == 0, (page.name, result)


@pytest.mark.slow  # a tool for the docs' screenshots, several Chromium starts: make test-slow
def test_a_screenshot_holds_the_whole_page_however_long(tmp_path, monkeypatch):
    """The screenshot was the first 900 pixels of the page; it is now every pixel of it, in
    slices (made small here so that the test stitches several) that join without a seam."""

    write_report(synthetic_results(), tmp_path, ReportOptions(rt=1.0, rts=(0, 1)))
    report = tmp_path / "pages" / "relaxation-threshold-sweep.html"  # a long page
    height = page_height(report)
    assert height > 3 * HEIGHT
    monkeypatch.setattr(sys.modules[__name__], "SLICE_HEIGHT", 3000)
    whole = screenshot(report, tmp_path / "whole.png")
    half = screenshot(report, tmp_path / "half.png", scale=0.5)
    with Image.open(whole) as a, Image.open(half) as b:
        assert a.size == (WIDTH, height) and b.size == (WIDTH // 2, round(height / 2))
        pixels = a.convert("L")
        # every slice drew the page: no slice is blank (a blank one is a single colour)
        for top in range(0, height, 3000):
            band = pixels.crop((0, top, WIDTH, min(top + 3000, height)))
            assert band.getextrema()[0] < 128, top  # some dark text in each slice


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.test_report_browser",
                                     description="a full-page screenshot of a report.html")
    parser.add_argument("report", help="the report.html")
    parser.add_argument("png", help="the PNG to write")
    parser.add_argument("--width", type=int, default=WIDTH, help=f"window width in CSS pixels (default {WIDTH})")
    parser.add_argument("--scale", type=float, default=1.0, help="device pixels per CSS pixel (default 1)")
    args = parser.parse_args(argv)
    path = screenshot(args.report, args.png, args.width, args.scale)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
