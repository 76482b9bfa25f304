"""The HTML report as a reader sees it: rendered by a real headless Chromium (Debian's
`chromium`, installed by `make test-tools` where it runs as root with apt-get; this test
skips and says so elsewhere). A script run in the page after it loads checks that nothing
makes the page wider than the window (wide tables scroll inside their own box) and that
every figure loaded; a screenshot is written beside the report."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from fairdp.analysis import write_report
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


def _chromium(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           f"--window-size={WIDTH},{HEIGHT}", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_the_html_report_fits_the_window_and_every_figure_loads_in_chromium(tmp_path):
    results = synthetic_results()
    write_report(results, tmp_path / "report", rt=1.0, rts=(0, 1, 3))
    page = (tmp_path / "report" / "report.html").read_text(encoding="utf-8")
    checked = tmp_path / "checked.html"
    checked.write_text(page.replace("</body>", CHECK + "\n</body>"), encoding="utf-8")
    dom = _chromium("--virtual-time-budget=10000", "--dump-dom", checked.as_uri())
    found = re.search(r'<pre id="fairdp-check">(.*?)</pre>', dom.stdout, flags=re.S)
    assert found and found.group(1), dom.stderr[-2000:]
    result = json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    assert result["wide"] == [] and result["pageWidth"] <= result["view"], result
    assert result["images"] == page.count("data:image/png;base64,") >= 5 and result["broken"] == 0, result
    shot = tmp_path / "report.png"
    _chromium(f"--screenshot={shot}", (tmp_path / "report" / "report.html").as_uri())
    assert shot.exists() and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
