"""Each HTML report in headless Chromium, offline: it loads with no console message, every image decodes and the
widest table fits a 1,400 px window.

Chromium is Debian's ``chromium``; when it is missing the test installs it with apt-get (root only; set
MBRIDGE_NO_APT=1 to forbid) and skips, saying why, when it cannot. Offline means every host name resolves to
nothing (``--host-resolver-rules``), so a page that needed a CDN would log the failure of its own script.
A copy of each page gets a checking script appended (the reports themselves carry none); it logs one line that the
test reads from Chromium's console log.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

CHECK = """<script>
window.addEventListener('load', () => {
  const imgs = [...document.images];
  const bad = imgs.filter(i => !(i.complete && i.naturalWidth > 0)).length;
  const width = Math.max(0, ...[...document.querySelectorAll('table')].map(t => t.getBoundingClientRect().right));
  const page = document.documentElement.scrollWidth;
  const brand = document.querySelectorAll('header.brand').length;
  const prov = document.querySelectorAll('#provenance').length;
  console.log(`MBRIDGE_CHECK images=${imgs.length} broken=${bad} table_right=${Math.ceil(width)} ` +
              `page_width=${page} brand=${brand} provenance=${prov}`);
});
</script>"""


def chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        if path := shutil.which(name):
            return path
    if os.environ.get("MBRIDGE_NO_APT") == "1":
        pytest.skip("chromium is not installed and MBRIDGE_NO_APT=1 forbids installing it")
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip("chromium is not installed and apt-get cannot be run here (not root, or not Debian)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    proc = subprocess.run(["apt-get", "install", "-y", "-q", "chromium"], capture_output=True, text=True,
                          env=env, timeout=900, check=False)
    if proc.returncode != 0 or not shutil.which("chromium"):
        pytest.skip(f"apt-get install chromium failed (rc {proc.returncode}): {proc.stderr.strip()[-300:]}")
    return shutil.which("chromium")  # type: ignore[return-value]


def render(browser: str, page: Path, tmp: Path) -> list[str]:
    """Chromium's console messages for ``page`` (with the check appended), loaded offline in 1,400 x 900."""
    copy = tmp / f"checked_{page.name}"
    copy.write_text(page.read_text().replace("</body>", CHECK + "</body>"))
    proc = subprocess.run(
        [browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--enable-logging=stderr",
         "--v=0", "--window-size=1400,900", "--host-resolver-rules=MAP * ~NOTFOUND", "--virtual-time-budget=5000",
         f"--user-data-dir={tmp / 'profile'}", "--dump-dom", copy.as_uri()],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "MBRIDGE_CHECK" in proc.stdout or "MBRIDGE_CHECK" in proc.stderr, proc.stderr[-2000:]
    return re.findall(r":CONSOLE(?:\(\d+\))?:?\d*\] (.*)", proc.stderr)


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Every page the plugin writes: the A/B and refit pages of a dry-run with logs (one failed point each), the
    demo's pages from the recorded GPU runs, and the preflight page of a sweep with rejected points."""
    import sys

    from helpers import CONF, run_cli, write_case
    from test_preflight import KIMI, SCENARIO
    from test_report_readability import build_refit_page
    from test_reports import build_ab_results

    ab_root, _ = build_ab_results(tmp_path_factory.mktemp("ab"))
    refit = build_refit_page(tmp_path_factory.mktemp("refit"))
    demo = tmp_path_factory.mktemp("demo")
    proc = subprocess.run([sys.executable, "-m", "cloudai_mbridge.reports.demo", "--output-dir", str(demo)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    pf = tmp_path_factory.mktemp("preflight")
    _, scenario = write_case(pf / "conf", KIMI + "ep = [32, 7]\nmbs = [1, 4]\n", SCENARIO)
    proc = run_cli("preflight", "--system-config", str(CONF / "system" / "slurm_b300_efa.toml"), "--test-scenario",
                   str(scenario), "--output-dir", str(pf / "out"), cwd=pf)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return [ab_root / "mbridge_ab.html", refit, demo / "mbridge_ab.html", demo / "mbridge_refit.html",
            pf / "out" / "preflight.html"]


def test_reports_load_offline_without_console_errors(pages: list[Path], tmp_path: Path) -> None:
    browser = chromium()
    for page in pages:
        messages = render(browser, page, tmp_path)
        checks = [m for m in messages if "MBRIDGE_CHECK" in m]
        others = [m for m in messages if "MBRIDGE_CHECK" not in m]
        assert others == [], f"{page.name}: console says {others}"
        (check,) = checks
        found = dict(re.findall(r"(\w+)=(\d+)", check))
        if page.name != "preflight.html":  # preflight draws its bars in CSS, not as images
            assert int(found["images"]) >= 1, f"{page.name}: {check}"
        assert found["broken"] == "0", f"{page.name}: {check}"
        assert int(found["table_right"]) <= 1400, f"{page.name}: a table ends at {found['table_right']} px"
        assert int(found["page_width"]) <= 1400, f"{page.name}: the page is {found['page_width']} px wide"
        assert found["brand"] == "1" and found["provenance"] == "1", f"{page.name}: {check}"


def test_the_check_sees_a_cdn_page_fail(tmp_path: Path) -> None:
    """The negative control: a page that needs a CDN script does log an error offline."""
    browser = chromium()
    page = tmp_path / "cdn.html"
    page.write_text("<!doctype html><html><head><script src='https://cdn.jsdelivr.net/npm/chart.js@4.4.3/dist/"
                    "chart.umd.min.js'></script></head><body><script>new Chart()</script></body></html>")
    messages = render(browser, page, tmp_path)
    assert any("Chart is not defined" in m for m in messages)


def test_the_check_sees_a_page_wider_than_the_window(tmp_path: Path) -> None:
    """The negative control of the width check: an unwrappable table and a wide block are measured as such."""
    browser = chromium()
    page = tmp_path / "wide.html"
    page.write_text("<!doctype html><html><body><table><tr><td style='white-space:nowrap'>" + "x" * 400
                    + "</td></tr></table><div style='width:2000px'>w</div></body></html>")
    (check,) = [m for m in render(browser, page, tmp_path) if "MBRIDGE_CHECK" in m]
    found = dict(re.findall(r"(\w+)=(\d+)", check))
    assert int(found["table_right"]) > 1400 and int(found["page_width"]) >= 2000
    assert found["brand"] == "0" and found["provenance"] == "0"
